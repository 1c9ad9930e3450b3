"""What the mirror tests share: an mm2.properties writer, `kspec mirror` as an OS process,
and readers of a cluster's topics through confluent-kafka."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

DEADLINE_S = 60.0  # generous: the machine is shared
MIRROR_LOG_CHARS = 6000  # the end of the mirror's log in a failure's message
SINGLE_NODE = {  # what connect-mirror-maker.properties sets for single-broker clusters
    "replication.factor": "1",
    "checkpoints.topic.replication.factor": "1",
    "heartbeats.topic.replication.factor": "1",
    "offset-syncs.topic.replication.factor": "1",
    "offset.storage.replication.factor": "1",
    "offset.storage.partitions": "2",
}


def write_properties(path, source: str, target: str, source_bootstrap: str, target_bootstrap: str,
                     **settings: str) -> str:
    """An mm2.properties with one flow source->target; settings as key=value (underscores in a
    Python name are not needed: pass a dict with ** for dotted keys)."""
    lines = [f"clusters = {source}, {target}",
             f"{source}.bootstrap.servers = {source_bootstrap}",
             f"{target}.bootstrap.servers = {target_bootstrap}",
             f"{source}->{target}.enabled = true"]
    lines += [f"{key} = {value}" for key, value in {**SINGLE_NODE, **settings}.items()]
    with open(path, "w") as f:
        f.write("# written by a test\n" + "\n".join(lines) + "\n")
    return str(path)


class MirrorProcess:
    """`kspec mirror FILE` as an OS process, its log in a file beside the properties."""

    def __init__(self, properties: str) -> None:
        self.properties = properties
        self.log_path = properties + ".log"
        self.process: subprocess.Popen | None = None

    def start(self) -> MirrorProcess:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "kspec.cli", "mirror", self.properties],
                                            stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL)
        return self

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
        return self.process.wait(60)

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def __enter__(self) -> MirrorProcess:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def read_topic(bootstrap: str, topic: str, read_committed: bool = False, timeout_s: float = 30.0) -> list:
    """Every record of the topic, partition by partition in offset order, as of now."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(topic, timeout=10)
    partitions = sorted(metadata.topics[topic].partitions) if metadata.topics[topic].error is None else []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kspec-test-reader", "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.wait.max.ms": 20,
                         "isolation.level": "read_committed" if read_committed else "read_uncommitted"})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        remaining, records = set(partitions), []
        deadline = time.monotonic() + timeout_s
        while remaining and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is None:
                records.append(message)
            elif message.error().code() == KafkaError._PARTITION_EOF:
                remaining.discard(message.partition())
        assert not remaining, f"{topic} not read to its end within {timeout_s} s"
        return sorted(records, key=lambda m: (m.partition(), m.offset()))
    finally:
        consumer.close()


def topic_exists(bootstrap: str, topic: str) -> bool:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return topic in metadata.topics and metadata.topics[topic].error is None


def wait_for(condition, what: str, deadline_s: float = DEADLINE_S, mirror: MirrorProcess | None = None,
             explain=None):
    """Poll `condition` until it returns something truthy; fail naming `what`, with what
    `explain()` says of the state reached, and the mirror's log."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if mirror is not None and mirror.process.poll() is not None:
            raise AssertionError(f"the mirror exited ({mirror.process.returncode}) while waiting for {what}:\n"
                                 + mirror.log()[-MIRROR_LOG_CHARS:])
        time.sleep(0.3)
    raise AssertionError(f"timed out after {deadline_s} s waiting for {what}"
                         + (f"; {explain()}" if explain else "")
                         + (f"; mirror log:\n{mirror.log()[-MIRROR_LOG_CHARS:]}" if mirror else ""))


def copies_compared(source: str, target: str, topic: str, remote: str) -> str:
    """Each partition's records in the source topic and the remote one, and the values missing
    from or repeated in the copy: what a test waiting for the copies to be complete reached."""
    originals, copies = read_topic(source, topic), read_topic(target, remote)
    lines = []
    for partition in sorted({m.partition() for m in originals + copies}):
        want = [m.value() for m in originals if m.partition() == partition]
        have = [m.value() for m in copies if m.partition() == partition]
        missing = [v for v in want if v not in have]
        repeated = sorted({v for v in have if have.count(v) > 1})
        lines.append(f"{topic}-{partition}: {len(want)} in the source, {len(have)} copied; "
                     f"missing {missing[:20]}, repeated {repeated[:20]}")
    return "\n".join(lines)


def kspec(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kspec.cli", *args], capture_output=True, text=True,
                          timeout=timeout_s, env={**os.environ})
