"""A compacted topic read from the beginning into memory and written to: Connect's
KafkaBasedLog, which holds the config, offset and status stores.

A reader thread consumes every partition from the start (read_committed) and hands each
record to `on_record`; `read_to_end` returns once everything written before the call has
been handed over. The worker creates the topic if it is missing (cleanup.policy=compact).
Keys are partitioned with murmur2 as Java clients do, so a Java worker finds them too.
"""
from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import (OFFSET_BEGINNING, Consumer, IsolationLevel, KafkaError, KafkaException, Producer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from connect.api import ConnectError

log = logging.getLogger("connect.kafkalog")

READ_BATCH_RECORDS_MAX = 1000
READ_POLL_TIMEOUT_S = 0.2
READ_TO_END_TIMEOUT_S = 30.0
# ListOffsets errors after which the partition's leader is looked up again
LEADER_MOVED = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                          KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH,
                          KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT,
                          KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN})
TOPIC_CREATE_TIMEOUT_S = 30.0
# how long, and how often, the log asks for its topic's partitions before it starts reading
PARTITIONS_TIMEOUT_S = 30.0
PARTITIONS_BACKOFF_S_MIN, PARTITIONS_BACKOFF_S_MAX = 0.1, 1.0


class KafkaBasedLog:
    def __init__(self, topic: str, client_configs: dict[str, dict], on_record, *, partitions: int,
                 replication_factor: int, producer_configs: dict | None = None) -> None:
        self.topic, self.on_record = topic, on_record
        self.send_error: KafkaError | None = None
        self.admin = AdminClient({**client_configs["admin"], "log_level": 0})
        self._ensure_topic(partitions, replication_factor)
        self.producer = Producer({**client_configs["producer"], "acks": "all", "partitioner": "murmur2_random",
                                  "linger.ms": 0, **(producer_configs or {})})
        self.consumer = Consumer({**client_configs["consumer"], "group.id": f"connect-log-{topic}",
                                  "enable.auto.commit": False, "isolation.level": "read_committed",
                                  "enable.partition.eof": False})
        self.partitions = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in self._partition_ids()]
        self.consumer.assign(self.partitions)
        self.positions: dict[int, int] = {}
        self.progress = threading.Condition()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._read, name=f"kafkalog-{topic}", daemon=True)
        self.thread.start()

    def _ensure_topic(self, partitions: int, replication_factor: int) -> None:
        if self.topic in self.admin.list_topics(timeout=10).topics:
            return
        futures = self.admin.create_topics([NewTopic(self.topic, partitions, replication_factor,
                                                     config={"cleanup.policy": "compact"})])
        try:
            futures[self.topic].result(TOPIC_CREATE_TIMEOUT_S)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    def _partition_ids(self) -> list[int]:
        """The topic's partitions, asked for until some are known, as Kafka's KafkaBasedLog.start
        does. Right after the topic is created, a broker whose metadata has not caught up yet
        answers without them (LEADER_NOT_AVAILABLE); a log that took that answer would read no
        partition at all, and its read_to_end would return at once, forever behind."""
        deadline, backoff_s = time.monotonic() + PARTITIONS_TIMEOUT_S, PARTITIONS_BACKOFF_S_MIN
        while True:
            metadata = self.admin.list_topics(self.topic, timeout=10).topics.get(self.topic)
            if metadata is not None and metadata.partitions:
                return sorted(metadata.partitions)
            if time.monotonic() + backoff_s > deadline:
                raise ConnectError(f"could not look up the partitions of topic {self.topic} within "
                                   f"{PARTITIONS_TIMEOUT_S} s ({metadata.error if metadata is not None else 'unknown'})")
            log.info("%s: no partitions known yet (%s); asking again in %.1f s", self.topic,
                     metadata.error if metadata is not None else "not listed", backoff_s)
            time.sleep(backoff_s)
            backoff_s = min(2 * backoff_s, PARTITIONS_BACKOFF_S_MAX)

    def _read(self) -> None:
        while not self.stopping.is_set():
            try:
                messages = self.consumer.consume(READ_BATCH_RECORDS_MAX, READ_POLL_TIMEOUT_S)
                for message in messages:
                    if message.error() is None:
                        self.on_record(message)
                    else:
                        log.warning("%s: %s", self.topic, message.error())
                positions = self.consumer.position(self.partitions)
            except Exception:
                if self.stopping.is_set():
                    return
                log.exception("%s: reading failed; retrying", self.topic)
                time.sleep(READ_POLL_TIMEOUT_S)
                continue
            with self.progress:
                self.positions = {tp.partition: tp.offset for tp in positions if tp.offset >= 0}
                self.progress.notify_all()

    def end_offsets(self, timeout_s: float = READ_TO_END_TIMEOUT_S) -> dict[int, tuple[int, int]]:
        """(log start, last stable offset) per partition, from ListOffsets. A partition whose
        leader moved (NOT_LEADER_OR_FOLLOWER and the like, retriable) is asked again after a
        metadata refresh, as Connect's TopicAdmin retries: the admin client answers from its
        cached leaders until something refreshes them."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self._list_offsets()
            except KafkaException as e:
                if not (e.args[0].retriable() or e.args[0].code() in LEADER_MOVED) or time.monotonic() > deadline:
                    raise
                log.info("%s: ListOffsets failed (%s); refreshing metadata and asking again", self.topic, e.args[0])
                time.sleep(READ_POLL_TIMEOUT_S)
                self.admin.list_topics(self.topic, timeout=10)

    def _list_offsets(self) -> dict[int, tuple[int, int]]:
        result = {}
        for spec_name in ("earliest", "latest"):
            futures = self.admin.list_offsets({TopicPartition(self.topic, tp.partition): getattr(OffsetSpec, spec_name)()
                                               for tp in self.partitions},
                                              isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=10)
            for tp, future in futures.items():
                result.setdefault(tp.partition, []).append(future.result().offset)
        return {p: (low, high) for p, (low, high) in result.items()}

    def read_to_end(self, timeout_s: float = READ_TO_END_TIMEOUT_S) -> None:
        """Wait until every record written before this call has been handed to on_record."""
        ends = self.end_offsets()
        deadline = time.monotonic() + timeout_s
        with self.progress:
            while not all(high <= low or self.positions.get(p, low) >= high for p, (low, high) in ends.items()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{self.topic} not read to its end within {timeout_s} s")
                self.progress.wait(remaining)

    def send(self, key: bytes, value: bytes | None) -> None:
        self.producer.produce(self.topic, key=key, value=value, on_delivery=self._on_delivery)

    def _on_delivery(self, error, message) -> None:
        if error is not None:
            self.send_error = error

    def flush(self, timeout_s: float = READ_TO_END_TIMEOUT_S) -> None:
        """Wait for every send to be acked; raise if one failed."""
        if self.producer.flush(timeout_s):
            raise TimeoutError(f"{self.topic}: writes not acked within {timeout_s} s")
        error, self.send_error = self.send_error, None
        if error is not None:
            raise KafkaException(error)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()
        self.producer.flush(5)
        self.consumer.close()
