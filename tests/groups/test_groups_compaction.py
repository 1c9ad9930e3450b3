"""Compaction through a real broker: a compacted topic keeps each key's latest value at its
offset (RET-1), committed offsets survive compaction of __consumer_offsets and a restart
(GRP-2), and __consumer_offsets is internal: reported so, and closed to producers."""
from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from reference.process import BrokerProcess
from reference.storage.cleaner import CHECKPOINT_FILE, CleanerCheckpoint

DELETE_RETENTION_MS = 2000
BROKER_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "log.cleaner.backoff.ms": "200",
    "offsets.topic.num.partitions": "1",  # every group's offsets land in __consumer_offsets-0
    "offsets.topic.segment.bytes": "1024",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(str(tmp_path_factory.mktemp("compaction") / "data"), overrides=BROKER_SETTINGS) as process:
        yield process


def read_partition(bootstrap: str, topic: str, start_offset: int = 0, idle_s: float = 1.5) -> list:
    """(offset, key, value) of every record from `start_offset`, read in assign mode until idle."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, start_offset)])
    records, idle_since = [], time.monotonic()
    try:
        while time.monotonic() - idle_since < idle_s:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                records.append((message.offset(), message.key(), message.value()))
                idle_since = time.monotonic()
    finally:
        consumer.close()
    return records


def wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.3)
    raise AssertionError(f"not within {timeout_s}s: {what}")


@pytest.mark.guarantee("RET-1")
def test_a_compacted_topic_keeps_the_latest_value_per_key_at_its_offset(broker):
    topic = "compacted"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": str(DELETE_RETENTION_MS)})])[topic].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    produced: dict[int, tuple[bytes, bytes | None]] = {}

    def delivered(error, message):
        assert error is None, error
        produced[message.offset()] = (message.key(), message.value())

    for update in range(40):
        for key in range(10):
            producer.produce(topic, key=b"key-%d" % key, value=b"%d-%d" % (key, update), on_delivery=delivered)
        producer.flush(10)
    for key in range(3):  # delete three keys
        producer.produce(topic, key=b"key-%d" % key, value=None, on_delivery=delivered)
    for filler in range(60):  # close the segment that holds the tombstones
        producer.produce(topic, key=b"filler-%d" % filler, value=b"x" * 100, on_delivery=delivered)
        producer.flush(10)
    log_end_offset = len(produced)
    latest = {key: offset for offset, (key, _) in sorted(produced.items())}

    def compacted():
        records = read_partition(broker.bootstrap, topic)
        return records if len(records) < 150 else None

    records = wait_for(compacted, 20, "the cleaner compacts the topic")
    offsets = [offset for offset, _, _ in records]
    assert offsets == sorted(set(offsets)) and offsets[-1] == log_end_offset - 1
    for offset, key, value in records:
        assert produced[offset] == (key, value), "a record is read at the offset it was written at"
    for key, offset in latest.items():
        if produced[offset][1] is not None:
            assert (offset, key, produced[offset][1]) in records, f"the latest value of {key} is kept"
    removed = next(offset for offset in range(log_end_offset) if offset not in offsets)
    (first, *_) = read_partition(broker.bootstrap, topic, start_offset=removed, idle_s=0.5)
    assert first[0] == min(o for o in offsets if o > removed), "a fetch in a gap returns the next record"

    tombstone_keys = {b"key-0", b"key-1", b"key-2"}
    time.sleep(DELETE_RETENTION_MS / 1000)
    after_horizon = wait_for(lambda: (lambda r: r if not tombstone_keys & {k for _, k, _ in r} else None)(
        read_partition(broker.bootstrap, topic)), 20, "the tombstones go after delete.retention.ms")
    assert [r for r in records if r[1] not in tombstone_keys] == after_horizon

    producer.produce(topic, key=b"key-9", value=b"after", on_delivery=delivered)
    producer.flush(10)
    assert max(produced) == log_end_offset, "offsets are never reused"


@pytest.mark.guarantee("GRP-2")
def test_a_committed_offset_survives_compaction_of_the_offsets_topic_and_a_restart(broker):
    topic, group = "resume-after-compaction", "compacted-offsets"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(100):
        producer.produce(topic, key=b"%d" % i, value=b"%d" % i)
    assert producer.flush(10) == 0
    config = {"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False}
    consumer = Consumer(config)
    consumer.subscribe([topic])
    read = 0
    while read < 60:  # one commit per record: many superseded offset records
        message = consumer.poll(1)
        if message is None or message.error():
            continue
        read += 1
        consumer.commit(message=message, asynchronous=False)
    consumer.close()

    offsets_dir = os.path.join(broker.data_dir, "__consumer_offsets-0")
    wait_for(lambda: os.path.exists(os.path.join(offsets_dir, CHECKPOINT_FILE)), 20,
             "the cleaner compacts __consumer_offsets-0")
    assert CleanerCheckpoint.read(offsets_dir).first_dirty_offset > 0
    offset_records = read_partition(broker.bootstrap, "__consumer_offsets")
    assert len(offset_records) < 60, "superseded commits were compacted away"

    broker.restart()
    again = Consumer(config)
    try:
        (stored,) = again.committed([TopicPartition(topic, 0)], timeout=10)
        assert stored.offset == 60
        again.subscribe([topic])
        first = None
        while first is None:
            message = again.poll(1)
            if message is not None and not message.error():
                first = message.offset()
        assert first == 60, "the restarted consumer resumes at the committed offset"
    finally:
        again.close()


def test_the_offsets_topic_is_internal_and_closed_to_producers(broker):
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (described,) = admin.describe_topics(["__consumer_offsets"])
        assert described["is_internal"] is True
        (ordinary,) = admin.describe_topics(["compacted"])
        assert ordinary["is_internal"] is False
    finally:
        admin.close()
    errors = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.send.max.retries": 0})
    producer.produce("__consumer_offsets", key=b"k", value=b"v", partition=0,
                     on_delivery=lambda error, message: errors.append(error))
    producer.flush(10)
    assert [error.code() for error in errors] == [KafkaError.TOPIC_EXCEPTION]  # INVALID_TOPIC_EXCEPTION, 17
