"""Running the real `kspec` process, and independent kafka-python clients to check its effects."""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
from dataclasses import dataclass

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.protocol.api_key import ApiKey

CLI_TIMEOUT_S = 60.0
KSPEC = [os.path.join(os.path.dirname(sys.executable), "kspec")]  # the console script users run
_topic_numbers = itertools.count()


@dataclass
class Run:
    """A finished `kspec` process."""

    returncode: int
    stdout: str
    stderr: str

    def error_line(self) -> str:
        """The one-line error a failed command must print, checked to be exactly one line."""
        lines = self.stderr.strip().splitlines()
        assert len(lines) == 1, f"expected one line on stderr, got:\n{self.stderr}"
        assert "Traceback" not in self.stderr
        assert lines[0].startswith("Error: ")
        return lines[0]


def kspec(*args: str, stdin: str | None = None, timeout_s: float = CLI_TIMEOUT_S) -> Run:
    """Run `kspec ARGS...` as its own process, stdin from a string."""
    completed = subprocess.run([*KSPEC, *args], input=stdin, capture_output=True,
                               text=True, timeout=timeout_s, env={**os.environ, "COLUMNS": "240"})
    return Run(completed.returncode, completed.stdout, completed.stderr)


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{next(_topic_numbers)}"


@dataclass
class Target:
    """A broker or cluster under test, and independent kafka-python clients for it."""

    name: str
    bootstrap: str
    node_count: int

    def admin(self) -> KafkaAdminClient:
        return KafkaAdminClient(bootstrap_servers=self.bootstrap.split(","))

    def offers(self, api_key: ApiKey) -> bool:
        admin = self.admin()
        try:
            return api_key in admin.api_versions()
        finally:
            admin.close()

    def produce(self, topic: str, records: list[tuple[bytes | None, bytes, list]], partition: int | None = None):
        producer = KafkaProducer(bootstrap_servers=self.bootstrap.split(","), acks="all")
        for key, value, headers in records:
            producer.send(topic, value=value, key=key, headers=headers, partition=partition)
        producer.flush()
        producer.close()

    def read_all(self, topic: str, partitions: list[int], expected: int) -> list:
        """Every record of the topic's partitions, read by kafka-python in assign mode."""
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap.split(","), enable_auto_commit=False,
                                 auto_offset_reset="earliest", consumer_timeout_ms=5000)
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        consumer.seek_to_beginning()
        records = []
        for record in consumer:
            records.append(record)
            if len(records) >= expected:
                break
        consumer.close()
        return records


def launcher_missing() -> str | None:
    """Why the 3-node cluster cannot be started, or None when `kspec cluster --nodes N` exists."""
    help_text = kspec("cluster", "--help").stdout
    if "--nodes" not in help_text:
        return "3-node cluster: waits for `kspec cluster --nodes N` (the local-cluster launcher, issue 4)"
    return None
