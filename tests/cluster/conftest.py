"""Fixtures for the cluster acceptance tests: real `kspec broker` processes in combined mode
(ClusterProcess), real clients (confluent-kafka), kill -9 and restarts, with timeouts shrunk
(reference.process.FAST_FAILOVER) so a node's death is noticed in about a second.
"""
from __future__ import annotations

import itertools
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conformance.wire import WireClient
from reference.process import FAST_FAILOVER, ClusterProcess
from reference.protocol.api_keys import ApiKey
from tests import log_tails

WAIT_S = 60.0  # a bound for a loaded 2-core machine; conditions usually hold within seconds
_topic_numbers = itertools.count()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report ends with the last lines of each node's log (fences, elections,
    errors): on a CI machine the clusters' directories are gone once the run ends."""
    outcome = yield
    log_tails.attach(item, outcome.get_result())


@pytest.fixture
def start_cluster(tmp_path):
    """start_cluster(nodes=3, **overrides) -> a started ClusterProcess, stopped after the test."""
    started: list[ClusterProcess] = []

    def start(nodes: int = 3, **overrides: str) -> ClusterProcess:
        cluster = ClusterProcess(str(tmp_path / f"cluster{len(started)}"), nodes,
                                 overrides={**FAST_FAILOVER, **overrides})
        started.append(cluster)
        cluster.start()
        return cluster

    start.started = started
    yield start
    for cluster in started:
        cluster.stop()


def create_topic(cluster: ClusterProcess, partitions: int = 1, replication_factor: int = 3, **configs: str) -> str:
    name = f"acceptance-{next(_topic_numbers)}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    future = admin.create_topics([NewTopic(name, partitions, replication_factor, config=configs)])[name]
    future.result(WAIT_S)
    wait_until(lambda: all(cluster.leader_of(name, p) >= 0 for p in range(partitions)), f"{name} has leaders")
    return name


def wait_until(condition, what: str, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s}s: {what}")


def views(cluster: ClusterProcess, topic: str, partition: int = 0) -> dict[int, tuple[int, tuple[int, ...]]]:
    """Each serving broker's own (leader, ISR) of the partition, asked of that broker alone.
    Brokers replay the metadata log at their own pace: one that has not yet heard of a change
    still reports the old leader, so a single answer from any broker may be stale."""
    seen = {}
    for node_id in cluster.running_brokers():
        try:
            with WireClient(cluster.addresses[node_id], timeout_s=5.0) as wire:
                response = wire.request(ApiKey.METADATA, 12, {
                    "topics": [{"name": topic}], "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False})
        except OSError:
            continue  # gone, or not serving clients yet (catching up after a restart)
        seen |= {node_id: (answer.leader_id, tuple(sorted(answer.isr_nodes)))
                 for described in response.topics for answer in described.partitions
                 if answer.partition_index == partition}
    return seen


def agreed_state(cluster: ClusterProcess, topic: str, partition: int = 0) -> tuple[int, tuple[int, ...]] | None:
    """(leader, ISR) once every running broker serves clients and reports the same; else None."""
    seen = views(cluster, topic, partition)
    if sorted(seen) == cluster.running_brokers() and len(set(seen.values())) == 1:
        return next(iter(seen.values()))
    return None


NO_ANSWER = (-1, [], [])


def partition_state(cluster: ClusterProcess, topic: str, partition: int = 0) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, isr) as the cluster's metadata reports them; NO_ANSWER when no node answers."""
    metadata = cluster.metadata(topic)
    if metadata is None or topic not in metadata.topics or partition not in metadata.topics[topic].partitions:
        return NO_ANSWER
    p = metadata.topics[topic].partitions[partition]
    return p.leader, sorted(p.replicas), sorted(p.isrs)


def producer(cluster: ClusterProcess, **config) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                     "message.timeout.ms": 10_000, "log_level": 0, **config})


def produce_acked(cluster: ClusterProcess, topic: str, values: list[bytes], partition: int = 0) -> dict[bytes, int]:
    """Produce with acks=all; the acked values with their offsets."""
    acked: dict[bytes, int] = {}
    client = producer(cluster)
    for value in values:
        client.produce(topic, value, partition=partition,
                       on_delivery=lambda error, m: acked.__setitem__(m.value(), m.offset()) if error is None else None)
    client.flush(WAIT_S)
    return acked


def read_all(cluster: ClusterProcess, topic: str, partition: int = 0) -> list[tuple[int, bytes]]:
    """Every record of the partition from offset 0 up to its high watermark, as (offset, value)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "acceptance-reader",
                         "enable.auto.commit": False, "log_level": 0})
    assigned = TopicPartition(topic, partition, 0)
    high_watermark = wait_until(lambda: _high_watermark(consumer, assigned), "the high watermark")
    consumer.assign([assigned])
    records = []
    deadline = time.monotonic() + WAIT_S
    while (not records or records[-1][0] < high_watermark - 1) and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            records.append((message.offset(), message.value()))
    consumer.close()
    assert records and records[-1][0] == high_watermark - 1, f"read up to the high watermark {high_watermark}"
    return records


def _high_watermark(consumer: Consumer, assigned: TopicPartition) -> int | None:
    try:
        return consumer.get_watermark_offsets(assigned, timeout=2)[1] or None
    except KafkaException:
        return None
