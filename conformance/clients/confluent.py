"""confluent-kafka (librdkafka) driver."""
from __future__ import annotations

import time

from conformance.clients import Delivery, Message, Record

TIMEOUT_S_DEFAULT = 120.0


def unavailable_reason() -> str | None:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return "confluent-kafka is not installed (pip install kspec[clients])"
    return None


def produce(bootstrap: str, topic: str, records: list[Record], *, compression: str = "none",
            acks: str = "all", idempotent: bool = False, extra: dict | None = None,
            timeout_s: float = TIMEOUT_S_DEFAULT) -> list[Delivery]:
    from confluent_kafka import KafkaException, Producer

    producer = Producer({
        "bootstrap.servers": bootstrap, "compression.type": compression, "acks": acks,
        "enable.idempotence": idempotent, "linger.ms": 5, "batch.size": 1_000_000,
        "queue.buffering.max.messages": 1_000_000, **(extra or {}),
    })
    deliveries: list[Delivery | None] = [None] * len(records)
    errors: list[str] = []

    def on_delivery(index: int):
        def callback(err, msg):
            if err is not None:
                errors.append(f"record {index}: {err}")
            else:
                deliveries[index] = Delivery(msg.partition(), msg.offset())
        return callback

    for index, record in enumerate(records):
        while True:
            try:
                producer.produce(topic, value=record.value.encode(), partition=record.partition,
                                 key=None if record.key is None else record.key.encode(),
                                 headers=[(k, v.encode()) for k, v in record.headers],
                                 on_delivery=on_delivery(index))
                break
            except BufferError:
                producer.poll(0.05)
    deadline = time.monotonic() + timeout_s
    while producer.flush(1.0) > 0:
        if time.monotonic() > deadline:
            raise KafkaException(f"produce timed out with {len(producer)} records in flight")
    if errors:
        raise RuntimeError(f"{len(errors)} records failed, first: {errors[0]}")
    return deliveries  # type: ignore[return-value]


def consume(bootstrap: str, topic: str, partitions: list[int], count: int, *,
            extra: dict | None = None, timeout_s: float = TIMEOUT_S_DEFAULT) -> list[Message]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "kspec-assign-only", "enable.auto.commit": False,
        "enable.partition.eof": False, **(extra or {}),
    })
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    messages: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(messages) < count and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                if msg.error():
                    raise RuntimeError(f"consume error: {msg.error()}")
                messages.append(Message(
                    msg.partition(), msg.offset(),
                    None if msg.key() is None else msg.key().decode(),
                    None if msg.value() is None else msg.value().decode(),
                    tuple((k, v.decode()) for k, v in (msg.headers() or ()))))
    finally:
        consumer.close()
    return messages
