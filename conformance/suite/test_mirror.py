"""Mirroring (MIR-1, MIR-2, MIR-3): `kspec mirror` between two cluster aliases that both name the
broker under test, so the broker carries all of a mirror's traffic at once: the source's
records read by an assign-only consumer, remote topics created with the source's partition
count, the copies produced (transactionally with exactly.once.support), the mirror's progress
in a compacted topic, offset syncs, checkpoints and the groups' offsets read back.

With DefaultReplicationPolicy the remote topic of `T` is `<source alias>.T`; each test uses
aliases of its own, `topics` and `groups` name only its own topic and group, and heartbeats
topics are not mirrored (heartbeats.replication.enabled=false), so nothing else on the broker is
touched. The remote copy of source offset o sits at offset o, since every record is copied.
"""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from conformance.capabilities import TRANSACTION_APIS
from reference.protocol.api_keys import ApiKey

RECORDS = 120
EXACTLY_ONCE_RECORDS = 2000
KILL_AFTER_COPIES = 400
PACE_RECORDS, PACE_S = 20, 0.01  # the exactly-once test's source is written while the mirror copies
DEADLINE_S = 60.0
POLL_S = 0.3
READ_TIMEOUT_S = 30.0
# what the mirror asks of a cluster: remote topics made with the source's configs, groups' offsets read
MIRROR_APIS = (ApiKey.CREATE_TOPICS, ApiKey.DESCRIBE_CONFIGS, ApiKey.LIST_GROUPS, ApiKey.OFFSET_FETCH)


class Mirror:
    """`kspec mirror mm2.properties` as an OS process, its log beside the file."""

    def __init__(self, path: str) -> None:
        self.path, self.log_path = path, path + ".log"
        self.process: subprocess.Popen | None = None

    def start(self) -> Mirror:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "kspec.cli", "mirror", self.path],
                                            stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL)
        return self

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()[-2000:]


def mm2_properties(target, tmp_path, topic: str, group: str, **settings: str) -> tuple[str, str, str]:
    """(path, source alias, target alias): one flow from the broker under test to itself."""
    suffix = uuid.uuid4().hex[:6]
    source, remote = f"mirsrc{suffix}", f"mirdst{suffix}"
    lines = [f"clusters = {source}, {remote}", f"{source}->{remote}.enabled = true"]
    for alias in (source, remote):
        lines += [f"{alias}.{key} = {value}" for key, value in target.rdkafka_config().items()]
    lines += [f"{key} = {value}" for key, value in {
        "topics": re.escape(topic), "groups": re.escape(group), "heartbeats.replication.enabled": "false",
        "replication.factor": "-1", "offset-syncs.topic.replication.factor": "-1",
        "checkpoints.topic.replication.factor": "-1", "heartbeats.topic.replication.factor": "-1",
        "offset.storage.replication.factor": "-1", "offset.storage.partitions": "1",
        "refresh.topics.interval.seconds": "1", "refresh.groups.interval.seconds": "1",
        "emit.checkpoints.interval.seconds": "1", "offset.lag.max": "10", "offset.flush.interval.ms": "300",
        **settings}.items()]
    path = str(tmp_path / f"{source}.properties")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path, source, remote


def wait_for(condition, what: str, mirror: Mirror):
    deadline = time.monotonic() + DEADLINE_S
    while True:
        value = condition()
        if value:
            return value
        if mirror.process.poll() is not None:
            raise AssertionError(f"the mirror exited ({mirror.process.returncode}) while waiting for {what}: "
                                 + mirror.log_tail())
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {DEADLINE_S} s; the mirror's log ends: {mirror.log_tail()}")
        time.sleep(POLL_S)


def produce(target, topic: str, count: int, partitions: int, killed: threading.Event | None = None) -> None:
    """`count` numbered records; with `killed`, a few at a time, the second half after the event."""
    from confluent_kafka import Producer

    producer = Producer(target.rdkafka_config(**{"linger.ms": 5}))
    for i in range(count):
        if killed is not None and i == count // 2:
            killed.wait(DEADLINE_S)
        producer.produce(topic, f"value-{i}".encode(), f"key-{i}".encode(), partition=i % partitions,
                         headers=[("n", str(i).encode())])
        if killed is not None and i % PACE_RECORDS == PACE_RECORDS - 1:
            producer.flush(READ_TIMEOUT_S)
            time.sleep(PACE_S)
    assert producer.flush(READ_TIMEOUT_S) == 0, "the source records were not acknowledged"


def read_all(target, topic: str, read_committed: bool = False) -> list:
    """Every record of the topic as (partition, offset, key, value, headers), or [] before it exists."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(target.rdkafka_config(**{
        "group.id": "kspec-assign-only", "enable.auto.commit": False, "enable.partition.eof": True,
        "isolation.level": "read_committed" if read_committed else "read_uncommitted"}))
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            return []
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in metadata.partitions])
        remaining, records = set(metadata.partitions), []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while remaining and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is None:
                records.append((message.partition(), message.offset(), message.key(), message.value(),
                                message.headers()))
            elif message.error().code() == KafkaError._PARTITION_EOF:
                remaining.discard(message.partition())
        assert not remaining, f"{topic} not read to its end within {READ_TIMEOUT_S} s"
        return sorted(records)
    finally:
        consumer.close()


def commit_group(target, group: str, topic: str, offsets: dict[int, int]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(target.rdkafka_config(**{"group.id": group, "enable.auto.commit": False}))
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


@pytest.mark.guarantee("MIR-1", "MIR-3")
def test_a_mirror_copies_in_order_and_translates_a_group_offset_no_further_than_it_consumed(target, tmp_path):
    from mirror.records import Checkpoint

    target.capabilities.require("a mirror", *MIRROR_APIS)
    topic = target.create_topic("mirror", partitions=2)
    group = target.new_topic_name("mirror-group")
    produce(target, topic, RECORDS, 2)
    consumed = {0: RECORDS // 4, 1: RECORDS // 3}  # the group's next offsets: it consumed the records before
    commit_group(target, group, topic, consumed)
    path, source, _ = mm2_properties(target, tmp_path, topic, group)
    remote_topic, checkpoints_topic = f"{source}.{topic}", f"{source}.checkpoints.internal"
    mirror = Mirror(path).start()
    try:
        wait_for(lambda: len(read_all(target, remote_topic)) == RECORDS, f"{RECORDS} records in {remote_topic}",
                 mirror)

        def translated() -> dict[int, int]:
            latest = {}
            for _, _, key, value, _ in read_all(target, checkpoints_topic):
                checkpoint = Checkpoint.decode(key, value)
                if checkpoint.group == group and checkpoint.topic == remote_topic:
                    latest[checkpoint.partition] = checkpoint.offset
            return latest if set(latest) == set(consumed) else None
        checkpointed = wait_for(translated, f"checkpoints of group {group}", mirror)
    finally:
        mirror.stop()

    # MIR-1: every source record in its remote partition, in source order, keys and headers kept
    copies, originals = read_all(target, remote_topic), read_all(target, topic)
    assert [(p, k, v, h) for p, _, k, v, h in copies] == [(p, k, v, h) for p, _, k, v, h in originals], \
        f"{remote_topic} differs from {topic}"
    # MIR-3: a consumer starting from the translated offset re-reads at most; it skips nothing
    skipped = {p: (o, consumed[p]) for p, o in checkpointed.items() if o > consumed[p]}
    assert not skipped, f"translated offsets point past records the group had not consumed " \
                        f"(partition: (translated, consumed)): {skipped}"


@pytest.mark.thorough
@pytest.mark.guarantee("MIR-2", "MIR-1")
def test_an_exactly_once_mirror_killed_mid_stream_writes_each_record_once(target, tmp_path):
    target.capabilities.require("an exactly-once mirror", *MIRROR_APIS, *TRANSACTION_APIS)
    topic = target.create_topic("mirror-eos", partitions=2)
    # progress flushed rarely: an at-least-once mirror killed now would copy again what it
    # copied since its last flush; an exactly-once one committed progress with each copy
    path, source, _ = mm2_properties(target, tmp_path, topic, "none", **{
        "exactly.once.support": "enabled", "emit.checkpoints.enabled": "false", "offset.flush.interval.ms": "5000"})
    remote_topic = f"{source}.{topic}"
    killed = threading.Event()
    producing = threading.Thread(target=produce, args=(target, topic, EXACTLY_ONCE_RECORDS, 2, killed), daemon=True)
    producing.start()
    mirror = Mirror(path).start()
    try:
        wait_for(lambda: len(read_all(target, remote_topic)) >= KILL_AFTER_COPIES,
                 f"{KILL_AFTER_COPIES} copies before the kill", mirror)
    finally:
        mirror.kill()
        killed.set()
    producing.join(DEADLINE_S)
    mirror = Mirror(path).start()  # resumes from the progress it committed with its copies
    try:
        wait_for(lambda: len({(p, v) for p, _, _, v, _ in read_all(target, remote_topic, read_committed=True)})
                 >= EXACTLY_ONCE_RECORDS,
                 f"all {EXACTLY_ONCE_RECORDS} records committed in {remote_topic}", mirror)
    finally:
        mirror.stop()
    copies = [(p, v) for p, _, _, v, _ in read_all(target, remote_topic, read_committed=True)]
    originals = [(p, v) for p, _, _, v, _ in read_all(target, topic)]
    duplicated = len(copies) - len(set(copies))
    assert duplicated == 0, f"{duplicated} records committed twice in {remote_topic} across the kill"
    assert copies == originals, f"{remote_topic} (read_committed) differs from {topic}"
