"""Consumer groups with real clients against a real `kspec broker` process."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from reference.process import BrokerProcess

from .clients import kafka_python_subscriber

PARTITIONS = 6
SESSION_TIMEOUT_MS = 3000
BROKER_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "group.consumer.heartbeat.interval.ms": "300",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(str(tmp_path_factory.mktemp("groups") / "data"), overrides=BROKER_SETTINGS) as process:
        yield process


def create_topic(bootstrap: str, name: str, records: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result arrives
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(records):
        producer.produce(name, key=str(i).encode(), value=str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(10) == 0


def consumer_config(bootstrap: str, group: str, protocol: str) -> dict:
    config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    if protocol == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config.update({"partition.assignment.strategy": protocol, "session.timeout.ms": SESSION_TIMEOUT_MS,
                       "heartbeat.interval.ms": 300})
    return config


def poll_until(consumers, done, timeout_s: float) -> list:
    seen = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for consumer in consumers:
            message = consumer.poll(0.05)
            if message is not None and not message.error():
                seen.append((message.partition(), message.offset()))
        if done(seen):
            return seen
    raise AssertionError(f"not done within {timeout_s}s: {len(seen)} records, "
                         f"assignments {[owned(c) for c in consumers]}")


def owned(consumer) -> list[int]:
    return sorted(tp.partition for tp in consumer.assignment())


def each_partition_once(consumers) -> bool:
    assignments = [owned(consumer) for consumer in consumers]
    flat = [p for each in assignments for p in each]
    return sorted(flat) == list(range(PARTITIONS)) and all(assignments)


MEMBER_SCRIPT = textwrap.dedent("""
    import sys, json
    from confluent_kafka import Consumer
    consumer = Consumer(json.loads(sys.argv[1]))
    consumer.subscribe([sys.argv[2]])
    while True:
        consumer.poll(0.1)
        if consumer.assignment():
            print("assigned", flush=True)
""")


@pytest.mark.guarantee("GRP-1")
@pytest.mark.parametrize("protocol", ["range", "cooperative-sticky", "consumer"])
def test_three_members_share_partitions_and_survive_a_kill(broker, protocol):
    """GRP-1: every partition owned by exactly one member; kill -9 one member and its
    partitions move to the others within the session timeout plus a rebalance."""
    import json

    topic = f"share-{protocol}"
    create_topic(broker.bootstrap, topic, 60)
    group = f"group-{protocol}"
    config = consumer_config(broker.bootstrap, group, protocol)
    consumers = [Consumer(config) for _ in range(2)]
    victim = subprocess.Popen([sys.executable, "-c", MEMBER_SCRIPT, json.dumps(config), topic],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        victim_lines: list[str] = []
        threading.Thread(target=lambda: victim_lines.append(victim.stdout.readline()), daemon=True).start()
        poll_until(consumers, lambda _: victim_lines and all(owned(c) for c in consumers)
                   and len(owned(consumers[0]) + owned(consumers[1])) < PARTITIONS, 30)
        assert victim_lines[0].strip() == "assigned"
        victim.kill()
        victim.wait()
        killed_at = time.monotonic()
        poll_until(consumers, lambda _: each_partition_once(consumers), 20)
        recovered_s = time.monotonic() - killed_at
        assert recovered_s < SESSION_TIMEOUT_MS / 1000 + 5, recovered_s
        newcomer = Consumer(config)
        newcomer.subscribe([topic])
        everyone = consumers + [newcomer]
        poll_until(everyone, lambda _: each_partition_once(everyone), 20)
        newcomer.close()
    finally:
        victim.kill()
        for consumer in consumers:
            consumer.close()


@pytest.mark.guarantee("GRP-2")
def test_committed_offset_survives_a_broker_restart(broker):
    """Commit, restart the broker, restart the consumer: it resumes at the committed offset."""
    topic = "resume"
    create_topic(broker.bootstrap, topic, 60)
    config = consumer_config(broker.bootstrap, "resume-group", "range") | {"enable.auto.commit": False}
    consumer = Consumer(config)
    consumer.subscribe([topic])
    poll_until([consumer], lambda seen: len(seen) >= 30, 20)
    committed = consumer.position(consumer.assignment())
    consumer.commit(offsets=committed, asynchronous=False)
    expected = {tp.partition: tp.offset for tp in committed}
    consumer.close()
    broker.restart()
    again = Consumer(config)
    try:
        stored = again.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        assert {tp.partition: tp.offset for tp in stored if tp.offset >= 0} == {
            p: o for p, o in expected.items() if o >= 0}
        again.subscribe([topic])
        seen = poll_until([again], lambda seen: len(seen) >= 60 - sum(max(o, 0) for o in expected.values()), 20)
        first_read = {}
        for partition, offset in seen:
            first_read.setdefault(partition, offset)
        for partition, offset in first_read.items():
            assert offset == max(expected.get(partition, 0), 0), (partition, offset, expected)
    finally:
        again.close()


def test_kafka_python_and_aiokafka_members_share_one_group(broker):
    """Two different client libraries in one classic group read every record exactly once."""
    import asyncio

    from aiokafka import AIOKafkaConsumer

    topic = "mixed"
    create_topic(broker.bootstrap, topic, 120)
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def kafka_python_member():
        consumer = kafka_python_subscriber(topic, bootstrap_servers=broker.bootstrap, group_id="mixed",
                                           auto_offset_reset="earliest", session_timeout_ms=SESSION_TIMEOUT_MS,
                                           heartbeat_interval_ms=300, enable_auto_commit=False)
        while not stop.is_set():
            for records in consumer.poll(timeout_ms=500).values():
                with lock:
                    seen.extend((r.partition, r.offset) for r in records)
            if consumer.assignment():
                consumer.commit()
        consumer.close()

    async def aiokafka_member():
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id="mixed",
                                    auto_offset_reset="earliest", session_timeout_ms=SESSION_TIMEOUT_MS,
                                    heartbeat_interval_ms=300, enable_auto_commit=False)
        await consumer.start()
        try:
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=100)
                for records in batches.values():
                    with lock:
                        seen.extend((r.partition, r.offset) for r in records)
                if consumer.assignment():
                    await consumer.commit()
        finally:
            await consumer.stop()

    thread = threading.Thread(target=kafka_python_member)
    thread.start()
    runner = threading.Thread(target=lambda: asyncio.run(aiokafka_member()))
    runner.start()
    deadline = time.monotonic() + 90  # seconds here; the bound is for a loaded machine
    while time.monotonic() < deadline and len(set(seen)) < 120:
        time.sleep(0.2)
    stop.set()
    thread.join(20)
    runner.join(20)
    assert len(set(seen)) == 120
    assert len(seen) == 120, "a record read twice between commits"
