"""Transactions through real clients on one `kspec broker` process (TXN-1, TXN-2).

confluent-kafka (librdkafka) and kafka-python transactional producers; read_committed
consumers never see an aborted or open transaction's records, read_uncommitted ones do; a
zombie producer is fenced; a consume-transform-produce loop copies a topic exactly once
across producer restarts. The 3-node variants are in test_cluster_exactly_once.py.
"""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaProducer


POLL_DEADLINE_S = 20.0


def consume_all(bootstrap: str, topic: str, isolation_level: str, expected_count: int | None = None,
                partitions: int = 1) -> list[bytes]:
    """Every value of `topic` from the start, as one consumer with this isolation level sees it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                         "isolation.level": isolation_level, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values, at_end = [], set()
    deadline = time.monotonic() + POLL_DEADLINE_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                at_end.add(message.partition())
                if len(at_end) == partitions and (expected_count is None or len(values) >= expected_count):
                    break
                continue
            at_end.discard(message.partition())
            values.append(message.value())
    finally:
        consumer.close()
    return values


def transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 30_000, "linger.ms": 5})
    producer.init_transactions(30)
    return producer


def test_aborted_records_reach_read_uncommitted_only_and_open_ones_block_read_committed(broker, create_topic):
    topic = create_topic("txn-visibility")
    producer = transactional_producer(broker.bootstrap, "visibility")
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, b"committed-%d" % i)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, b"aborted-%d" % i)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"open")
    producer.flush(30)  # written, transaction still open: the last stable offset stays before it

    committed = consume_all(broker.bootstrap, topic, "read_committed", expected_count=5)
    assert committed == [b"committed-%d" % i for i in range(5)]
    uncommitted = consume_all(broker.bootstrap, topic, "read_uncommitted", expected_count=11)
    assert uncommitted == [b"committed-%d" % i for i in range(5)] + [b"aborted-%d" % i for i in range(5)] + [b"open"]

    producer.commit_transaction(30)
    assert consume_all(broker.bootstrap, topic, "read_committed", expected_count=6)[-1] == b"open"


def test_zombie_producer_is_fenced_and_its_later_writes_never_become_visible(broker, create_topic):
    topic = create_topic("txn-zombie")
    zombie = transactional_producer(broker.bootstrap, "zombie")
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie-before-fence")
    zombie.flush(30)

    successor = transactional_producer(broker.bootstrap, "zombie")  # fences the zombie, aborts its transaction
    successor.begin_transaction()
    successor.produce(topic, b"successor")
    successor.commit_transaction(30)

    zombie.produce(topic, b"zombie-after-fence")
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    assert raised.value.args[0].fatal() or raised.value.args[0].txn_requires_abort()
    assert consume_all(broker.bootstrap, topic, "read_committed", expected_count=1) == [b"successor"]
    assert b"zombie-after-fence" not in consume_all(broker.bootstrap, topic, "read_uncommitted", expected_count=2)


def test_kafka_python_transactions_commit_and_abort(broker, create_topic):
    topic = create_topic("txn-kafka-python")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kafka-python-txn")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(3):
        producer.send(topic, b"kept-%d" % i)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send(topic, b"dropped")
    producer.flush()
    producer.abort_transaction()
    producer.close()
    assert consume_all(broker.bootstrap, topic, "read_committed", expected_count=3) == [b"kept-%d" % i for i in range(3)]
    assert consume_all(broker.bootstrap, topic, "read_uncommitted", expected_count=4)[-1] == b"dropped"


def test_consume_transform_produce_copies_a_topic_exactly_once_across_producer_restarts(broker, create_topic):
    """KIP-447: offsets committed inside the producer's transaction. Each round copies a few
    records; round 2 leaves its transaction open and its producer is replaced (fenced and
    aborted); the copy in the end holds every input record exactly once (TXN-1)."""
    source, sink, group = create_topic("ctp-in"), create_topic("ctp-out"), "ctp-group"
    feeder = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        feeder.produce(source, b"record-%d" % i)
    feeder.flush(30)

    def run_round(limit: int, commit: bool) -> None:
        producer = transactional_producer(broker.bootstrap, "ctp")
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition(source, 0)])
        committed = consumer.committed([TopicPartition(source, 0)], timeout=10)[0].offset
        consumer.assign([TopicPartition(source, 0, max(committed, 0))])
        producer.begin_transaction()
        copied, deadline = 0, time.monotonic() + POLL_DEADLINE_S
        while copied < limit and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            producer.produce(sink, message.value().upper())
            copied += 1
            next_offset = message.offset() + 1
        assert copied == limit
        producer.send_offsets_to_transaction([TopicPartition(source, 0, next_offset)],
                                             consumer.consumer_group_metadata(), 30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)  # written, never committed: the next instance fences this one
        consumer.close()

    run_round(10, commit=True)
    run_round(10, commit=False)
    run_round(20, commit=True)
    copied = consume_all(broker.bootstrap, sink, "read_committed", expected_count=30)
    assert sorted(copied) == sorted(b"RECORD-%d" % i for i in range(30))
    assert len(consume_all(broker.bootstrap, sink, "read_uncommitted", expected_count=40)) == 40  # the aborted 10 too
