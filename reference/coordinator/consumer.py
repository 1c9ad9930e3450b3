"""KIP-848 consumer groups: one ConsumerGroupHeartbeat API, assignment computed by the broker.

Three epochs drive the protocol (KIP-848):
- the group epoch grows whenever membership, subscriptions or subscribed topics change;
- the assignment epoch is the group epoch the current target assignment was computed at;
- each member's epoch reaches the assignment epoch once the member has given up every
  partition the target takes away from it.

A member converges to its target step by step, so a partition is never owned by two
members at once (GRP-1): partitions to revoke are first announced (the member keeps its
epoch until it reports, in a later heartbeat, that it no longer owns them), and a
partition still held by another member is withheld ("unreleased") until that member has
let it go. A heartbeat with an epoch the coordinator did not give is FENCED_MEMBER_EPOCH,
and the member rejoins with epoch 0.

Sans-IO: time, topic metadata and fresh member ids come in; records come out.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Callable

from reference.coordinator.assignors import ASSIGNOR_NAMES, Assignment, TopicMetadata, assign
from reference.coordinator.effects import Effects, OffsetsRecord
from reference.coordinator.records import ConsumerGroupMetadataKey, encode_consumer_group_value
from reference.protocol.errors import ErrorCode, KafkaError

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

# Member states (Kafka's MemberState).
MEMBER_STABLE = "stable"
UNREVOKED_PARTITIONS = "unrevoked_partitions"
UNRELEASED_PARTITIONS = "unreleased_partitions"

# Group states as ListGroups and ConsumerGroupDescribe name them.
EMPTY, ASSIGNING, RECONCILING, STABLE = "Empty", "Assigning", "Reconciling", "Stable"


@dataclass(frozen=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    assignors: tuple[str, ...] = ASSIGNOR_NAMES  # group.consumer.assignors, default first
    max_size: int = 2**31 - 1  # group.consumer.max.size


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: str = MEMBER_STABLE
    assigned: Assignment = frozenset()
    pending_revocation: Assignment = frozenset()
    last_heartbeat_ms: int = 0
    revocation_deadline_ms: int | None = None

    def subscribed_topics(self, topics_by_name: dict[str, TopicMetadata]) -> set[str]:
        names = set(self.subscribed_topic_names) & set(topics_by_name)
        if self.subscribed_topic_regex:
            pattern = re.compile(self.subscribed_topic_regex)
            names |= {name for name in topics_by_name if pattern.fullmatch(name) and not name.startswith("__")}
        return names


@dataclass
class ConsumerGroup:
    group_id: str
    partition: int
    config: ConsumerGroupConfig
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    subscription_metadata: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    state_timestamp_ms: int = 0  # when the group last changed between empty and not

    group_type = "consumer"
    protocol_type = "consumer"

    def is_empty(self) -> bool:
        return not self.members

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state != MEMBER_STABLE for m in self.members.values()):
            return RECONCILING
        return STABLE

    def preferred_assignor(self) -> str:
        """The server assignor most members ask for; the configured default otherwise."""
        votes: dict[str, int] = {}
        for member in self.members.values():
            if member.server_assignor:
                votes[member.server_assignor] = votes.get(member.server_assignor, 0) + 1
        if not votes:
            return self.config.assignors[0]
        return max(sorted(votes), key=lambda name: votes[name])

    def subscribed_topics(self, topics_by_name: dict[str, TopicMetadata]) -> set[str]:
        names: set[str] = set()
        for member in self.members.values():
            names |= member.subscribed_topics(topics_by_name)
        return names

    def owner_of(self) -> dict[tuple[uuid.UUID, int], str]:
        """Who owns each partition now: assigned or still being revoked (GRP-1: one owner)."""
        owners: dict[tuple[uuid.UUID, int], str] = {}
        for member in self.members.values():
            for partition in member.assigned | member.pending_revocation:
                assert partition not in owners, f"{partition} owned by {owners[partition]} and {member.member_id}"
                owners[partition] = member.member_id
        return owners

    # -- the protocol -------------------------------------------------------------------

    def heartbeat(self, *, member_id: str, member_epoch: int, instance_id: str | None, rack_id: str | None,
                  rebalance_timeout_ms: int, subscribed_topic_names: list[str] | None,
                  subscribed_topic_regex: str | None, server_assignor: str | None,
                  owned: Assignment | None, client_id: str, client_host: str,
                  topics_by_name: dict[str, TopicMetadata], new_member_id: Callable[[], str],
                  now_ms: int, effects: Effects) -> dict:
        """One ConsumerGroupHeartbeat; returns the response fields (raises KafkaError)."""
        if server_assignor is not None and server_assignor not in self.config.assignors:
            raise KafkaError(ErrorCode.UNSUPPORTED_ASSIGNOR, f"assignor {server_assignor!r}; "
                             f"this coordinator has {', '.join(self.config.assignors)}")
        if member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            if member_id not in self.members:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
            self._remove_member(member_id, topics_by_name, now_ms, effects)
            return {"error_code": ErrorCode.NONE, "member_id": member_id, "member_epoch": member_epoch,
                    "heartbeat_interval_ms": 0, "assignment": None}
        if member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if subscribed_topic_names is None and subscribed_topic_regex is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "a joining member must give its subscription")
            if rebalance_timeout_ms <= 0:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "a joining member must give RebalanceTimeoutMs")
            member_id = member_id or new_member_id()
            member = self.members.get(member_id)
            if member is None:
                if len(self.members) >= self.config.max_size:
                    raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED, f"{len(self.members)} members")
                member = ConsumerMember(member_id, instance_id, rack_id, client_id, client_host, rebalance_timeout_ms)
                if not self.members:
                    self.state_timestamp_ms = now_ms
                self.members[member_id] = member
                self._bump_group_epoch(effects)
            else:  # a fenced member rejoining: it owns nothing any more
                member.assigned, member.pending_revocation = frozenset(), frozenset()
                member.member_epoch, member.state, member.revocation_deadline_ms = 0, MEMBER_STABLE, None
        else:
            member = self.members.get(member_id)
            if member is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in the group")
            if member_epoch != member.member_epoch and not (
                    member_epoch == member.previous_member_epoch and owned is not None and owned <= member.assigned):
                raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                                 f"epoch {member_epoch}; the member's epoch is {member.member_epoch}")
        before = (member.member_epoch, member.assigned)
        member.last_heartbeat_ms = now_ms
        if rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        subscription = (
            tuple(sorted(subscribed_topic_names)) if subscribed_topic_names is not None else member.subscribed_topic_names,
            subscribed_topic_regex if subscribed_topic_regex is not None else member.subscribed_topic_regex,
            server_assignor if server_assignor is not None else member.server_assignor,
        )
        if subscription != (member.subscribed_topic_names, member.subscribed_topic_regex, member.server_assignor):
            member.subscribed_topic_names, member.subscribed_topic_regex, member.server_assignor = subscription
            self._bump_group_epoch(effects)
        self._refresh_target(topics_by_name, effects)
        self._reconcile(member, owned, now_ms)
        changed = (member.member_epoch, member.assigned) != before
        topics_by_id = {topic.topic_id: topic for topic in topics_by_name.values()}
        full_request = member_epoch == JOIN_GROUP_MEMBER_EPOCH or owned is not None
        return {
            "error_code": ErrorCode.NONE, "member_id": member.member_id, "member_epoch": member.member_epoch,
            "heartbeat_interval_ms": self.config.heartbeat_interval_ms,
            "assignment": _assignment_fields(member.assigned, topics_by_id) if changed or full_request else None,
        }

    def validate_offset_commit(self, *, member_id: str, member_epoch: int) -> ErrorCode:
        if member_epoch < 0 and not member_id and not self.members:
            return ErrorCode.NONE  # an admin commit to an empty group
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != self.members[member_id].member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def tick(self, topics_by_name: dict[str, TopicMetadata], now_ms: int, effects: Effects) -> None:
        """Fence members whose session expired or who did not revoke within their rebalance timeout."""
        for member in list(self.members.values()):
            session_expired = now_ms - member.last_heartbeat_ms >= self.config.session_timeout_ms
            revocation_late = member.revocation_deadline_ms is not None and now_ms >= member.revocation_deadline_ms
            if session_expired or revocation_late:
                self._remove_member(member.member_id, topics_by_name, now_ms, effects)
        if self.members:
            self._refresh_target(topics_by_name, effects)

    def next_deadline_ms(self) -> int | None:
        """When tick has something to do next: a session or a revocation deadline that runs out."""
        deadlines = [m.last_heartbeat_ms + self.config.session_timeout_ms for m in self.members.values()]
        deadlines += [m.revocation_deadline_ms for m in self.members.values() if m.revocation_deadline_ms is not None]
        return min(deadlines, default=None)

    def describe_member(self, member: ConsumerMember, topics_by_name: dict[str, TopicMetadata]) -> dict:
        topics_by_id = {topic.topic_id: topic for topic in topics_by_name.values()}
        return {
            "member_id": member.member_id, "instance_id": member.instance_id, "rack_id": member.rack_id,
            "member_epoch": member.member_epoch, "client_id": member.client_id, "client_host": member.client_host,
            "subscribed_topic_names": list(member.subscribed_topic_names),
            "subscribed_topic_regex": member.subscribed_topic_regex,
            "assignment": _described_assignment(member.assigned, topics_by_id),
            "target_assignment": _described_assignment(self.target.get(member.member_id, frozenset()), topics_by_id),
        }

    def load(self, group_epoch: int) -> None:
        """Replay: the group epoch survives restarts, so epochs handed out never repeat."""
        self.group_epoch = max(self.group_epoch, group_epoch)
        self.assignment_epoch = self.group_epoch

    def make_dead(self, effects: Effects) -> None:
        assert not self.members, self.group_id
        effects.records.append(OffsetsRecord(self.partition, ConsumerGroupMetadataKey(self.group_id), None))

    # -- internals ----------------------------------------------------------------------

    def _bump_group_epoch(self, effects: Effects) -> None:
        self.group_epoch += 1
        effects.records.append(OffsetsRecord(self.partition, ConsumerGroupMetadataKey(self.group_id),
                                             encode_consumer_group_value(self.group_epoch)))

    def _remove_member(self, member_id: str, topics_by_name, now_ms: int, effects: Effects) -> None:
        del self.members[member_id]
        self.target.pop(member_id, None)
        if not self.members:
            self.state_timestamp_ms = now_ms
        self._bump_group_epoch(effects)
        self._refresh_target(topics_by_name, effects)

    def _refresh_target(self, topics_by_name: dict[str, TopicMetadata], effects: Effects) -> None:
        """Recompute the target assignment when the group epoch moved or a subscribed topic
        appeared, vanished or grew."""
        subscribed = self.subscribed_topics(topics_by_name)
        metadata = {name: (topics_by_name[name].topic_id, topics_by_name[name].partition_count)
                    for name in sorted(subscribed)}
        if metadata != self.subscription_metadata:
            self.subscription_metadata = metadata
            self._bump_group_epoch(effects)
        if self.group_epoch == self.assignment_epoch and set(self.target) == set(self.members):
            return
        topics = {topics_by_name[name].topic_id: topics_by_name[name] for name in subscribed}
        subscriptions = {
            member.member_id: {topics_by_name[name].topic_id for name in member.subscribed_topics(topics_by_name)}
            for member in self.members.values()
        }
        self.target = assign(self.preferred_assignor(), subscriptions, topics, self.target)
        self.assignment_epoch = self.group_epoch

    def _reconcile(self, member: ConsumerMember, owned: Assignment | None, now_ms: int) -> None:
        """Move a member one safe step towards its target (Kafka's CurrentAssignmentBuilder)."""
        if member.pending_revocation:
            if owned is None or owned & member.pending_revocation:
                return  # still waiting for the member to give them up
            member.pending_revocation = frozenset()
            member.revocation_deadline_ms = None
        if member.member_epoch == self.assignment_epoch and member.state == MEMBER_STABLE:
            return
        target = self.target.get(member.member_id, frozenset())
        to_revoke = member.assigned - target
        if to_revoke:
            member.assigned = member.assigned & target
            member.pending_revocation = to_revoke
            member.state = UNREVOKED_PARTITIONS
            member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
            return
        owners = self.owner_of()
        wanted = target - member.assigned
        free = frozenset(p for p in wanted if owners.get(p, member.member_id) == member.member_id)
        member.assigned = member.assigned | free
        if member.member_epoch != self.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch
        member.state = UNRELEASED_PARTITIONS if wanted - free else MEMBER_STABLE
        self.owner_of()  # asserts GRP-1


def _assignment_fields(assignment: Assignment, topics_by_id: dict[uuid.UUID, TopicMetadata]) -> dict:
    by_topic: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in assignment:
        by_topic.setdefault(topic_id, []).append(partition)
    return {"topic_partitions": [{"topic_id": topic_id, "partitions": sorted(partitions)}
                                 for topic_id, partitions in sorted(by_topic.items(), key=lambda kv: str(kv[0]))]}


def _described_assignment(assignment: Assignment, topics_by_id: dict[uuid.UUID, TopicMetadata]) -> dict:
    fields = _assignment_fields(assignment, topics_by_id)
    for entry in fields["topic_partitions"]:
        topic = topics_by_id.get(entry["topic_id"])
        entry["topic_name"] = topic.name if topic else ""
    return fields
