"""A running mirror between two `kspec broker` clusters, checked from outside with
confluent-kafka: records, remote topics, new partitions and topics, heartbeats, offset syncs,
checkpoints, group offsets that let a group move over, and `kspec mirror status`."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic,
                                  ResourceType)

from mirror.records import Checkpoint, Heartbeat, OffsetSync

from mirror_helpers import MirrorProcess, copies_compared, kspec, read_topic, topic_exists, wait_for, write_properties

RECORDS = 200
# An hour ago: well inside the topics' retention.ms (a day, then 12 h). Timestamps older than
# retention.ms would have each append roll a segment (segment.ms counts from a segment's first
# timestamp) and the broker's next retention check (every 5 min) delete all but the last of them,
# on the source and on the target, whenever that check fell within the test.
BASE_TIMESTAMP_MS = int(time.time() * 1000) - 3_600_000


def produce(bootstrap: str, topic: str, numbers: range, partitions: int) -> None:
    """Every record acknowledged (flush counts only what is still queued: a refused record is not one)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    refused = []

    def delivered(error, message) -> None:
        if error is not None:
            refused.append((message.partition(), message.value(), error))

    for i in numbers:
        producer.produce(topic, f"value-{i}", f"key-{i}", partition=i % partitions,
                         headers=[("n", str(i).encode()), ("kind", b"test")], timestamp=BASE_TIMESTAMP_MS + i,
                         on_delivery=delivered)
    assert producer.flush(30) == 0 and refused == []


def create(bootstrap: str, topic: str, partitions: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result()


@pytest.mark.guarantee("MIR-1")
def test_records_reach_the_remote_topic_in_order_with_keys_headers_and_timestamps(clusters, tmp_path):
    source, target = clusters
    create(source, "orders", 2, **{"retention.ms": "86400000", "min.insync.replicas": "1"})
    produce(source, "orders", range(RECORDS), 2)
    properties = write_properties(tmp_path / "mm2.properties", "east", "west", source, target, **{
        "topics": "orders, invoices.*", "refresh.topics.interval.seconds": "1", "offset.lag.max": "10",
        "offset.flush.interval.ms": "300", "emit.heartbeats.interval.seconds": "1",
        "sync.topic.configs.interval.seconds": "1"})
    with MirrorProcess(properties) as mirror:
        wait_for(lambda: topic_exists(target, "east.orders")
                 and len(read_topic(target, "east.orders")) == RECORDS, "200 records in east.orders", mirror=mirror,
                 explain=lambda: copies_compared(source, target, "orders", "east.orders"))
        # New partitions and new topics are followed at the next refresh.
        admin = AdminClient({"bootstrap.servers": source})
        admin.create_partitions([NewPartitions("orders", 3)])["orders"].result()
        create(source, "invoices-1", 1)
        produce(source, "orders", range(RECORDS, RECORDS + 30), 3)
        produce(source, "invoices-1", range(5), 1)
        create(source, "not-mirrored", 1)
        target_admin = AdminClient({"bootstrap.servers": target})
        remote = ConfigResource(ResourceType.TOPIC, "east.orders")
        assert target_admin.describe_configs([remote])[remote].result()["retention.ms"].value == "86400000"
        # A config changed in the source follows at the next config sync.
        changed = ConfigResource(ResourceType.TOPIC, "orders", incremental_configs=[
            ConfigEntry("retention.ms", "43200000", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([changed])[changed].result()
        wait_for(lambda: target_admin.describe_configs([remote])[remote].result()["retention.ms"].value == "43200000",
                 "retention.ms synced to east.orders", mirror=mirror)
        wait_for(lambda: len(read_topic(target, "east.orders")) == RECORDS + 30, "records of the new partition",
                 mirror=mirror, explain=lambda: copies_compared(source, target, "orders", "east.orders"))
        wait_for(lambda: topic_exists(target, "east.invoices-1") and len(read_topic(target, "east.invoices-1")) == 5,
                 "the new topic east.invoices-1", mirror=mirror)
        wait_for(lambda: any(Heartbeat.decode(m.key(), m.value())[:2] == ("east", "west")
                             for m in read_topic(target, "heartbeats")), "a heartbeat east->west", mirror=mirror)
        status = kspec("mirror", "status", properties)
        assert mirror.stop() == 0
    assert not topic_exists(target, "east.not-mirrored")

    copies, originals = read_topic(target, "east.orders"), read_topic(source, "orders")
    assert [(m.partition(), m.key(), m.value(), m.headers(), m.timestamp()) for m in copies] == \
           [(m.partition(), m.key(), m.value(), m.headers(), m.timestamp()) for m in originals]
    metadata = target_admin.list_topics("east.orders", timeout=10)
    assert len(metadata.topics["east.orders"].partitions) == 3
    resource = ConfigResource(ResourceType.TOPIC, "east.orders")
    configs = target_admin.describe_configs([resource])[resource].result()
    assert configs["retention.ms"].value == "43200000"      # synced at creation, then again
    assert configs["min.insync.replicas"].is_default          # config.properties.exclude

    syncs = [OffsetSync.decode(m.key(), m.value()) for m in read_topic(source, "mm2-offset-syncs.west.internal")]
    assert OffsetSync("orders", 0, 0, 0) in syncs
    by_partition = {}
    for sync in syncs:
        if sync.topic == "orders":
            by_partition.setdefault(sync.partition, []).append(sync)
    # The deferred sync names the last record copied, so an idle partition translates exactly.
    assert by_partition[0][-1] == OffsetSync("orders", 0, 109, 109)

    assert status.returncode == 0, status.stderr
    rows = [line.split() for line in status.stdout.splitlines() if line.startswith("east.orders")]
    assert ["east.orders", "0", "110", "110", "110", "0"] in rows, status.stdout


@pytest.mark.guarantee("MIR-3")
def test_a_group_moves_to_the_target_and_continues_without_gaps(clusters, tmp_path):
    source, target = clusters
    create(source, "payments", 1)
    produce(source, "payments", range(100), 1)
    consumer = Consumer({"bootstrap.servers": source, "group.id": "billing", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("payments", 0, 0)])
    consumed = []
    while len(consumed) < 37:
        message = consumer.poll(5)
        if message is not None and message.error() is None:
            consumed.append(message)
    consumer.commit(offsets=[TopicPartition("payments", 0, 37)], asynchronous=False)
    consumer.close()

    properties = write_properties(tmp_path / "mm2.properties", "north", "south", source, target, **{
        "topics": "payments", "groups": "billing", "emit.checkpoints.interval.seconds": "1",
        "sync.group.offsets.enabled": "true", "sync.group.offsets.interval.seconds": "1",
        "offset.flush.interval.ms": "300"})
    admin = AdminClient({"bootstrap.servers": target})

    def translated_offset():
        if not topic_exists(target, "north.payments"):
            return None
        answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("billing")])["billing"].result()
        return next((tp.offset for tp in answer.topic_partitions if tp.topic == "north.payments" and tp.offset >= 0),
                    None)

    with MirrorProcess(properties) as mirror:
        offset = wait_for(translated_offset, "billing's offset in south", mirror=mirror)
        checkpoints = [Checkpoint.decode(m.key(), m.value()) for m in read_topic(target, "north.checkpoints.internal")]
        status = kspec("mirror", "status", properties)
        assert mirror.stop() == 0
    assert ["billing", "north.payments", "0", "37", str(offset)] in [line.split() for line in status.stdout.splitlines()]
    assert Checkpoint("billing", "north.payments", 0, 37, offset) in checkpoints
    # The same group on the target continues: nothing after what it consumed is skipped, and what
    # it re-reads is within the documented window (offset.lag.max, here the first record's sync).
    target_consumer = Consumer({"bootstrap.servers": target, "group.id": "billing", "enable.auto.commit": False,
                                "auto.offset.reset": "latest"})
    target_consumer.subscribe(["north.payments"])
    numbers = []
    while len(numbers) < 100 - 37:
        message = target_consumer.poll(5)
        assert message is not None, f"the group stopped after {numbers}"
        if message.error() is None:
            numbers.append(int(dict(message.headers())["n"]))
    target_consumer.close()
    assert numbers[0] <= 37 and 37 - numbers[0] <= 100
    assert numbers[numbers.index(37):] == list(range(37, 37 + len(numbers) - numbers.index(37)))

