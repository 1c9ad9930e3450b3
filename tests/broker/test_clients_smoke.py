"""Unmodified kafka-python and confluent-kafka produce to and consume from the broker
(assign mode; groups are not implemented yet). The five-client acceptance runs live in tests/clients/."""
from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

RECORDS = 500
POLL_DEADLINE_S = 20


def test_confluent_kafka_idempotent_produce_and_assigned_consume(broker):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "compression.type": "lz4", "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce("confluent-smoke", key=b"k%d" % (i % 7), value=b"v%d" % i)
    assert producer.flush(POLL_DEADLINE_S) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([ConfluentTopicPartition("confluent-smoke", 0, 0)])
    values = []
    deadline = time.monotonic() + POLL_DEADLINE_S
    while len(values) < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            values.append(message.value())
    consumer.close()
    assert values == [b"v%d" % i for i in range(RECORDS)]


def test_kafka_python_produce_and_assigned_consume(broker):
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", compression_type="gzip")
    futures = [producer.send("kafka-python-smoke", value=b"v%d" % i) for i in range(RECORDS)]
    offsets = [future.get(timeout=POLL_DEADLINE_S).offset for future in futures]
    producer.close()
    assert offsets == list(range(RECORDS))
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, group_id=None,
                             consumer_timeout_ms=3000)
    consumer.assign([KafkaTopicPartition("kafka-python-smoke", 0)])
    consumer.seek_to_beginning()
    values = [message.value for message in consumer]
    consumer.close()
    assert values == [b"v%d" % i for i in range(RECORDS)]
