"""Client set-up shared by the group tests that drive real clients."""
from __future__ import annotations

import time

METADATA_WAIT_S = 60


def kafka_python_subscriber(topic: str, **settings):
    """A kafka-python consumer subscribed to `topic` once it already knows the topic's partitions.

    kafka-python 3.0 may send its first JoinGroup before the topic's metadata arrives; the leader
    then assigns nothing and the metadata's arrival starts a second join. If a poll(timeout_ms)
    gives up while that second join is in flight, the finished join is never applied and the
    member stays with no partitions while the broker counts it in the group. Learning the
    partitions before subscribing means the first join already assigns them.
    """
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(**settings)
    deadline = time.monotonic() + METADATA_WAIT_S
    while not consumer.partitions_for_topic(topic):
        assert time.monotonic() < deadline, f"kafka-python has no metadata for {topic} after {METADATA_WAIT_S}s"
        time.sleep(0.1)
    consumer.subscribe([topic])
    return consumer

