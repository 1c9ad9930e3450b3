"""One broker's state: its metadata image, its partitions' logs, producer-id allocation.

Every metadata change is written to the metadata log `__cluster_metadata-0` first and
applied to the image second, so a restart replays the log and finds the same topics,
partitions and configs. The data dir holds `meta.properties` (cluster.id, node.id,
version) as Kafka writes it; each log leaves its own clean-shutdown marker when closed.

No sockets and no clock: callers pass `now_ms`. Errors the protocol has a code for are
raised as KafkaError; handlers turn them into error codes.
"""
from __future__ import annotations

import base64
import json
import logging
import os
import uuid
from concurrent.futures import Future, ThreadPoolExecutor

from reference.config import BrokerConfig
from reference.node.base import (
    METADATA_PARTITION_DIR, PARTITIONS_PER_TOPIC_MAX, BrokerBase, TopicPartition, check_topic_name,
)
from reference.node.metadata import GROUP_RESOURCE, TOPIC_RESOURCE, TopicImage
from reference.protocol.api_versions import SUPPORTED_API_VERSIONS
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import Record, build_batch, iter_batches
from reference.replication import EpochEndOffset
from reference.storage import AppendOrigin, Log, LogConfig
from reference.storage import cleaner

PRODUCER_ID_BLOCK_SIZE = 1000  # ids handed out per ProducerIdsRecord, as Kafka's controller does
# Compaction's heavy part (offset map, rewriting segments) runs here, off the event loop, so a
# long pass never delays timers or answers; plans and swaps stay on the loop (storage/cleaner.py).
LOG_CLEANER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-cleaner")
CLEANED_GROUPS_PER_TICK = 2  # cleaned segments swapped in per tick (each swap renames, deletes, fsyncs)

logger = logging.getLogger("kspec.broker")


class PartitionState:
    """A partition this node leads: its log, leader epoch and high watermark.

    On a single node every append is fully replicated at once, so the high watermark
    follows the log end offset; it is still its own field, because fetches never read
    above it (VIS-1) and replication will move it separately.
    """

    def __init__(self, topic_partition: TopicPartition, topic_id: uuid.UUID, log: Log) -> None:
        self.topic_partition = topic_partition
        self.topic_id = topic_id
        self.log = log
        self.leader_epoch = 0
        self.high_watermark = log.log_end_offset
        self.last_flush_ms = 0  # for flush.ms on an idle partition; appends flush by themselves

    def read_for_consumer(self, fetch_offset: int, max_bytes: int, *, min_one_batch: bool = True):
        """What a consumer may read: nothing at or above the high watermark (VIS-1)."""
        return self.log.read(fetch_offset, max_bytes, max_offset=self.high_watermark, min_one_batch=min_one_batch)

    def advance_high_watermark(self) -> None:
        assert self.high_watermark <= self.log.log_end_offset
        self.high_watermark = self.log.log_end_offset


class Broker(BrokerBase):
    """A single node: the only broker and its own controller, every partition led here."""

    def __init__(self, config: BrokerConfig, now_ms: int) -> None:
        super().__init__(config, now_ms)
        self.metadata_log = Log(os.path.join(self.data_dir, METADATA_PARTITION_DIR), LogConfig(), now_ms=now_ms)
        for record in self._read_metadata_records():
            self.image.apply(record)
        self.partitions: dict[TopicPartition, PartitionState] = {}
        for topic in self.image.topics_by_name.values():
            for index in range(topic.partition_count):
                self._open_partition(topic, index, now_ms)
        self._producer_id_next = self.image.next_producer_id
        self._cleaning: dict[str, tuple[Log, cleaner.CleaningPlan, Future]] = {}  # dir -> pass on LOG_CLEANER

    # -- metadata ---------------------------------------------------------------------

    def create_topic(
        self, name: str, num_partitions: int, replication_factor: int,
        configs: dict[str, str], validate_only: bool, now_ms: int,
    ) -> TopicImage:
        """CreateTopics for one topic; -1 means the broker default (KIP-464)."""
        check_topic_name(name)
        if name in self.image.topics_by_name:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        num_partitions = self.config.num_partitions if num_partitions == -1 else num_partitions
        replication_factor = (
            self.config.default_replication_factor if replication_factor == -1 else replication_factor
        )
        if not 1 <= num_partitions <= PARTITIONS_PER_TOPIC_MAX:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"num_partitions {num_partitions}")
        if not 1 <= replication_factor <= self.live_broker_count:
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {replication_factor} > {self.live_broker_count} live broker(s)",
            )
        self.log_config(configs)  # validates
        topic_id = uuid.uuid4()
        if validate_only:
            return TopicImage(name, topic_id, num_partitions, dict(configs))
        records = [{"type": "TopicRecord", "name": name, "topic_id": str(topic_id)}]
        records += [
            {"type": "PartitionRecord", "topic_id": str(topic_id), "partition_id": index,
             "replicas": [self.config.node_id], "isr": [self.config.node_id],
             "leader": self.config.node_id, "leader_epoch": 0}
            for index in range(num_partitions)
        ]
        records += [self._config_record(name, key, value) for key, value in sorted(configs.items())]
        self._commit(records, now_ms)
        topic = self.image.topics_by_name[name]
        for index in range(num_partitions):
            self._open_partition(topic, index, now_ms)
        return topic

    def delete_topic(self, name: str, now_ms: int) -> None:
        topic = self.topic(name)
        self._commit([{"type": "RemoveTopicRecord", "topic_id": str(topic.topic_id)}], now_ms)
        for index in range(topic.partition_count):
            self.partitions.pop(TopicPartition(name, index)).log.delete()

    def create_partitions(self, name: str, count: int, validate_only: bool, now_ms: int) -> None:
        topic = self.topic(name)
        if count <= topic.partition_count:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"topic has {topic.partition_count} partitions; the new count must be larger",
            )
        if count > PARTITIONS_PER_TOPIC_MAX:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"count {count} > {PARTITIONS_PER_TOPIC_MAX}")
        if validate_only:
            return
        first_new = topic.partition_count
        self._commit([
            {"type": "PartitionRecord", "topic_id": str(topic.topic_id), "partition_id": index,
             "replicas": [self.config.node_id], "isr": [self.config.node_id],
             "leader": self.config.node_id, "leader_epoch": 0}
            for index in range(first_new, count)
        ], now_ms)
        for index in range(first_new, count):
            self._open_partition(topic, index, now_ms)

    def alter_topic_configs(
        self, name: str, configs: dict[str, str | None], validate_only: bool, now_ms: int,
    ) -> None:
        """Set (value) or remove (None) topic config overrides, all or none."""
        topic = self.topic(name)
        updated = {**topic.configs, **configs}
        updated = {key: value for key, value in updated.items() if value is not None}
        log_config = self.log_config(updated)
        if validate_only or not configs:
            return
        self._commit([self._config_record(name, key, value) for key, value in sorted(configs.items())], now_ms)
        for index in range(topic.partition_count):
            self.partitions[TopicPartition(name, index)].log.config = log_config

    def alter_group_configs(
        self, group_id: str, configs: dict[str, str | None], validate_only: bool, now_ms: int,
    ) -> None:
        """Set (value) or remove (None) a group's config overrides, already validated, all or none."""
        if validate_only or not configs:
            return
        self._commit([{"type": "ConfigRecord", "resource_type": GROUP_RESOURCE, "resource_name": group_id,
                       "name": key, "value": value} for key, value in sorted(configs.items())], now_ms)

    def allocate_producer_id(self, now_ms: int) -> int:
        """A producer id never handed out before, on this node, across restarts."""
        if self._producer_id_next >= self.image.next_producer_id:
            self._commit([{
                "type": "ProducerIdsRecord", "node_id": self.config.node_id,
                "next_producer_id": self.image.next_producer_id + PRODUCER_ID_BLOCK_SIZE,
            }], now_ms)
        producer_id = self._producer_id_next
        self._producer_id_next += 1
        assert producer_id < self.image.next_producer_id
        return producer_id

    @property
    def live_broker_count(self) -> int:
        return 1

    def api_versions(self) -> dict:
        """The versions this node handles (reference/protocol/api_versions.py)."""
        return SUPPORTED_API_VERSIONS

    def advertised_api_versions(self, listener: str = "") -> dict:
        """The ApiVersions table a client is shown on `listener` (a single node's are all alike)."""
        return self.api_versions()

    @property
    def controller_id(self) -> int:
        return self.config.node_id  # this node is the only broker and the controller

    def metadata_brokers(self) -> list[tuple[int, str, int, bool]]:
        """(id, host, port, fenced) of every registered broker."""
        host, port = self.config.advertised
        return [(self.config.node_id, host, port, False)]

    def partition_metadata(self, name: str, index: int) -> dict:
        node_id = self.config.node_id
        return {"error_code": ErrorCode.NONE, "partition_index": index, "leader_id": node_id,
                "leader_epoch": self.partition(TopicPartition(name, index)).leader_epoch,
                "replica_nodes": [node_id], "isr_nodes": [node_id], "offline_replicas": []}

    # -- security (reference/security/) -------------------------------------------------

    def listener_endpoints(self, listener: str) -> dict[tuple[str, int], tuple[str, int]]:
        """This node's first-listener address -> its address on `listener` (reference/security/listeners.py
        readdress: each listener's clients are told that listener's endpoints)."""
        by_name = {l.name: l for l in self.config.listeners}
        return {self.config.listeners[0].advertised: by_name[listener].advertised} if listener in by_name else {}

    def commit_security_records(self, records: list[dict], now_ms: int) -> None:
        """ACL and SCRAM credential changes, through the metadata log like every metadata change."""
        self._commit(records, now_ms)

    # -- data -------------------------------------------------------------------------

    def follower_fetch(self, topic_partition: TopicPartition, fetch, max_bytes: int, now_ms: int):
        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "a single node has no follower replicas")

    def offset_for_leader_epoch(self, topic_partition: TopicPartition, current_leader_epoch: int, leader_epoch: int):
        """OffsetForLeaderEpoch on one node: every batch is in leader epoch 0."""
        partition = self.partition(topic_partition)
        if current_leader_epoch not in (-1, partition.leader_epoch):  # KIP-320
            return EpochEndOffset(ErrorCode.FENCED_LEADER_EPOCH if current_leader_epoch < partition.leader_epoch
                                  else ErrorCode.UNKNOWN_LEADER_EPOCH)
        if leader_epoch < 0:
            return EpochEndOffset(ErrorCode.NONE)
        return EpochEndOffset(ErrorCode.NONE, partition.leader_epoch, partition.log.log_end_offset)

    # -- coordinators (reference/runtime/) ------------------------------------

    def create_internal_topic(self, name: str, num_partitions: int, replication_factor: int,
                              configs: dict[str, str], now_ms: int) -> None:
        """An internal topic for a coordinator, with one replica: a single node has no other
        broker to place one on (a cluster waits for its replication factor, KIP-115)."""
        if name not in self.image.topics_by_name:
            self.create_topic(name, num_partitions, min(replication_factor, self.live_broker_count), configs,
                              validate_only=False, now_ms=now_ms)

    def led_partitions(self, topic: str) -> dict[int, tuple[int, bool]]:
        """The partitions of `topic` this node leads: index -> (leader epoch, ready to load),
        ready once every record in the log is committed (high watermark at the log end)."""
        if topic not in self.image.topics_by_name:
            return {}
        return {index: (0, True) for index in range(self.image.topics_by_name[topic].partition_count)}

    def partition_leader(self, topic: str, index: int) -> tuple[int, str, int] | None:
        """(node id, host, port) of the partition's leader, None while it has none."""
        return (self.config.node_id, *self.config.advertised) if topic in self.image.topics_by_name else None

    def partition(self, topic_partition: TopicPartition) -> PartitionState:
        if topic_partition not in self.partitions:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(topic_partition))
        return self.partitions[topic_partition]

    def follower_replica(self, topic_partition: TopicPartition) -> None:
        """A single node follows no one: it leads every partition it has."""
        return None

    def append(self, topic_partition: TopicPartition, records: bytes, now_ms: int, acks: int = 1,
               origin: AppendOrigin = AppendOrigin.CLIENT):
        """Append a produced batch (or a coordinator's marker) as leader; return the storage's
        LogAppendInfo. With acks=all the ISR (this node alone) must reach min.insync.replicas first."""
        partition = self.partition(topic_partition)
        if acks == -1 and partition.log.config.min_insync_replicas > 1:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                             f"ISR size 1 < min.insync.replicas={partition.log.config.min_insync_replicas}")
        with self.storage_io():
            info = partition.log.append_as_leader(records, partition.leader_epoch, now_ms, origin)
        partition.advance_high_watermark()
        self.appended.add(topic_partition)
        return info

    def _tick(self, now_ms: int) -> None:
        for partition in self.partitions.values():
            if now_ms - partition.last_flush_ms >= partition.log.config.flush_ms:
                partition.log.flush(now_ms)
                partition.last_flush_ms = now_ms
        if now_ms - self._last_retention_check_ms >= self.config.log_retention_check_interval_ms:
            self._last_retention_check_ms = now_ms
            for partition in self.partitions.values():
                partition.log.enforce_retention(now_ms, high_watermark=partition.high_watermark)
        self._commit_cleaned()
        if self.config.log_cleaner_enable and now_ms - self._last_cleaner_run_ms >= self.config.log_cleaner_backoff_ms:
            self._last_cleaner_run_ms = now_ms
            for partition in self.partitions.values():
                if partition.log.config.compact and partition.log.dir_path not in self._cleaning:
                    plan = cleaner.plan_pass(partition.log, now_ms, high_watermark=partition.high_watermark)
                    if plan is not None:
                        self._cleaning[partition.log.dir_path] = (partition.log, plan,
                                                                  LOG_CLEANER.submit(cleaner.build, plan))

    def _commit_cleaned(self) -> None:
        """Swap in the passes the cleaner thread finished, for logs still open. A pass whose
        build failed (retention or a deletion removed a segment under it) is dropped; its
        `.cleaned` files go when the log is next opened."""
        open_logs = {id(partition.log) for partition in self.partitions.values()}
        for dir_path, (log, plan, built) in list(self._cleaning.items()):
            if not built.done():
                continue
            del self._cleaning[dir_path]
            if id(log) not in open_logs:
                continue
            try:
                result = built.result()
            except FileNotFoundError as error:
                logger.info("compaction of %s dropped: %s", dir_path, error)
                continue
            if not cleaner.commit(log, plan, result, groups_max=CLEANED_GROUPS_PER_TICK):
                self._cleaning[dir_path] = (log, plan, built)  # the rest on the next ticks

    def close(self) -> None:
        """Wait for the cleaner thread (its passes are dropped), then flush and close every log;
        each leaves its clean-shutdown marker."""
        for _, _, built in self._cleaning.values():
            built.exception()  # waits; what it wrote is discarded when the log is next opened
        self._cleaning.clear()
        for partition in self.partitions.values():
            partition.log.close()
        self.metadata_log.close()

    # -- internals --------------------------------------------------------------------

    def _open_partition(self, topic: TopicImage, index: int, now_ms: int) -> None:
        topic_partition = TopicPartition(topic.name, index)
        assert topic_partition not in self.partitions
        log = Log(os.path.join(self.data_dir, str(topic_partition)), self.log_config(topic.configs), now_ms=now_ms)
        partition = PartitionState(topic_partition, topic.topic_id, log)
        partition.last_flush_ms = now_ms
        self.partitions[topic_partition] = partition

    def _config_record(self, topic: str, name: str, value: str | None) -> dict:
        return {"type": "ConfigRecord", "resource_type": TOPIC_RESOURCE, "resource_name": topic,
                "name": name, "value": value}

    def _commit(self, records: list[dict], now_ms: int) -> None:
        """Write metadata records to the metadata log (flushed: metadata is durable), then apply them."""
        values = [json.dumps(record, sort_keys=True).encode() for record in records]
        batch = build_batch([Record(timestamp=now_ms, value=value) for value in values])
        with self.storage_io():
            self.metadata_log.append_as_leader(batch, 0, now_ms)
            self.metadata_log.flush(now_ms)
        for record in records:
            self.image.apply(record)

    def _read_metadata_records(self):
        offset = self.metadata_log.log_start_offset
        while offset < self.metadata_log.log_end_offset:
            read = self.metadata_log.read(offset, 1 << 20)
            for batch in iter_batches(read.records):
                for record in batch.records():
                    yield json.loads(record.value)
                offset = batch.last_offset + 1

    def _new_cluster_id(self) -> str:
        # Kafka's cluster ids are 16 random bytes in URL-safe base64 without padding.
        return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
