"""Helpers for the storage and clock nemesis tests: a reference broker on a node disk, and
producing and reading back with confluent-kafka."""
from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from faults.disk import NodeDisk
from reference.process import BrokerProcess

TOPIC = "t"
DELIVERY_TIMEOUT_MS = 6000
READ_TIMEOUT_S = 20.0


def broker_on(disk: NodeDisk, log_dir: Path, overrides: dict[str, str] | None = None) -> BrokerProcess:
    """A single reference broker whose data dir is the disk's (not started)."""
    return BrokerProcess(str(disk.data_dir), overrides=overrides, stderr_path=str(log_dir / "broker.log"))


def produce(bootstrap: str, values: range, value_bytes: int = 100, topic: str = TOPIC) -> tuple[list[int], list[int]]:
    """Send each value (padded to value_bytes) with acks=all; return (acked values, failed values)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": DELIVERY_TIMEOUT_MS, "log_level": 0})
    acked, failed = [], []
    for value in values:
        producer.produce(topic, str(value).encode().ljust(value_bytes, b"."), on_delivery=lambda error, message:
                         (failed if error else acked).append(int(message.value().rstrip(b"."))))
    producer.flush(DELIVERY_TIMEOUT_MS / 1000 + 10)
    return acked, failed


def read_all(bootstrap: str, topic: str = TOPIC) -> tuple[list[int], list[str]]:
    """Every value of partition 0 from the beginning to the high watermark, CRCs checked; and any errors."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kspec-test", "check.crcs": True,
                         "enable.auto.commit": False, "log_level": 0})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        values, errors, position = [], [], 0
        deadline = time.monotonic() + READ_TIMEOUT_S
        while position < high and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                errors.append(str(message.error()))
                continue
            values.append(int(message.value().rstrip(b".")))
            position = message.offset() + 1
        assert position >= high or errors, f"read to {position} of {high} within {READ_TIMEOUT_S} s"
        return values, errors
    finally:
        consumer.close()
