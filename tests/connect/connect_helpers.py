"""Helpers for the Connect tests: `kspec connect` worker processes, a small REST client, files
of lines, and waiting for a state."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from faults.connect_workload import start_worker_process

STOP_TIMEOUT_S = 30.0
READ_POLL_TIMEOUT_S = 20.0  # one poll of a test reader; generous, the machine may be loaded
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def wait_for(condition, timeout_s: float = 60.0, what: str = "condition", interval_s: float = 0.2):
    """Poll `condition` until it returns something truthy; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def write_properties(path, props: dict[str, str]) -> str:
    with open(path, "w") as f:
        f.writelines(f"{k}={v}\n" for k, v in props.items())
    return str(path)


class ConnectProcess:
    """One `kspec connect standalone|distributed` process, started and waited for its ready line."""

    def __init__(self, mode: str, worker_properties: str, *connector_files: str, log_path: str) -> None:
        self.command = [sys.executable, "-m", "kspec.cli", "connect", mode, worker_properties, *connector_files]
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.url = self.worker_id = None

    def start(self) -> ConnectProcess:
        self.process, fields = start_worker_process(self.command, Path(self.log_path),
                                                    env={**os.environ, "PYTHONPATH": REPO})
        if self.process is None:
            raise AssertionError(f"no ready line from {self.command}; see {self.log_path}")
        self.url, self.worker_id = fields["rest"].rstrip("/"), fields["worker_id"]
        return self

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(STOP_TIMEOUT_S)
        finally:
            self.process.stdout.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process.stdout.close()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def rest(self, method: str, path: str, body=None) -> tuple[int, object]:
        """(status, parsed JSON body or None)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=100) as response:
                status, payload = response.status, response.read()
        except urllib.error.HTTPError as e:
            status, payload = e.code, e.read()
        return status, json.loads(payload) if payload else None


def running_task_worker(worker: ConnectProcess, connector: str, task: int = 0) -> str | None:
    """The worker_id running the task, as `worker` sees it, or None (not RUNNING, or unknown yet)."""
    status, body = worker.rest("GET", f"/connectors/{connector}/status")
    tasks = [t for t in body.get("tasks", []) if t["id"] == task] if status == 200 else []
    return tasks[0]["worker_id"] if tasks and tasks[0]["state"] == "RUNNING" else None


def lines_of(path) -> list[str]:
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def append_lines(path, lines) -> None:
    with open(path, "a") as f:
        f.writelines(f"{line}\n" for line in lines)


def read_topic(broker, topic: str) -> list[tuple[bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "connect-test-reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        records = []
        for partition in partitions:
            tp = TopicPartition(topic, partition)
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            consumer.assign([TopicPartition(topic, partition, low)])
            while low < high:
                message = consumer.poll(READ_POLL_TIMEOUT_S)
                assert message is not None and message.error() is None
                records.append((message.key(), message.value()))
                low = message.offset() + 1
        return records
    finally:
        consumer.close()


def committed_values(broker, topic: str) -> list[bytes]:
    """Every committed record's value in the topic (read_committed), in offset order per partition."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "connect-test-reader",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        values, at_end = [], set()
        while len(at_end) < len(partitions):
            message = consumer.poll(READ_POLL_TIMEOUT_S)
            assert message is not None, f"no end of partition within {READ_POLL_TIMEOUT_S} s"
            if message.error() is not None:
                at_end.add(message.partition())
            else:
                values.append(message.value())
        return values
    finally:
        consumer.close()


def distributed_properties(tmp_path, broker, index: int, cluster: str, connect_protocol: str = "compatible") -> str:
    """Worker `index` of the Connect cluster `cluster` (its group and its internal topics)."""
    return write_properties(tmp_path / f"worker{index}.properties", {
        "connect.protocol": connect_protocol,
        "bootstrap.servers": broker.bootstrap,
        "group.id": cluster,
        "config.storage.topic": f"{cluster}-configs", "config.storage.replication.factor": "1",
        "offset.storage.topic": f"{cluster}-offsets", "offset.storage.replication.factor": "1",
        "offset.storage.partitions": "3",
        "status.storage.topic": f"{cluster}-status", "status.storage.replication.factor": "1",
        "status.storage.partitions": "2",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "offset.flush.interval.ms": "500",
        # a killed worker is noticed in 3 s and its work held for 2 s more (KIP-415) before it moves
        "session.timeout.ms": "3000", "heartbeat.interval.ms": "500",
        "scheduled.rebalance.max.delay.ms": "2000",
        "consumer.session.timeout.ms": "3000",  # the sink's consumer group notices the same death
        "listeners": "http://127.0.0.1:0",
    })
