"""aiokafka driver (asyncio; each call runs its own event loop)."""
from __future__ import annotations

import asyncio
import time

from conformance.clients import Delivery, Message, Record

TIMEOUT_S_DEFAULT = 120.0


def unavailable_reason() -> str | None:
    try:
        import aiokafka  # noqa: F401
    except ImportError:
        return "aiokafka is not installed (pip install kspec[clients])"
    return None


def produce(bootstrap: str, topic: str, records: list[Record], *, compression: str = "none",
            acks: str | int = "all", idempotent: bool = False, extra: dict | None = None,
            timeout_s: float = TIMEOUT_S_DEFAULT) -> list[Delivery]:
    return asyncio.run(asyncio.wait_for(
        _produce(bootstrap, topic, records, compression, acks, idempotent, extra or {}), timeout_s))


async def _produce(bootstrap, topic, records, compression, acks, idempotent, extra) -> list[Delivery]:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=acks, enable_idempotence=idempotent,
                                linger_ms=5, max_batch_size=1_000_000,
                                compression_type=None if compression == "none" else compression, **extra)
    await producer.start()
    try:
        futures = [await producer.send(topic, value=r.value.encode(), partition=r.partition,
                                       key=None if r.key is None else r.key.encode(),
                                       headers=[(k, v.encode()) for k, v in r.headers]) for r in records]
        return [Delivery(m.partition, m.offset) for m in await asyncio.gather(*futures)]
    finally:
        await producer.stop()


def consume(bootstrap: str, topic: str, partitions: list[int], count: int, *,
            extra: dict | None = None, timeout_s: float = TIMEOUT_S_DEFAULT) -> list[Message]:
    return asyncio.run(_consume(bootstrap, topic, partitions, count, extra or {}, timeout_s))


async def _consume(bootstrap, topic, partitions, count, extra, timeout_s) -> list[Message]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest", **extra)
    await consumer.start()
    consumer.assign([TopicPartition(topic, p) for p in partitions])
    await consumer.seek_to_beginning()
    messages: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(messages) < count and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500, max_records=10_000)).values():
                for msg in batch:
                    messages.append(Message(
                        msg.partition, msg.offset,
                        None if msg.key is None else msg.key.decode(),
                        None if msg.value is None else msg.value.decode(),
                        tuple((k, v.decode()) for k, v in msg.headers)))
    finally:
        await consumer.stop()
    return messages
