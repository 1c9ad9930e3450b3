"""A Kafka Connect pipeline under faults, recorded as a history: FileStreamSource -> topic ->
FileStreamSink on a cluster of distributed `kspec connect` workers (real processes, real REST),
while numbered lines are appended to the source file and the workers are killed with -9 and
started again. The cluster's brokers may be faulted meanwhile by faults/run.py's nemesis: the
pipeline needs only their bootstrap list.

The history folder (checked by spark_validation/connect.py, CON-1, CON-2, CON-3):
- `connect.json`: the run (exactly once or not, the topic, the worker kills with their times,
  the FAILED tasks restarted through REST);
- `connect-source.parquet`: every line appended to the source file (value, appended_ms);
- `connect-topic.parquet`: the topic's records (partition, offset, value), read_committed when
  the source ran with exactly-once support;
- `connect-sink.parquet`: the sink file's lines (position, value).
A line's value is its number: the pipeline appends `line-<n>`.

Wiring into `kspec faults run` (faults/run.py) takes a few lines around its Workload:
`pipeline = ConnectPipeline(target.bootstrap, out_dir / "connect", options)`, `pipeline.start()`
beside `workload.start()`, `pipeline.stop_invoking()` beside `workload.stop_invoking()`, and
`pipeline.close(settle_timeout_s)` after the heal; `kspec check OUT/connect` checks it.
"""
from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from faults.workload import CLIENT_LOGGER

log = logging.getLogger("faults.connect")

CONNECT_FILE, SOURCE_FILE, TOPIC_FILE, SINK_FILE = ("connect.json", "connect-source.parquet",
                                                    "connect-topic.parquet", "connect-sink.parquet")
SOURCE_SCHEMA = pa.schema([("value", pa.int64()), ("appended_ms", pa.int64())])
TOPIC_SCHEMA = pa.schema([("partition", pa.int32()), ("offset", pa.int64()), ("value", pa.int64())])
SINK_SCHEMA = pa.schema([("position", pa.int64()), ("value", pa.int64())])
LINE_PREFIX = "line-"
CONNECT_DIR = "connect"  # the pipeline's folder inside a `kspec faults run --workload connect` results folder
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
REST_TIMEOUT_S = 30.0
CREATE_TIMEOUT_S = 60.0
# a pipeline whose workers do not start, or whose connectors are not created in time, is started
# again (its workers killed and started anew), as an operator would, this many times in all
START_ATTEMPTS_MAX = 3
READ_TIMEOUT_S = 60.0
POLL_S = 0.2
APPEND_BATCH_LINES_MAX = 50
FAILED_CHECK_S = 2.0  # while close() waits for the sink: how often FAILED tasks are looked for


@dataclass(frozen=True)
class ConnectWorkloadOptions:
    workers: int = 2
    lines_per_s: float = 200.0
    kill_interval_s: float = 6.0      # one worker killed with -9 this often (0: never)
    restart_after_s: float = 2.0      # and started again this long after
    exactly_once: bool = False        # exactly.once.source.support=enabled (KIP-618)
    topic: str = "connect-lines"
    replication_factor: int = -1      # of the topic and the internal topics (-1: the brokers' default)
    # how soon a killed worker's tasks move (with the KIP-415 delay below); at least the brokers'
    # group.min.session.timeout.ms (Kafka's default 6000)
    session_timeout_ms: int = 10000
    rebalance_delay_ms: int = 5000
    client_properties: tuple[tuple[str, str], ...] = ()  # security settings for every client


def line_value(line: str | bytes) -> int | None:
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    text = text.strip()
    if text.startswith(LINE_PREFIX) and text[len(LINE_PREFIX):].isdigit():
        return int(text[len(LINE_PREFIX):])
    return None


def start_worker_process(command: list[str], log_path: Path,
                         env: dict | None = None) -> tuple[subprocess.Popen | None, dict[str, str]]:
    """Start a `kspec connect` process (stderr to log_path) and read its ready line's KEY=VALUE
    fields (rest=URL, worker_id=...). (None, {}) when it exited or printed nothing within
    READY_TIMEOUT_S; it is killed then."""
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL,
                                   env=env)
    os.set_blocking(process.stdout.fileno(), False)
    line, deadline = b"", time.monotonic() + READY_TIMEOUT_S
    while not line.endswith(b"\n"):
        chunk = process.stdout.readline()
        line += chunk or b""
        if not chunk:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                process.wait()
                process.stdout.close()
                return None, {}
            time.sleep(0.05)
    return process, dict(part.split("=", 1) for part in line.decode().split() if "=" in part)


class _Worker:
    """One `kspec connect distributed` process; its stderr goes to a log file."""

    def __init__(self, index: int, properties: Path, log_path: Path) -> None:
        self.index, self.properties, self.log_path = index, properties, log_path
        self.process: subprocess.Popen | None = None
        self.url: str | None = None

    def start(self) -> None:
        self.process, fields = start_worker_process(
            [sys.executable, "-m", "kspec.cli", "connect", "distributed", str(self.properties)], self.log_path)
        if self.process is None:
            raise RuntimeError(f"connect worker {self.index} did not start; see {self.log_path}")
        self.url = fields["rest"].rstrip("/")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.running:
            self.process.send_signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()
            self.process.stdout.close()

    def stop(self) -> None:
        if not self.running:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()

    def rest(self, method: str, path: str, body=None) -> int:
        return self.rest_json(method, path, body)[0]

    def rest_json(self, method: str, path: str, body=None) -> tuple[int, object]:
        """(status, the answer's JSON or None)."""
        request = urllib.request.Request(self.url + path, method=method, headers={"Content-Type": "application/json"},
                                         data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(request, timeout=REST_TIMEOUT_S) as response:
                text = response.read()
                return response.status, json.loads(text) if text else None
        except urllib.error.HTTPError as e:
            return e.code, None


class ConnectPipeline:
    """start() -> (lines appended, workers killed and restarted) -> stop_invoking() -> close()."""

    def __init__(self, bootstrap: str, out_dir: Path, options: ConnectWorkloadOptions = ConnectWorkloadOptions(),
                 seed: int = 0) -> None:
        self.bootstrap, self.out_dir, self.options = bootstrap, Path(out_dir), options
        self.rng = random.Random(seed)
        self.source_path, self.sink_path = self.out_dir / "source.txt", self.out_dir / "sink.txt"
        self.appended: list[tuple[int, int]] = []  # (value, appended_ms)
        self.kills: list[dict] = []
        self.task_restarts: list[dict] = []  # FAILED tasks restarted through REST, as an operator would
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.workers: list[_Worker] = []
        self.cluster = f"kspec-connect-{seed}-{os.getpid()}"

    def _worker_properties(self, index: int) -> Path:
        o, cluster = self.options, self.cluster
        props = {
            "bootstrap.servers": self.bootstrap, "group.id": cluster,
            "config.storage.topic": f"{cluster}-configs", "offset.storage.topic": f"{cluster}-offsets",
            "status.storage.topic": f"{cluster}-status",
            **{f"{kind}.storage.replication.factor": str(o.replication_factor)
               for kind in ("config", "offset", "status")},
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "offset.flush.interval.ms": "1000", "session.timeout.ms": str(o.session_timeout_ms),
            "heartbeat.interval.ms": str(max(100, o.session_timeout_ms // 6)),
            "scheduled.rebalance.max.delay.ms": str(o.rebalance_delay_ms),
            "consumer.session.timeout.ms": str(o.session_timeout_ms),
            "exactly.once.source.support": "enabled" if o.exactly_once else "disabled",
            "listeners": "http://127.0.0.1:0",
            **dict(o.client_properties),
        }
        path = self.out_dir / f"worker-{index}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def start(self) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.source_path.touch()
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "logger": CLIENT_LOGGER,
                             **dict(self.options.client_properties)})
        topic = self.options.topic
        try:  # one partition: the sink file's order is the topic's order
            admin.create_topics([NewTopic(topic, 1, self.options.replication_factor)])[topic].result(CREATE_TIMEOUT_S)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        self.workers = [_Worker(index, self._worker_properties(index), self.out_dir / f"worker-{index}.log")
                        for index in range(self.options.workers)]
        for attempt in range(1, START_ATTEMPTS_MAX + 1):
            try:
                self._start_workers_and_connectors()
                break
            except RuntimeError as e:
                for worker in self.workers:
                    worker.kill()
                if attempt == START_ATTEMPTS_MAX:
                    raise RuntimeError(f"{e} (in each of {attempt} attempts, the workers started anew "
                                       "between them)") from e
                log.warning("the Connect pipeline did not start (%s); its workers start anew (attempt %d of %d)",
                            e, attempt + 1, START_ATTEMPTS_MAX)
        self.threads = [threading.Thread(target=self._append, name="connect-append", daemon=True)]
        if self.options.kill_interval_s > 0:
            self.threads.append(threading.Thread(target=self._kill_and_restart, name="connect-kill", daemon=True))
        for thread in self.threads:
            thread.start()

    def _start_workers_and_connectors(self) -> None:
        for worker in self.workers:
            worker.start()
        self._create("source", {"connector.class": "FileStreamSource", "file": str(self.source_path),
                                "topic": self.options.topic, "batch.size": "200"})
        self._create("sink", {"connector.class": "FileStreamSink", "file": str(self.sink_path),
                              "topics": self.options.topic})

    def _create(self, name: str, config: dict[str, str]) -> None:
        """PUT the connector's config through any worker; 409 until the group has a leader."""
        deadline = time.monotonic() + CREATE_TIMEOUT_S
        while True:
            running = [w for w in self.workers if w.running]
            if not running:
                raise RuntimeError(f"connector {name} not created: every worker exited (see {self.out_dir})")
            worker = self.rng.choice(running)
            try:
                status = worker.rest("PUT", f"/connectors/{name}/config", {**config, "name": name})
            except (urllib.error.URLError, OSError) as e:
                status = str(e)
            if status in (200, 201):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"connector {name} not created within {CREATE_TIMEOUT_S} s (last answer {status})")
            time.sleep(POLL_S)

    def _append(self) -> None:
        """Append numbered lines at the rate, a few per write, each write flushed."""
        interval_s = 1.0 / self.options.lines_per_s
        next_value, started = 0, time.monotonic()
        with open(self.source_path, "a") as f:
            while not self.stopping.is_set():
                due = int((time.monotonic() - started) / interval_s) + 1
                batch = range(next_value, min(due, next_value + APPEND_BATCH_LINES_MAX))
                if batch:
                    f.write("".join(f"{LINE_PREFIX}{n}\n" for n in batch))
                    f.flush()
                    now_ms = int(time.time() * 1000)
                    self.appended += [(n, now_ms) for n in batch]
                    next_value = batch.stop
                self.stopping.wait(min(interval_s * APPEND_BATCH_LINES_MAX / 2, 0.05))

    def _kill_and_restart(self) -> None:
        o = self.options
        while not self.stopping.wait(o.kill_interval_s):
            self._restart_failed_tasks()
            if not self._restart_down_workers():  # one still down: no second victim meanwhile
                continue
            victim = self.rng.choice(self.workers)
            victim.kill()
            self.kills.append({"worker": victim.index, "killed_ms": int(time.time() * 1000)})
            log.info("connect worker %d killed", victim.index)
            if self.stopping.wait(o.restart_after_s):
                break
            self._restart_down_workers()

    def _restart_down_workers(self) -> bool:
        """Start every worker that is down; whether all run now. A worker can fail to start while
        the cluster is faulted (its config topic not read to its end in time): it is logged and
        tried again later, as an operator's supervisor would."""
        for worker in self.workers:
            if worker.running:
                continue
            try:
                worker.start()
            except RuntimeError as e:
                log.warning("%s; trying again later", e)
                continue
            log.info("connect worker %d started again", worker.index)
            if self.kills and "restarted_ms" not in self.kills[-1]:
                self.kills[-1]["restarted_ms"] = int(time.time() * 1000)
        return all(worker.running for worker in self.workers)

    def _restart_failed_tasks(self) -> None:
        """Restart the connectors' FAILED tasks (POST /connectors/<name>/restart?includeTasks=true&onlyFailed=true),
        as an operator watching the status would: Connect leaves a failed task failed, and under
        broker faults an exactly-once source task fails when its transaction coordinator stays
        unavailable longer than its producer waits (KIP-618: as Kafka's ExactlyOnceWorkerSourceTask
        when initTransactions or commitTransaction time out)."""
        for name in ("source", "sink"):
            running = [w for w in self.workers if w.running]
            if not running:
                return
            worker = self.rng.choice(running)
            try:
                status, body = worker.rest_json("GET", f"/connectors/{name}/status")
                failed = [t["id"] for t in (body or {}).get("tasks", []) if t.get("state") == "FAILED"] \
                    if status == 200 else []
                if failed and worker.rest("POST", f"/connectors/{name}/restart?includeTasks=true&onlyFailed=true") \
                        in (202, 204):
                    self.task_restarts.append({"connector": name, "tasks": failed,
                                               "restarted_ms": int(time.time() * 1000)})
                    log.info("connector %s: FAILED task(s) %s restarted", name, failed)
            except (urllib.error.URLError, OSError, ValueError) as e:
                log.info("connector %s: status not read (%s); later", name, e)

    def stop_invoking(self) -> None:
        """No more lines and no more kills; a worker that is down is started again (again in
        close(), after the run's heal, if it cannot start now). A run too short (or a machine
        too slow) for the first kill gets one now, so every run has a worker killed -9 and
        restarted."""
        self.stopping.set()
        for thread in self.threads:
            thread.join()
        if self.options.kill_interval_s > 0 and not self.kills:
            victim = self.rng.choice(self.workers)
            victim.kill()
            self.kills.append({"worker": victim.index, "killed_ms": int(time.time() * 1000)})
            log.info("connect worker %d killed at the end of the run", victim.index)
        self._restart_down_workers()

    def _sink_values(self) -> list[int | None]:
        try:
            with open(self.sink_path, "rb") as f:
                return [line_value(line) for line in f.read().splitlines()]
        except FileNotFoundError:
            return []

    def close(self, settle_timeout_s: float = 60.0) -> Path:
        """Wait (up to the timeout) for the sink to hold every appended line, stop the workers and
        write the history; returns its folder."""
        wanted = {value for value, _ in self.appended}
        deadline = time.monotonic() + settle_timeout_s
        while not self._restart_down_workers() and time.monotonic() < deadline:
            time.sleep(POLL_S)
        next_check_s = time.monotonic()
        while not wanted <= set(self._sink_values()) and time.monotonic() < deadline:
            if time.monotonic() >= next_check_s:
                self._restart_failed_tasks()
                next_check_s = time.monotonic() + FAILED_CHECK_S
            time.sleep(POLL_S)
        for worker in self.workers:
            worker.stop()
        topic_rows = self._read_topic()
        sink_rows = [{"position": i, "value": v} for i, v in enumerate(self._sink_values()) if v is not None]
        pq.write_table(pa.Table.from_pylist([{"value": v, "appended_ms": t} for v, t in self.appended],
                                            schema=SOURCE_SCHEMA), self.out_dir / SOURCE_FILE)
        pq.write_table(pa.Table.from_pylist(topic_rows, schema=TOPIC_SCHEMA), self.out_dir / TOPIC_FILE)
        pq.write_table(pa.Table.from_pylist(sink_rows, schema=SINK_SCHEMA), self.out_dir / SINK_FILE)
        (self.out_dir / CONNECT_FILE).write_text(json.dumps({
            "topic": self.options.topic, "exactly_once": self.options.exactly_once,
            "workers": self.options.workers, "kills": self.kills, "task_restarts": self.task_restarts,
            "lines": len(self.appended)}, indent=2) + "\n")
        return self.out_dir

    def _read_topic(self) -> list[dict]:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "logger": CLIENT_LOGGER,
                             **dict(self.options.client_properties),
                             "group.id": f"{self.cluster}-history", "enable.auto.commit": False,
                             "enable.partition.eof": True,
                             "isolation.level": "read_committed" if self.options.exactly_once else "read_uncommitted"})
        try:
            metadata = consumer.list_topics(self.options.topic, timeout=10).topics.get(self.options.topic)
            if metadata is None or metadata.error is not None:
                return []
            consumer.assign([TopicPartition(self.options.topic, p, OFFSET_BEGINNING) for p in metadata.partitions])
            remaining, rows = set(metadata.partitions), []
            deadline = time.monotonic() + READ_TIMEOUT_S
            while remaining and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    continue
                if message.error() is None:
                    value = line_value(message.value() or b"")
                    if value is not None:
                        rows.append({"partition": message.partition(), "offset": message.offset(), "value": value})
                elif message.error().code() == KafkaError._PARTITION_EOF:
                    remaining.discard(message.partition())
            if remaining:
                raise RuntimeError(f"{self.options.topic} not read to its end within {READ_TIMEOUT_S} s")
            return rows
        finally:
            consumer.close()
