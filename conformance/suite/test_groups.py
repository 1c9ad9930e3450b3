"""Consumer groups, classic and KIP-848, and committed offsets (GRP-1, GRP-2, ORD-3), with librdkafka.

Two members of one group share a topic's partitions with no partition owned twice, and the
group's description (DescribeGroups for a classic group, ConsumerGroupDescribe for a KIP-848
one) lists both members with the partitions each owns; a committed offset is what the next
member of the group starts from, and what OffsetFetch (Consumer.committed) reports.
"""
from __future__ import annotations

import contextlib
import struct
import time

import pytest

from conformance.capabilities import CLASSIC_GROUP_APIS
from conformance.clients import Record, driver
from conformance.ops import expect
from conformance.wire import answered_entry, error_name, request_name
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

PARTITION_COUNT = 4
ASSIGNMENT_TIMEOUT_S = 60.0
POLL_S = 0.2
PROTOCOLS = ("classic", "consumer")
GROUP_COORDINATOR = 0  # FindCoordinator key_type
DESCRIBE_RANGES = {ApiKey.DESCRIBE_GROUPS: (0, 5), ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 0)}


def _require_protocol(target, protocol: str) -> None:
    caps = target.capabilities
    if protocol == "classic" and not caps.offers_classic_groups:
        caps.require("a classic consumer group", *CLASSIC_GROUP_APIS)
    if protocol == "consumer" and not caps.offers_consumer_groups:
        pytest.skip("KIP-848 consumer groups need ConsumerGroupHeartbeat, which the broker does not offer")


def _consumer(target, group: str, protocol: str, **extra):
    from confluent_kafka import Consumer

    config = target.rdkafka_config(**{"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                      "group.protocol": protocol, **extra})
    if protocol == "classic":
        config["session.timeout.ms"] = 10_000
    return Consumer(config)


def _owned(consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


@contextlib.contextmanager
def _two_members_split(target, protocol: str):
    """Two members of a new group subscribed to a new topic of PARTITION_COUNT partitions; yields
    (topic, group, the partitions each member owns) once both are assigned and together own
    every partition, failing the test if a partition is ever owned by both (GRP-1)."""
    _require_protocol(target, protocol)
    topic = target.create_topic(f"group-split-{protocol}", partitions=PARTITION_COUNT)
    group = target.new_topic_name(f"group-{protocol}")
    members = [_consumer(target, group, protocol) for _ in range(2)]
    try:
        for member in members:
            member.subscribe([topic])
        deadline = time.monotonic() + ASSIGNMENT_TIMEOUT_S
        owned: list[set[int]] = [set(), set()]
        while time.monotonic() < deadline:
            for i, member in enumerate(members):
                member.poll(POLL_S)
                owned[i] = _owned(member)
            expect(not (owned[0] & owned[1]), "no partition owned by both members at once (GRP-1)",
                   f"member 0 owns {sorted(owned[0])}, member 1 owns {sorted(owned[1])}")
            if owned[0] and owned[1] and owned[0] | owned[1] == set(range(PARTITION_COUNT)):
                break
        expect(owned[0] and owned[1] and owned[0] | owned[1] == set(range(PARTITION_COUNT)),
               f"both members of {protocol} group assigned, together all {PARTITION_COUNT} partitions, within "
               f"{ASSIGNMENT_TIMEOUT_S:.0f} s ({'KIP-848 ' if protocol == 'consumer' else ''}assignment)",
               f"member 0 {sorted(owned[0])}, member 1 {sorted(owned[1])}")
        yield topic, group, owned
    finally:
        for member in members:
            member.close()


@pytest.mark.guarantee("GRP-1")
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_two_members_split_the_partitions_without_overlap(protocol, target):
    with _two_members_split(target, protocol):
        pass


@pytest.mark.guarantee("GRP-1")
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_group_description_lists_every_member_with_its_partitions(protocol, target):
    """What kafka-consumer-groups.sh --describe --members shows: DescribeGroups (classic) or
    ConsumerGroupDescribe (KIP-848) lists each member with the partitions it owns."""
    api_key = ApiKey.DESCRIBE_GROUPS if protocol == "classic" else ApiKey.CONSUMER_GROUP_DESCRIBE
    target.capabilities.version_or_skip(api_key, *DESCRIBE_RANGES[api_key])
    with _two_members_split(target, protocol) as (topic, group, owned):
        deadline = time.monotonic() + ASSIGNMENT_TIMEOUT_S  # a KIP-848 member's epoch settles after its heartbeat
        while True:
            described = _described_assignments(target, group, topic, protocol)
            if sorted(described, key=sorted) == sorted(owned, key=sorted) or time.monotonic() > deadline:
                break
            time.sleep(POLL_S)
    api = "DescribeGroups" if protocol == "classic" else "ConsumerGroupDescribe (KIP-848)"
    expect(sorted(described, key=sorted) == sorted(owned, key=sorted),
           f"{api} of {group} to list 2 members owning {[sorted(o) for o in owned]} of {topic}, as the members do",
           f"{len(described)} member(s) owning {[sorted(d) for d in described]}")


def _described_assignments(target, group: str, topic: str, protocol: str) -> list[set[int]]:
    """The partitions of topic each member of group owns, as the group coordinator describes them."""
    if protocol == "classic":
        api_key, body = ApiKey.DESCRIBE_GROUPS, {"groups": [group]}
    else:
        api_key, body = ApiKey.CONSUMER_GROUP_DESCRIBE, {"group_ids": [group]}
    version = target.capabilities.version(api_key, *DESCRIBE_RANGES[api_key])
    with _coordinator_wire(target, group) as wire:
        response = wire.request(api_key, version, body)
    request = f"{request_name(api_key, version)} of {group}"
    described = answered_entry(request, response.groups, "group_id", group, "group")
    expect(described.error_code == ErrorCode.NONE, f"{request} to succeed", error_name(described.error_code))
    if protocol == "classic":
        return [_classic_assignment(m.member_assignment, topic) for m in described.members]
    return [{p for t in m.assignment.topic_partitions if t.topic_name == topic for p in t.partitions}
            for m in described.members]


def _classic_assignment(member_assignment: bytes | None, topic: str) -> set[int]:
    """The partitions of topic in a ConsumerProtocolAssignment (int16 version, then topics, each
    a string and an int32 array of partitions)."""
    data = bytes(member_assignment or b"")
    if len(data) < 6:
        return set()
    (topic_count,) = struct.unpack_from(">i", data, 2)
    position, partitions = 6, set()
    for _ in range(topic_count):
        (name_bytes,) = struct.unpack_from(">h", data, position)
        name = data[position + 2:position + 2 + name_bytes].decode()
        position += 2 + name_bytes
        (count,) = struct.unpack_from(">i", data, position)
        indexes = struct.unpack_from(f">{count}i", data, position + 4)
        position += 4 + 4 * count
        if name == topic:
            partitions.update(indexes)
    return partitions


def _coordinator_wire(target, group: str):
    """A raw connection to group's coordinator (FindCoordinator, asked again while it loads)."""
    version = target.capabilities.version_or_skip(ApiKey.FIND_COORDINATOR, 1, 3)  # v4 batches keys
    deadline = time.monotonic() + ASSIGNMENT_TIMEOUT_S
    while True:
        with target.wire() as wire:
            found = wire.request(ApiKey.FIND_COORDINATOR, version, {"key": group, "key_type": GROUP_COORDINATOR})
        if found.error_code == ErrorCode.NONE:
            return target.wire(f"{found.host}:{found.port}")
        expect(found.error_code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
               and time.monotonic() < deadline, f"FindCoordinator for group {group} to succeed",
               error_name(found.error_code))
        time.sleep(POLL_S)


@pytest.mark.guarantee("GRP-2", "ORD-3")
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_committed_offset_is_where_the_next_member_starts(protocol, target):
    from confluent_kafka import TopicPartition

    _require_protocol(target, protocol)
    topic = target.create_topic(f"group-commit-{protocol}")
    driver("confluent-kafka").produce(target.bootstrap, topic,
                                      [Record(0, None, f"v{i}") for i in range(10)], extra=target.properties)
    group = target.new_topic_name(f"commit-{protocol}")
    first = _consumer(target, group, protocol)
    try:
        first.subscribe([topic])
        read = _read(first, 4)
        expect([m.offset() for m in read] == [0, 1, 2, 3], "offsets 0..3 first", [m.offset() for m in read])
        first.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
        committed = first.committed([TopicPartition(topic, 0)], timeout=10)[0]
        expect(committed.offset == 4 and committed.error is None, "OffsetFetch to report the committed offset 4",
               f"offset {committed.offset}, error {committed.error}")
    finally:
        first.close()
    second = _consumer(target, group, protocol)
    try:
        second.subscribe([topic])
        resumed = _read(second, 6)
        expect([m.offset() for m in resumed] == list(range(4, 10)),
               "the next member to start at the committed offset 4 and read 4..9 in order",
               [m.offset() for m in resumed])
    finally:
        second.close()


def _read(consumer, count: int) -> list:
    messages = []
    deadline = time.monotonic() + ASSIGNMENT_TIMEOUT_S
    while len(messages) < count and time.monotonic() < deadline:
        message = consumer.poll(POLL_S)
        if message is not None and message.error() is None:
            messages.append(message)
    return messages
