"""Transactions through real clients on one `kspec broker` process (TXN-1, TXN-2).

confluent-kafka (librdkafka) and kafka-python transactional producers; read_committed
consumers never see an aborted or open transaction's records, read_uncommitted ones do; a
zombie producer is fenced; a consume-transform-produce loop copies a topic exactly once
across producer restarts. The 3-node variants need a multi-process cluster helper.
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
