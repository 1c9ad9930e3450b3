"""The one base of a coordinator that follows an internal topic's leadership: this node
coordinates the keys whose partition of the topic it leads (groups over `__consumer_offsets`,
transactional ids over `__transaction_state`).

A partition's state is loaded (replayed from its log) once this node leads it and the log is
committed to the end, and dropped when the node stops leading it or leads it in a new epoch
(Kafka's CoordinatorRuntime: scheduleLoadOperation on election, scheduleUnloadOperation on
resignation). Meanwhile its keys get COORDINATOR_LOAD_IN_PROGRESS, or NOT_COORDINATOR on
another node. State records are appended acks=all and count once the high watermark passes
them.
"""
from __future__ import annotations

from typing import Iterator

from reference.node.broker import TopicPartition
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import Record, build_batch, iter_batches
from reference.runtime.capabilities import ReplicationWaiter
from reference.storage import Log
from reference.transaction.partition import committed_records

READ_BYTES_MAX = 1 << 20
ACKS_ALL = -1


def read_batches(log: Log, start_offset: int) -> Iterator:
    """Every batch of the log from `start_offset` to its end, in order."""
    offset = start_offset
    while offset < log.log_end_offset:
        read = log.read(offset, READ_BYTES_MAX)
        if not read.records:
            return
        for batch in iter_batches(read.records):
            if batch.last_offset >= offset:
                yield batch
            offset = batch.last_offset + 1


def coordinator_error(code: ErrorCode) -> ErrorCode:
    """A failed write to a coordinator topic (__consumer_offsets, __transaction_state) as the
    client sees it (Kafka's GroupCoordinator mapping)."""
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return code


class PartitionLeadershipRuntime:
    """Load a partition's state when this node becomes its leader, unload it when it stops."""

    topic: str  # the internal topic whose leadership is followed

    def __init__(self, broker: BrokerNode, replication: ReplicationWaiter) -> None:
        self.broker = broker
        self.replication = replication
        self.loaded: dict[int, int] = {}  # partition -> the leader epoch it was loaded in
        self.leading: set[int] = set()

    def load(self, partition: int, leader_epoch: int, now_ms: int) -> None:
        raise NotImplementedError

    def unload(self, partition: int) -> None:
        raise NotImplementedError

    def follow_leadership(self, now_ms: int) -> None:
        """Load the partitions this node now leads, drop those it no longer leads."""
        led = self.broker.led_partitions(self.topic)
        for partition, epoch in list(self.loaded.items()):
            if led.get(partition, (None,))[0] != epoch:
                self.unload(partition)
                del self.loaded[partition]
        for partition, (epoch, ready) in sorted(led.items()):
            if ready and partition not in self.loaded:
                self.load(partition, epoch, now_ms)
                self.loaded[partition] = epoch
        self.leading = set(led)

    def partition_error(self, partition: int) -> ErrorCode:
        if partition in self.loaded:
            return ErrorCode.NONE
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if partition in self.leading else ErrorCode.NOT_COORDINATOR

    def drop(self, partition: int) -> None:
        """Unload a partition after a failed write: its state is read again from the log."""
        if partition in self.loaded:
            self.unload(partition)
            del self.loaded[partition]

    def committed_records(self, partition: int) -> list[Record]:
        """The partition's records in log order, without those of aborted or open transactions."""
        log = self.broker.partitions[TopicPartition(self.topic, partition)].log
        return [record for record in committed_records(read_batches(log, log.log_start_offset))
                if record.offset >= log.log_start_offset]

    def append(self, by_partition: dict[int, list[Record]], now_ms: int,
               ) -> tuple[ErrorCode, list[tuple[TopicPartition, int]]]:
        """Append one batch per partition (acks=all); the error, and the offsets to wait for."""
        error, required = ErrorCode.NONE, []
        for partition, records in sorted(by_partition.items()):
            topic_partition = TopicPartition(self.topic, partition)
            try:
                info = self.broker.append(topic_partition, build_batch(records), now_ms, acks=ACKS_ALL)
                required.append(appended(self.broker, topic_partition, info))
            except KafkaError as e:
                error = coordinator_error(e.code)
        return error, required

    async def replicated(self, required: list[tuple[TopicPartition, int, int]], timeout_ms: int) -> ErrorCode:
        """NONE once each partition's high watermark passed its offset with the leader epoch of
        the append unchanged, else the first error."""
        for topic_partition, offset, leader_epoch in required:
            status = await self.replication.wait_for_replication(self.broker, topic_partition, offset, timeout_ms,
                                                                 leader_epoch)
            if status != ErrorCode.NONE:
                return status
        return ErrorCode.NONE


def appended(broker: BrokerNode, topic_partition: TopicPartition, info) -> tuple[TopicPartition, int, int]:
    """What an acks=all wait needs of an append just made: the offset the ISR must pass and the
    leader epoch it was appended in (taken at once, before anything else may run)."""
    return topic_partition, info.last_offset + 1, broker.partition(topic_partition).leader_epoch


def partition_exists(broker: BrokerNode, topic: str, partition: int) -> bool:
    image = broker.image.topics_by_name.get(topic)
    return image is not None and 0 <= partition < image.partition_count
