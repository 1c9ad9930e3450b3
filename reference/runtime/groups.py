"""The group coordinator of one node: the sans-IO GroupCoordinator over the
`__consumer_offsets` partitions this node leads (Kafka's GroupCoordinatorService on its
CoordinatorRuntime).

Records are appended to `__consumer_offsets` (compacted, one partition per group-id hash)
before any reply is sent, so an acknowledged commit is in the log; with replicas a reply
waits until the high watermark covers them. JoinGroup and SyncGroup replies are asyncio
futures that the coordinator completes when the rebalance phase ends, during another
member's request or a timer tick; a partition that is unloaded answers its waiters
NOT_COORDINATOR. On load a partition's groups and offsets are replayed from its log (GRP-2),
offsets of aborted or open transactions skipped.

The offsets topic is created when the first group request arrives (`start`), as Kafka does.
"""
from __future__ import annotations

import asyncio
import random

from reference.coordinator.assignors import TopicMetadata
from reference.coordinator.classic import ClassicGroupConfig
from reference.coordinator.consumer import ConsumerGroupConfig
from reference.coordinator.coordinator import GroupCoordinator, GroupCoordinatorConfig
from reference.coordinator.effects import Effects
from reference.coordinator.records import CONSUMER_OFFSETS_TOPIC, encode_key
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode
from reference.protocol.records import Record
from reference.runtime.capabilities import ReplicationWaiter
from reference.runtime.leadership import PartitionLeadershipRuntime, coordinator_error

OFFSETS_COMMIT_TIMEOUT_MS = 5000  # offsets.commit.timeout.ms: how long a coordinator write waits for the ISR


class GroupCoordinatorRuntime(PartitionLeadershipRuntime):
    topic = CONSUMER_OFFSETS_TOPIC

    def __init__(self, broker: BrokerNode, replication: ReplicationWaiter) -> None:
        super().__init__(broker, replication)
        self.coordinator: GroupCoordinator | None = None  # built by start(), at the first group request
        self.waiting: dict[int, set[asyncio.Future]] = {}  # JoinGroup/SyncGroup replies, by offsets partition
        self._replicating: set[asyncio.Task] = set()

    @property
    def started(self) -> bool:
        return self.coordinator is not None

    def start(self, now_ms: int) -> GroupCoordinator:
        """Build the coordinator and ask for the offsets topic, once; then follow its leadership."""
        if self.coordinator is None:
            self.coordinator = self._build(now_ms)
        self.follow_leadership(now_ms)
        return self.coordinator

    def _build(self, now_ms: int) -> GroupCoordinator:
        broker, config = self.broker, self.broker.config
        coordinator = GroupCoordinator(GroupCoordinatorConfig(
            offsets_topic_num_partitions=config.offsets_topic_num_partitions,
            offsets_retention_ms=config.offsets_retention_minutes * 60_000,
            offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            classic=ClassicGroupConfig(
                min_session_timeout_ms=config.group_min_session_timeout_ms,
                max_session_timeout_ms=config.group_max_session_timeout_ms,
                initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                max_size=config.group_max_size),
            consumer=ConsumerGroupConfig(
                session_timeout_ms=config.group_consumer_session_timeout_ms,
                heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms),
        ), random.Random(), now_ms, group_configs=lambda group_id: broker.image.group_configs.get(group_id, {}))
        broker.create_internal_topic(
            CONSUMER_OFFSETS_TOPIC, config.offsets_topic_num_partitions, config.offsets_topic_replication_factor,
            {"cleanup.policy": "compact", "segment.bytes": str(config.offsets_topic_segment_bytes)}, now_ms)
        if CONSUMER_OFFSETS_TOPIC in broker.image.topics_by_name:
            topic = broker.topic(CONSUMER_OFFSETS_TOPIC)
            assert topic.partition_count == config.offsets_topic_num_partitions, (
                f"{CONSUMER_OFFSETS_TOPIC} has {topic.partition_count} partitions; "
                f"offsets.topic.num.partitions={config.offsets_topic_num_partitions} cannot change")
        return coordinator

    def next_deadline_ms(self) -> int | None:
        """When the coordinator's timers next have work (None before the first group request)."""
        return self.coordinator.next_deadline_ms() if self.coordinator is not None else None

    def tick(self, now_ms: int) -> None:
        """The coordinator's timers: session, rebalance and join-delay deadlines, offsets retention."""
        effects = self.start(now_ms).tick(now_ms, self.topics())
        if effects.records or effects.replies:
            self.apply(effects, now_ms)

    def error_for(self, group_id: str) -> ErrorCode:
        return self.partition_error(self.coordinator.partition_for(group_id))

    def load(self, partition: int, leader_epoch: int, now_ms: int) -> None:
        for record in self.committed_records(partition):
            self.coordinator.replay(record.key, record.value, now_ms)

    def unload(self, partition: int) -> None:
        coordinator = self.coordinator
        for group_id in [g for g in {*coordinator.groups, *coordinator.offsets}
                         if coordinator.partition_for(g) == partition]:
            coordinator.groups.pop(group_id, None)
            coordinator.offsets.pop(group_id, None)
        for future in self.waiting.pop(partition, ()):
            if not future.done():
                future.set_result({"error_code": ErrorCode.NOT_COORDINATOR})

    def reply_future(self, group_id: str) -> asyncio.Future:
        """A future for a JoinGroup or SyncGroup reply, answered NOT_COORDINATOR on resignation."""
        future = asyncio.get_running_loop().create_future()
        waiting = self.waiting.setdefault(self.coordinator.partition_for(group_id), set())
        waiting.add(future)
        future.add_done_callback(waiting.discard)
        return future

    def topics(self) -> list[TopicMetadata]:
        return [TopicMetadata(topic.topic_id, topic.name, topic.partition_count)
                for topic in self.broker.image.topics_by_name.values()]

    def apply(self, effects: Effects, now_ms: int) -> asyncio.Task:
        """Append the records now (one batch per offsets partition, acks=all); the task sends the
        replies once they are replicated and gives the error (NONE once replicated) for the
        caller's own response."""
        by_partition: dict[int, list[Record]] = {}
        for record in effects.records:
            by_partition.setdefault(record.partition, []).append(
                Record(timestamp=now_ms, key=encode_key(record.key), value=record.value))
        error, required = self.append(by_partition, now_ms)
        task = asyncio.get_running_loop().create_task(self._reply_once_replicated(effects, error, required))
        self._replicating.add(task)
        task.add_done_callback(self._replicating.discard)
        return task

    async def _reply_once_replicated(self, effects: Effects, error: ErrorCode, required) -> ErrorCode:
        """Reply once the records are replicated. A failed write drops their partitions, whose
        state is read again from the log: the coordinator changed its state before the write, and
        a refused commit must not be what OffsetFetch returns, nor a member's new epoch be kept
        (Kafka's CoordinatorRuntime reverts to the last committed state when a write fails)."""
        if error == ErrorCode.NONE:
            error = coordinator_error(await self.replicated(required, OFFSETS_COMMIT_TIMEOUT_MS))
        for future, response in effects.replies:
            if not future.done():
                future.set_result(response if error == ErrorCode.NONE else {**response, "error_code": error})
        if error != ErrorCode.NONE:
            for partition in {record.partition for record in effects.records}:
                self.drop(partition)
        return error
