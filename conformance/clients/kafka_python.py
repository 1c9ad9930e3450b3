"""kafka-python driver (no api_version pin: the client negotiates as it does in production)."""
from __future__ import annotations

import time

from conformance.clients import Delivery, Message, Record

TIMEOUT_S_DEFAULT = 120.0


def unavailable_reason() -> str | None:
    try:
        import kafka  # noqa: F401
    except ImportError:
        return "kafka-python is not installed"
    return None


def produce(bootstrap: str, topic: str, records: list[Record], *, compression: str = "none",
            acks: str | int = "all", idempotent: bool | None = None, extra: dict | None = None,
            timeout_s: float = TIMEOUT_S_DEFAULT) -> list[Delivery]:
    from kafka import KafkaProducer

    options = {"bootstrap_servers": bootstrap, "acks": acks, "linger_ms": 5, "batch_size": 1_000_000,
               "compression_type": None if compression == "none" else compression, **(extra or {})}
    if idempotent is not None:
        options["enable_idempotence"] = idempotent
    producer = KafkaProducer(**options)
    try:
        futures = [producer.send(topic, value=r.value.encode(), partition=r.partition,
                                 key=None if r.key is None else r.key.encode(),
                                 headers=[(k, v.encode()) for k, v in r.headers]) for r in records]
        producer.flush(timeout=timeout_s)
        deliveries = []
        for future in futures:
            metadata = future.get(timeout=timeout_s)
            deliveries.append(Delivery(metadata.partition, metadata.offset))
        return deliveries
    finally:
        producer.close(timeout=10)


def consume(bootstrap: str, topic: str, partitions: list[int], count: int, *,
            extra: dict | None = None, timeout_s: float = TIMEOUT_S_DEFAULT) -> list[Message]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             **(extra or {}))
    consumer.assign([TopicPartition(topic, p) for p in partitions])
    consumer.seek_to_beginning()
    messages: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(messages) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500, max_records=10_000).values():
                for msg in batch:
                    messages.append(Message(
                        msg.partition, msg.offset,
                        None if msg.key is None else msg.key.decode(),
                        None if msg.value is None else msg.value.decode(),
                        tuple((k, v.decode()) for k, v in msg.headers)))
    finally:
        consumer.close()
    return messages
