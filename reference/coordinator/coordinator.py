"""The group coordinator: every group of this broker, their committed offsets, and replay.

One object answers every group API. Classic groups (classic.py) and KIP-848 consumer
groups (consumer.py) share one namespace of group ids and one offsets store; the type of a
group is fixed by the first protocol that uses it, and an empty group may switch type.
Committed offsets and group metadata are written as records to the group's partition of
`__consumer_offsets` (records.py) and the in-memory state is rebuilt by `replay`ing them
in log order on start, so nothing is kept only in memory (GRP-2). A KIP-848 group's session
timeout and heartbeat interval are its own group configs (Kafka 4.0's GroupConfig, set with
IncrementalAlterConfigs and kept in the metadata log) over the broker's; the caller gives
them as `group_configs`, read afresh at every heartbeat.

Sans-IO: the caller passes `now_ms`, a seeded `random.Random` for member ids, and the topic
metadata the KIP-848 assignors need; every mutating call returns Effects (records to
append first, then replies to send).
"""
from __future__ import annotations

import dataclasses
import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from reference.coordinator.assignors import TopicMetadata
from reference.coordinator.classic import (
    DEAD, EMPTY, NO_GENERATION, ClassicGroup, ClassicGroupConfig,
)
from reference.coordinator.consumer import ConsumerGroup, ConsumerGroupConfig
from reference.coordinator.effects import Effects, OffsetsRecord
from reference.coordinator.records import (
    ConsumerGroupMetadataKey, GroupMetadataKey, OffsetAndMetadata, OffsetCommitKey, decode_consumer_group_value,
    decode_group_value, decode_key, decode_offset_value, encode_offset_value, partition_for,
)
from reference.protocol.errors import ErrorCode, KafkaError

NO_OFFSET = -1
NO_LEADER_EPOCH = -1
GROUP_TYPES = ("classic", "consumer")

Group = ClassicGroup | ConsumerGroup


@dataclass(frozen=True)
class GroupCoordinatorConfig:
    # offsets.topic.num.partitions: Kafka's default is 50. A single node pays one open log
    # (two files) per partition, so kspec's default is smaller; any value works the same.
    offsets_topic_num_partitions: int = 8
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes (10080)
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    classic: ClassicGroupConfig = field(default_factory=ClassicGroupConfig)
    consumer: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)


@dataclass(frozen=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


class GroupCoordinator:
    def __init__(self, config: GroupCoordinatorConfig, rng: random.Random, now_ms: int,
                 group_configs: Callable[[str], Mapping[str, str]] = lambda group_id: {}) -> None:
        self.config = config
        self.group_configs = group_configs  # group id -> its group config overrides
        self.rng = rng
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self._last_retention_check_ms = now_ms

    def consumer_config_for(self, group_id: str) -> ConsumerGroupConfig:
        """A KIP-848 group's configs: its consumer.* group configs over the broker's group.consumer.*."""
        overrides, defaults = self.group_configs(group_id), self.config.consumer
        return dataclasses.replace(
            defaults,
            session_timeout_ms=int(overrides.get("consumer.session.timeout.ms", defaults.session_timeout_ms)),
            heartbeat_interval_ms=int(overrides.get("consumer.heartbeat.interval.ms", defaults.heartbeat_interval_ms)))

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    # -- classic protocol ---------------------------------------------------------------

    def join_group(self, token: Any, *, group_id: str, member_id: str, group_instance_id: str | None,
                   client_id: str, client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                   protocol_type: str, protocols: list[tuple[str, bytes]], require_known_member_id: bool,
                   now_ms: int) -> Effects:
        effects = Effects()
        group = self._classic_group(group_id, create=True, now_ms=now_ms) if group_id else None
        if group is None:
            error = ErrorCode.INVALID_GROUP_ID if not group_id else ErrorCode.INCONSISTENT_GROUP_PROTOCOL
            effects.reply(token, {"error_code": error, "generation_id": NO_GENERATION, "leader": "",
                                  "member_id": member_id, "members": [], "protocol_name": None})
            return effects
        group.join(token, member_id=member_id, group_instance_id=group_instance_id, client_id=client_id,
                   client_host=client_host, session_timeout_ms=session_timeout_ms,
                   rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type, protocols=protocols,
                   require_known_member_id=require_known_member_id, new_member_id=self._new_member_id,
                   now_ms=now_ms, effects=effects)
        self._forget_if_unused(group)
        return effects

    def sync_group(self, token: Any, *, group_id: str, member_id: str, group_instance_id: str | None,
                   generation_id: int, protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes], now_ms: int) -> Effects:
        effects = Effects()
        group = self._classic_group(group_id)
        if group is None:
            effects.reply(token, {"error_code": self._missing_group_error(group_id), "assignment": b""})
            return effects
        group.sync(token, member_id=member_id, group_instance_id=group_instance_id, generation_id=generation_id,
                   protocol_type=protocol_type, protocol_name=protocol_name, assignments=assignments,
                   now_ms=now_ms, effects=effects)
        return effects

    def heartbeat(self, *, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                  now_ms: int) -> ErrorCode:
        group = self._classic_group(group_id)
        if group is None:
            return self._missing_group_error(group_id)
        return group.heartbeat(member_id=member_id, group_instance_id=group_instance_id,
                               generation_id=generation_id, now_ms=now_ms)

    def leave_group(self, *, group_id: str, members: list[tuple[str, str | None]],
                    now_ms: int) -> tuple[ErrorCode, list[ErrorCode], Effects]:
        """(top-level error, one error per (member id, group instance id), effects)."""
        effects = Effects()
        group = self._classic_group(group_id)
        if group is None:
            return self._missing_group_error(group_id), [], effects
        errors = [group.leave(member_id=member_id, group_instance_id=instance_id, now_ms=now_ms, effects=effects)
                  for member_id, instance_id in members]
        return ErrorCode.NONE, errors, effects

    # -- KIP-848 ------------------------------------------------------------------------

    def consumer_group_heartbeat(self, *, group_id: str, member_id: str, member_epoch: int,
                                 instance_id: str | None, rack_id: str | None, rebalance_timeout_ms: int,
                                 subscribed_topic_names: list[str] | None, subscribed_topic_regex: str | None,
                                 server_assignor: str | None, owned: frozenset | None, client_id: str,
                                 client_host: str, topics: Iterable[TopicMetadata],
                                 now_ms: int) -> tuple[dict, Effects]:
        effects = Effects()
        try:
            if not group_id:
                raise KafkaError(ErrorCode.INVALID_GROUP_ID, "the group id is empty")
            group = self.groups.get(group_id)
            if isinstance(group, ClassicGroup):
                if not group.is_empty():
                    raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"{group_id} is a classic group with members")
                group = None  # an empty classic group (e.g. offsets only) becomes a consumer group
            if group is None:
                if member_epoch != 0:
                    raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id} has no members")
                group = ConsumerGroup(group_id, self.partition_for(group_id), self.config.consumer,
                                      state_timestamp_ms=now_ms)
                self.groups[group_id] = group
            group.config = self.consumer_config_for(group_id)
            response = group.heartbeat(
                member_id=member_id, member_epoch=member_epoch, instance_id=instance_id, rack_id=rack_id,
                rebalance_timeout_ms=rebalance_timeout_ms, subscribed_topic_names=subscribed_topic_names,
                subscribed_topic_regex=subscribed_topic_regex, server_assignor=server_assignor, owned=owned,
                client_id=client_id, client_host=client_host, topics_by_name={t.name: t for t in topics},
                new_member_id=lambda: str(self._uuid()), now_ms=now_ms, effects=effects)
        except KafkaError as e:
            response = {"error_code": e.code, "error_message": e.message or None, "member_id": member_id or None,
                        "member_epoch": member_epoch, "heartbeat_interval_ms": 0, "assignment": None}
        return response, effects

    # -- offsets ------------------------------------------------------------------------

    def commit_offsets(self, *, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                       offsets: list[OffsetCommit], now_ms: int) -> tuple[list[ErrorCode], Effects]:
        """One error per offset, in order; nothing is stored unless the member checks pass."""
        effects = Effects()
        group = self.groups.get(group_id)
        if not group_id:
            error = ErrorCode.INVALID_GROUP_ID
        elif group is None:
            # A simple consumer (assign mode, generation -1) creates an empty classic group.
            if generation_id >= 0:
                error = ErrorCode.ILLEGAL_GENERATION if member_id else ErrorCode.UNKNOWN_MEMBER_ID
            else:
                group = self._classic_group(group_id, create=True, now_ms=now_ms)
                error = ErrorCode.NONE
        elif isinstance(group, ClassicGroup):
            error = group.validate_offset_commit(member_id=member_id, group_instance_id=group_instance_id,
                                                 generation_id=generation_id, now_ms=now_ms)
        else:
            error = group.validate_offset_commit(member_id=member_id, member_epoch=generation_id)
        if error != ErrorCode.NONE:
            return [error] * len(offsets), effects
        assert group is not None
        errors = []
        stored = self.offsets.setdefault(group_id, {})
        for commit in offsets:
            metadata = commit.metadata or ""
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                errors.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            value = OffsetAndMetadata(commit.offset, commit.leader_epoch, metadata, now_ms)
            stored[commit.topic, commit.partition] = value
            effects.records.append(OffsetsRecord(group.partition, OffsetCommitKey(group_id, commit.topic, commit.partition),
                                                 encode_offset_value(value)))
            errors.append(ErrorCode.NONE)
        return errors, effects

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None, *,
                      member_id: str | None = None, member_epoch: int = -1) -> tuple[ErrorCode, dict]:
        """(group error, {(topic, partition): OffsetAndMetadata or None}); all stored offsets
        when `partitions` is None. KIP-848 members fetching with their epoch are checked."""
        group = self.groups.get(group_id)
        if member_id and isinstance(group, ConsumerGroup) and member_epoch >= 0:
            error = group.validate_offset_commit(member_id=member_id, member_epoch=member_epoch)
            if error != ErrorCode.NONE:
                return error, {}
        stored = self.offsets.get(group_id, {})
        if partitions is None:
            return ErrorCode.NONE, dict(sorted(stored.items()))
        return ErrorCode.NONE, {tp: stored.get(tp) for tp in partitions}

    def delete_offsets(self, *, group_id: str, partitions: list[tuple[str, int]],
                       now_ms: int) -> tuple[ErrorCode, list[ErrorCode], Effects]:
        """OffsetDelete (KIP-496): refused per partition while the group consumes its topic."""
        effects = Effects()
        group = self.groups.get(group_id)
        if group is None or (group_id not in self.offsets and group.is_empty()):
            return ErrorCode.GROUP_ID_NOT_FOUND, [], effects
        if isinstance(group, ClassicGroup) and not group.is_empty() and group.protocol_type != "consumer":
            return ErrorCode.NON_EMPTY_GROUP, [], effects
        if isinstance(group, ClassicGroup):
            subscribed = group.subscribed_topics() or set() if not group.is_empty() else set()
        else:
            subscribed = {name for member in group.members.values() for name in member.subscribed_topic_names}
        errors = []
        stored = self.offsets.get(group_id, {})
        for topic, partition in partitions:
            if topic in subscribed:
                errors.append(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
                continue
            if stored.pop((topic, partition), None) is not None:
                effects.records.append(OffsetsRecord(group.partition, OffsetCommitKey(group_id, topic, partition), None))
            errors.append(ErrorCode.NONE)
        return ErrorCode.NONE, errors, effects

    # -- administration -----------------------------------------------------------------

    def describe_group(self, group_id: str) -> dict:
        """DescribeGroups for one group (classic only; KIP-848 groups: ConsumerGroupDescribe)."""
        group = self.groups.get(group_id)
        if not isinstance(group, ClassicGroup) or group.state == DEAD:
            error = ErrorCode.GROUP_ID_NOT_FOUND
            return {"error_code": error, "group_id": group_id, "group_state": DEAD, "protocol_type": "",
                    "protocol_data": "", "members": []}
        stable = group.state in ("Stable",)
        return {
            "error_code": ErrorCode.NONE, "group_id": group_id, "group_state": group.state,
            "protocol_type": group.protocol_type or "", "protocol_data": (group.protocol_name or "") if stable else "",
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                 "client_host": m.client_host,
                 "member_metadata": m.metadata(group.protocol_name) if stable and group.protocol_name else b"",
                 "member_assignment": m.assignment if stable else b""}
                for m in group.members.values()
            ],
        }

    def describe_consumer_group(self, group_id: str, topics: Iterable[TopicMetadata]) -> dict:
        group = self.groups.get(group_id)
        if not isinstance(group, ConsumerGroup):
            return {"error_code": ErrorCode.GROUP_ID_NOT_FOUND, "error_message": f"{group_id} is not a consumer group",
                    "group_id": group_id, "group_state": DEAD, "members": []}
        topics_by_name = {t.name: t for t in topics}
        return {
            "error_code": ErrorCode.NONE, "group_id": group_id, "group_state": group.state,
            "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
            "assignor_name": group.preferred_assignor(),
            "members": [group.describe_member(m, topics_by_name) for m in group.members.values()],
        }

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[dict]:
        """ListGroups with its state (v4, KIP-518) and type (v5, KIP-848) filters, case-insensitive."""
        states = {state.lower() for state in states}
        types = {kind.lower() for kind in types}
        listed = []
        for group_id, group in sorted(self.groups.items()):
            if (states and group.state.lower() not in states) or (types and group.group_type not in types):
                continue
            listed.append({"group_id": group_id, "protocol_type": group.protocol_type or "",
                           "group_state": group.state, "group_type": group.group_type})
        return listed

    def delete_groups(self, group_ids: list[str], now_ms: int) -> tuple[list[ErrorCode], Effects]:
        effects = Effects()
        errors = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None:
                errors.append(ErrorCode.GROUP_ID_NOT_FOUND)
            elif not group.is_empty():
                errors.append(ErrorCode.NON_EMPTY_GROUP)
            else:
                self._delete_group(group, effects)
                errors.append(ErrorCode.NONE)
        return errors, effects

    # -- time and replay ----------------------------------------------------------------

    def tick(self, now_ms: int, topics: Iterable[TopicMetadata] = ()) -> Effects:
        """Timers: session and rebalance timeouts, and offsets retention every check interval."""
        effects = Effects()
        topics_by_name = {t.name: t for t in topics}
        for group in list(self.groups.values()):
            if isinstance(group, ClassicGroup):
                group.tick(now_ms, effects)
            else:
                group.tick(topics_by_name, now_ms, effects)
        if now_ms - self._last_retention_check_ms >= self.config.offsets_retention_check_interval_ms:
            self._last_retention_check_ms = now_ms
            self._expire_offsets(now_ms, effects)
        return effects

    def next_deadline_ms(self) -> int:
        """The earliest time tick has work: a group's deadline, or the next offsets retention check."""
        deadlines = [deadline for group in self.groups.values() if (deadline := group.next_deadline_ms()) is not None]
        return min([*deadlines, self._last_retention_check_ms + self.config.offsets_retention_check_interval_ms])

    def replay(self, key_bytes: bytes, value_bytes: bytes | None, now_ms: int) -> None:
        """Apply one __consumer_offsets record, in log order (load on start)."""
        key = decode_key(key_bytes)
        if isinstance(key, OffsetCommitKey):
            stored = self.offsets.setdefault(key.group_id, {})
            if value_bytes is None:
                stored.pop((key.topic, key.partition), None)
            else:
                stored[key.topic, key.partition] = decode_offset_value(value_bytes)
                if key.group_id not in self.groups:
                    self._classic_group(key.group_id, create=True, now_ms=now_ms)
        elif isinstance(key, GroupMetadataKey):
            if value_bytes is None:
                self.groups.pop(key.group_id, None)
                self.offsets.pop(key.group_id, None)
            else:
                self.groups.pop(key.group_id, None)
                group = self._classic_group(key.group_id, create=True, now_ms=now_ms)
                assert group is not None
                group.load(decode_group_value(value_bytes), now_ms)
        elif isinstance(key, ConsumerGroupMetadataKey):
            if value_bytes is None:
                self.groups.pop(key.group_id, None)
                self.offsets.pop(key.group_id, None)
            else:
                group = self.groups.get(key.group_id)
                if not isinstance(group, ConsumerGroup):
                    group = ConsumerGroup(key.group_id, self.partition_for(key.group_id),
                                          self.consumer_config_for(key.group_id),
                                          state_timestamp_ms=now_ms)
                    self.groups[key.group_id] = group
                group.load(decode_consumer_group_value(value_bytes))

    # -- internals ----------------------------------------------------------------------

    def _uuid(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)

    def _new_member_id(self, prefix: str) -> str:
        return f"{prefix}-{self._uuid()}"

    def _classic_group(self, group_id: str, create: bool = False, now_ms: int = 0) -> ClassicGroup | None:
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            if not (create and group.is_empty()):
                return None
            group = None  # an empty consumer group may be taken over by the classic protocol
        if group is None and create:
            group = ClassicGroup(group_id, self.partition_for(group_id), self.config.classic,
                                 state_timestamp_ms=now_ms)
            self.groups[group_id] = group
        assert group is None or isinstance(group, ClassicGroup)
        return group

    def _missing_group_error(self, group_id: str) -> ErrorCode:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if isinstance(self.groups.get(group_id), ConsumerGroup):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return ErrorCode.UNKNOWN_MEMBER_ID

    def _forget_if_unused(self, group: ClassicGroup) -> None:
        """A join that failed before adding anyone leaves no group behind."""
        if group.state == EMPTY and group.is_empty() and not group.pending_members \
                and group.group_id not in self.offsets and group.generation_id == 0:
            del self.groups[group.group_id]

    def _delete_group(self, group: Group, effects: Effects) -> None:
        for topic, partition in sorted(self.offsets.pop(group.group_id, {})):
            effects.records.append(OffsetsRecord(group.partition, OffsetCommitKey(group.group_id, topic, partition), None))
        group.make_dead(effects)
        del self.groups[group.group_id]

    def _expire_offsets(self, now_ms: int, effects: Effects) -> None:
        """offsets.retention.minutes (KIP-211): an empty group's offsets expire that long after
        the group became empty; a group that never had members (standalone commits) loses each
        offset that long after it was committed. A group left with nothing is deleted."""
        retention_ms = self.config.offsets_retention_ms
        for group_id, group in list(self.groups.items()):
            if not group.is_empty():
                continue
            stored = self.offsets.get(group_id, {})
            standalone = group.protocol_type is None
            for (topic, partition), value in list(stored.items()):
                base_ms = value.commit_timestamp_ms if standalone else group.state_timestamp_ms
                if now_ms - base_ms >= retention_ms:
                    del stored[topic, partition]
                    effects.records.append(OffsetsRecord(group.partition, OffsetCommitKey(group_id, topic, partition), None))
            if not stored:
                self.offsets.pop(group_id, None)
                if isinstance(group, ConsumerGroup) or group.state == EMPTY:
                    group.make_dead(effects)
                    del self.groups[group_id]
