"""The classic group protocol at the wire (GRP-1): the coordinator's rules, request by request.

Clients act on the exact error a coordinator answers, so the order of its checks matters:
- an OffsetCommit carrying the previous generation, sent while the next generation is being
  synced (CompletingRebalance), is ILLEGAL_GENERATION: Kafka checks the member and its
  generation before the rebalance state (ClassicGroup.validateOffsetCommit), and a client
  that sees ILLEGAL_GENERATION rejoins, where REBALANCE_IN_PROGRESS would have it retry;
  a commit of the current generation in that window is REBALANCE_IN_PROGRESS;
- DescribeConfigs of a group (Kafka 4.0's GROUP resource) answers its consumer.* configs;
- a static member (KIP-345) that restarts while it leads a stable group takes its place under
  a new member id without a rebalance: same generation, the other members keep heartbeating,
  and from JoinGroup v9 the answer says it leads and should skip the assignment (KIP-814).
"""
from __future__ import annotations

import struct
import time

import pytest

from conformance.capabilities import CLASSIC_GROUP_APIS
from conformance.ops import expect
from conformance.wire import answered_entry, error_name, request_name
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

COLUMN = "wire"
JOIN_RANGE = (4, 9)  # v4 brings MEMBER_ID_REQUIRED (KIP-394); v9 skip_assignment (KIP-814)
SYNC_RANGE = (3, 5)  # v3 brings group_instance_id (KIP-345)
HEARTBEAT_RANGE = (3, 4)  # v3 brings group_instance_id
SKIP_ASSIGNMENT_VERSION = 9  # KIP-814
OFFSET_COMMIT_RANGE = (7, 9)  # v7 brings group_instance_id; v10 names topics by id
FIND_COORDINATOR_RANGE = (1, 3)  # v4 batches keys
SESSION_TIMEOUT_MS = 30_000
REBALANCE_TIMEOUT_MS = 30_000
JOIN_ANSWER_S = 45.0  # group.initial.rebalance.delay.ms (3 s) plus a loaded broker's slack
COORDINATOR_WAIT_S = 30.0
POLL_S = 0.2
GROUP_COORDINATOR = 0  # FindCoordinator key_type
DESCRIBE_CONFIGS_RANGE = (1, 4)
GROUP_RESOURCE = 32  # ConfigResource type GROUP (Kafka 4.0)
GROUP_CONFIGS = ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms")  # Kafka 4.0's GroupConfig
PROTOCOL = "range"


def _subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0: the topics, no user data."""
    name = topic.encode()
    return struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", -1)


class ClassicMember:
    """One member of a classic group, on its own connection to the group's coordinator."""

    def __init__(self, target, coordinator: str, group: str, topic: str, instance_id: str | None = None) -> None:
        caps = target.capabilities
        self.heartbeat_version = caps.version_or_skip(ApiKey.HEARTBEAT, *HEARTBEAT_RANGE)
        self.join_version = caps.version_or_skip(ApiKey.JOIN_GROUP, *JOIN_RANGE)
        self.sync_version = caps.version_or_skip(ApiKey.SYNC_GROUP, *SYNC_RANGE)
        self.commit_version = caps.version_or_skip(ApiKey.OFFSET_COMMIT, *OFFSET_COMMIT_RANGE)
        self.wire = target.wire(coordinator)
        self.group, self.topic, self.instance_id = group, topic, instance_id
        self.member_id = ""
        self.generation_id = -1
        self._pending_join: int | None = None

    def send_join(self) -> None:
        self._pending_join = self.wire.send(ApiKey.JOIN_GROUP, self.join_version, {
            "group_id": self.group, "session_timeout_ms": SESSION_TIMEOUT_MS,
            "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS, "member_id": self.member_id,
            "group_instance_id": self.instance_id, "protocol_type": "consumer",
            "protocols": [{"name": PROTOCOL, "metadata": _subscription(self.topic)}]})

    def receive_join(self):
        """The JoinGroup answer; a MEMBER_ID_REQUIRED answer (KIP-394) is followed by the join
        with the id it hands out, as clients do."""
        response = self.wire.receive(ApiKey.JOIN_GROUP, self.join_version, self._pending_join, timeout_s=JOIN_ANSWER_S)
        self.member_id = response.member_id or self.member_id
        if response.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            self.send_join()
            return self.receive_join()
        expect(response.error_code == ErrorCode.NONE,
               f"{request_name(ApiKey.JOIN_GROUP, self.join_version)} to {self.group} to succeed",
               error_name(response.error_code))
        self.generation_id = response.generation_id
        return response

    def join(self):
        self.send_join()
        return self.receive_join()

    def obtain_member_id(self) -> None:
        """The first JoinGroup of KIP-394: the coordinator hands out a member id and, until the
        join that uses it, holds any rebalance for it (a pending member)."""
        self.send_join()
        response = self.wire.receive(ApiKey.JOIN_GROUP, self.join_version, self._pending_join, timeout_s=JOIN_ANSWER_S)
        expect(response.error_code == ErrorCode.MEMBER_ID_REQUIRED,
               f"MEMBER_ID_REQUIRED (79) for a {request_name(ApiKey.JOIN_GROUP, self.join_version)} without a member "
               "id (KIP-394)", error_name(response.error_code))
        self.member_id = response.member_id

    def await_rebalance(self) -> None:
        """Heartbeat until the coordinator answers REBALANCE_IN_PROGRESS, as a client learns it must rejoin."""
        deadline = time.monotonic() + JOIN_ANSWER_S
        while (error := self.heartbeat()) == ErrorCode.NONE and time.monotonic() < deadline:
            time.sleep(POLL_S)
        expect(error == ErrorCode.REBALANCE_IN_PROGRESS, f"Heartbeat of {self.member_id} to answer "
               "REBALANCE_IN_PROGRESS once another member joins", error_name(error))

    def sync(self, assignments: dict[str, bytes] | None = None):
        response = self.wire.request(ApiKey.SYNC_GROUP, self.sync_version, {
            "group_id": self.group, "generation_id": self.generation_id, "member_id": self.member_id,
            "group_instance_id": self.instance_id, "protocol_type": "consumer", "protocol_name": PROTOCOL,
            "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()]})
        expect(response.error_code == ErrorCode.NONE,
               f"{request_name(ApiKey.SYNC_GROUP, self.sync_version)} of generation {self.generation_id} to succeed",
               error_name(response.error_code))

    def heartbeat(self) -> int:
        return self.wire.request(ApiKey.HEARTBEAT, self.heartbeat_version, {
            "group_id": self.group, "generation_id": self.generation_id, "member_id": self.member_id,
            "group_instance_id": self.instance_id}).error_code

    def commit(self, generation_id: int, offset: int) -> int:
        """The error code of an OffsetCommit of partition 0 at `offset` carrying generation_id."""
        response = self.wire.request(ApiKey.OFFSET_COMMIT, self.commit_version, {
            "group_id": self.group, "generation_id_or_member_epoch": generation_id, "member_id": self.member_id,
            "group_instance_id": self.instance_id, "retention_time_ms": -1,
            "topics": [{"name": self.topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                             "committed_leader_epoch": -1,
                                                             "committed_metadata": None}]}]})
        request = f"{request_name(ApiKey.OFFSET_COMMIT, self.commit_version)} of {self.topic}-0 to {self.group}"
        answered = answered_entry(request, response.topics, "name", self.topic, "topic")
        return answered_entry(request, answered.partitions, "partition_index", 0, "partition").error_code

    def close(self) -> None:
        self.wire.close()


def _second_member_joins(first: ClassicMember, second: ClassicMember):
    """second joins the stable group of first; first learns of the rebalance by heartbeat and
    rejoins; returns first's answer, of the new generation (not yet synced)."""
    if second.instance_id is None:
        second.obtain_member_id()
    second.send_join()
    first.await_rebalance()
    first.send_join()
    second.receive_join()
    return first.receive_join()


def group_coordinator(target, group: str) -> str:
    """The address of group's coordinator (FindCoordinator, asked again while it loads)."""
    version = target.capabilities.version_or_skip(ApiKey.FIND_COORDINATOR, *FIND_COORDINATOR_RANGE)
    deadline = time.monotonic() + COORDINATOR_WAIT_S
    while True:
        with target.wire() as wire:
            found = wire.request(ApiKey.FIND_COORDINATOR, version, {"key": group, "key_type": GROUP_COORDINATOR})
        if found.error_code == ErrorCode.NONE:
            return f"{found.host}:{found.port}"
        expect(found.error_code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
               and time.monotonic() < deadline, f"FindCoordinator for group {group} to succeed",
               error_name(found.error_code))
        time.sleep(POLL_S)


@pytest.mark.guarantee("GRP-1")
def test_an_offset_commit_of_the_previous_generation_is_an_illegal_generation_during_a_rebalance(target):
    target.capabilities.require("a classic consumer group", *CLASSIC_GROUP_APIS)
    topic = target.create_topic("commit-generation")
    group = target.new_topic_name("commit-generation")
    coordinator = group_coordinator(target, group)
    first = ClassicMember(target, coordinator, group, topic)
    second = ClassicMember(target, coordinator, group, topic)
    try:
        first.join()
        first.sync({first.member_id: b""})
        previous = first.generation_id
        _second_member_joins(first, second)  # generation previous+1, CompletingRebalance until the leader syncs
        expect(first.generation_id > previous, f"a new generation after generation {previous}",
               f"generation {first.generation_id}")
        stale = first.commit(previous, 1)
        current = first.commit(first.generation_id, 1)
    finally:
        first.close()
        second.close()
    expect(stale == ErrorCode.ILLEGAL_GENERATION,
           f"ILLEGAL_GENERATION (22) for an OffsetCommit of generation {previous} while generation "
           f"{previous + 1} syncs: Kafka checks the generation before the rebalance state "
           "(ClassicGroup.validateOffsetCommit)", error_name(stale))
    expect(current == ErrorCode.REBALANCE_IN_PROGRESS,
           f"REBALANCE_IN_PROGRESS (27) for an OffsetCommit of generation {previous + 1} before its SyncGroup",
           error_name(current))


@pytest.mark.guarantee("GRP-1")
def test_a_restarted_static_leader_rejoins_without_a_rebalance(target):
    target.capabilities.require("a classic consumer group", *CLASSIC_GROUP_APIS)
    topic = target.create_topic("static-leader")
    group = target.new_topic_name("static-leader")
    coordinator = group_coordinator(target, group)
    members = [ClassicMember(target, coordinator, group, topic, instance_id=f"instance-{i}") for i in (1, 2)]
    restarted = None
    try:
        members[0].join()
        members[0].sync({members[0].member_id: b""})
        answer = _second_member_joins(*members)
        leader, follower = members if answer.leader == members[0].member_id else members[::-1]
        generation = leader.generation_id
        leader.sync({m.member_id: b"" for m in members})
        follower.sync()
        restarted = ClassicMember(target, coordinator, group, topic, instance_id=leader.instance_id)
        answer = restarted.join()  # a new process: no member id, the same group.instance.id
        heartbeat = follower.heartbeat()
    finally:
        for member in members + ([restarted] if restarted else []):
            member.close()
    join = request_name(ApiKey.JOIN_GROUP, restarted.join_version)
    expect(answer.generation_id == generation and answer.member_id != leader.member_id,
           f"{join} of the restarted static leader ({leader.instance_id}) answered in generation {generation} with "
           "a new member id: no rebalance (KIP-345)", f"generation {answer.generation_id}, member id "
           f"{answer.member_id!r} (was {leader.member_id!r})")
    expect(heartbeat == ErrorCode.NONE, f"the other member's Heartbeat of generation {generation} answered NONE: the "
           "group stays stable when its static leader restarts (KIP-814)", error_name(heartbeat))
    if restarted.join_version >= SKIP_ASSIGNMENT_VERSION:
        expect(answer.skip_assignment and answer.leader == answer.member_id,
               f"{join} to name the restarted member the leader with skip_assignment=true (KIP-814)",
               f"leader {answer.leader!r}, member id {answer.member_id!r}, skip_assignment {answer.skip_assignment}")


@pytest.mark.guarantee("GRP-1")
def test_a_group_s_configs_are_described(target):
    """Kafka 4.0 gives consumer groups configs of their own (the GROUP config resource, KIP-848):
    DescribeConfigs of a group answers consumer.session.timeout.ms and consumer.heartbeat.interval.ms,
    the broker's group.consumer.* defaults unless the group overrides them."""
    caps = target.capabilities
    if not caps.offers_consumer_groups:
        pytest.skip("group configs come with KIP-848 consumer groups (ConsumerGroupHeartbeat), which the broker "
                    "does not offer")
    version = caps.version_or_skip(ApiKey.DESCRIBE_CONFIGS, *DESCRIBE_CONFIGS_RANGE)
    group = target.new_topic_name("group-configs")
    with target.wire() as wire:
        response = wire.request(ApiKey.DESCRIBE_CONFIGS, version, {
            "resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group, "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False})
    request = f"{request_name(ApiKey.DESCRIBE_CONFIGS, version)} of group {group}"
    result = answered_entry(request, response.results, "resource_name", group, "resource")
    expect(result.error_code == ErrorCode.NONE, f"{request} (GROUP resource, type 32) to succeed, as Kafka 4.0 "
           "answers it", f"{error_name(result.error_code)}: {result.get('error_message')}")
    described = {entry.name: entry.value for entry in result.configs}
    missing = [name for name in GROUP_CONFIGS if not (described.get(name) or "").isdigit()]
    expect(not missing, f"{request} to give {', '.join(GROUP_CONFIGS)} in milliseconds",
           f"{', '.join(missing)} missing among {sorted(described)}")
