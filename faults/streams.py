"""The quixstreams workload: an exactly-once stream processor under faults (EOS-1, EOS-2).

The queue workload (faults/workload.py) runs as always and is the input: its sends are the
input records (every ack recorded), its polls and final reads check the input topics as in
any run. Beside it, the harness runs faults/streams_app.py, a real Quix Streams
application with processing_guarantee="exactly-once" counting the records of each key, as
a separate OS process, and makes it a nemesis of its own: app_kill_interval_s on average
(seeded; the run's --interval) after a process processed its first input, it kills it with
SIGKILL, waits APP_DOWN_S, and starts a new one (the next instance number) with a new,
empty state dir, so the new process restores its counts from the changelog topics. A
process that exits by itself is started again too.
Each kill and restart is a nemesis op in the history and a line of nemesis.jsonl.

At the end (after the final heal) the last process runs until the group's committed offsets
reach the input topics' high watermarks (at most CATCH_UP_TIMEOUT_S), then is stopped with
SIGTERM. The final reads then read the output topic from the beginning with
isolation.level=read_committed, up to its high watermark, into eos-outputs.parquet
(OUTPUT_SCHEMA); eos.json says what `kspec check` needs (spark_validation/eos.py): the
topics, the instances with their start and end times, whether the app caught up and
whether the output reads are complete.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from faults.recorder import Recorder
from faults.streams_app import APP_GROUP, OUTPUT_TOPIC
from faults.workload import (ADMIN_TIMEOUT_S, CLIENT_LOG_LEVEL, CLIENT_LOGGER, CLOSE_TIMEOUT_S, Workload,
                             WorkloadOptions, committed_offsets)
from spec.history import NEMESIS_PROCESS

WORKLOADS = ("queue", "quixstreams", "connect")
STREAMS_VENV = ".venv-streams"        # `make setup` installs the `streams` extra there
STREAMS_PYTHON_ENV = "KSPEC_STREAMS_PYTHON"
EOS_FILE = "eos.json"                 # marks a streams run for `kspec check`
OUTPUTS_FILE = "eos-outputs.parquet"
TIMELINE_FILE = "nemesis.jsonl"       # faults/run.py's timeline, appended to line by line
APP_KILL_PACKAGE = "app-kill"
APP_DOWN_S = 1.0                      # how long a killed application stays down
APP_CHECK_S = 0.2                     # how often the supervisor looks at its process
CATCH_UP_TIMEOUT_S = 90.0             # the longest the last process gets to consume every input
APP_STOP_TIMEOUT_S = 20.0             # SIGTERM, then SIGKILL
OUTPUT_POLL_TIMEOUT_S = 1.0

OUTPUT_SCHEMA = pa.schema([
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("key", pa.int64()),        # the input's key (Jepsen's abstract key)
    pa.field("count", pa.int64()),      # the key's count after this input
    pa.field("input", pa.int64()),      # the input record's value
    pa.field("instance", pa.int64()),   # which application process wrote it
])


class StreamsWorkload(Workload):
    """The queue workload plus a supervised Quix Streams application (see the module docstring)."""

    def __init__(self, bootstrap: str, recorder: Recorder, options: WorkloadOptions, seed: int = 0,
                 app_kill_interval_s: float | None = None) -> None:
        super().__init__(bootstrap, recorder, options, seed)
        self.out_dir = recorder.out_dir
        self.app_kill_interval_s = app_kill_interval_s  # mean s from processing to kill; None: never killed
        self.rng = random.Random(seed * 7919 + 17)
        self.app: subprocess.Popen | None = None
        self.instances: list[dict] = []  # instance, pid, started_ns, ended_ns, ended_by
        self.killing = threading.Event()  # set: no more kills
        self.supervisor: threading.Thread | None = None
        self.caught_up = False

    # -- the run's phases (faults/run.py) -----------------------------------------------

    def create_topics(self) -> None:
        super().create_topics()
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "logger": CLIENT_LOGGER})
        deadline = time.monotonic() + ADMIN_TIMEOUT_S
        while True:
            future = admin.create_topics([NewTopic(OUTPUT_TOPIC, 2, self.options.replication_factor)],
                                         operation_timeout=10)[OUTPUT_TOPIC]
            try:
                future.result()
                return
            except KafkaException as e:
                if e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    return
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.5)

    def start(self) -> None:
        check_streams_python()
        self._start_app()
        super().start()
        self.supervisor = threading.Thread(target=self._supervise, name="streams-app", daemon=True)
        self.supervisor.start()

    def stop_invoking(self) -> None:
        super().stop_invoking()
        self.killing.set()

    def stop(self) -> None:
        """Stop the input; let the application consume every input record, then stop it."""
        super().stop()
        self.killing.set()
        if self.supervisor is not None:
            self.supervisor.join()
        if self.app is None or self.app.poll() is not None:
            self._start_app()
        self.caught_up = self._wait_caught_up(CATCH_UP_TIMEOUT_S)
        self._stop_app("sigterm")

    def close(self) -> None:
        super().close()
        if self.app is not None and self.app.poll() is None:  # an error ended the run early
            self._stop_app("sigkill")

    def final_reads(self, timeout_s: float) -> bool:
        """The queue workload's final reads of the input, then the output read_committed."""
        inputs_complete = super().final_reads(timeout_s)
        outputs, outputs_complete = self._read_outputs(timeout_s)
        pq.write_table(pa.Table.from_pylist(outputs, schema=OUTPUT_SCHEMA), self.out_dir / OUTPUTS_FILE)
        (self.out_dir / EOS_FILE).write_text(json.dumps({
            "workload": "quixstreams", "input_topics": self.options.topics, "output_topic": OUTPUT_TOPIC,
            "application_group": APP_GROUP, "caught_up": self.caught_up, "outputs_complete": outputs_complete,
            "outputs": len(outputs), "instances": self.instances}, indent=2) + "\n")
        return inputs_complete and outputs_complete

    # -- the application process --------------------------------------------------------

    def _start_app(self) -> None:
        instance = len(self.instances)
        log = open(self.out_dir / f"app-{instance}.log", "ab")
        self.app = subprocess.Popen(
            [streams_python(), "-m", "faults.streams_app", "--bootstrap", self.bootstrap,
             "--topics", ",".join(self.options.topics), "--state-dir", str(self.out_dir / f"app-{instance}.state"),
             "--instance", str(instance), "--processing-file", str(self._processing_file(instance))],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_project_root(),
                                                                           os.environ.get("PYTHONPATH")]))})
        log.close()
        self.instances.append({"instance": instance, "pid": self.app.pid, "started_ns": self.recorder.now_ns(),
                               "ended_ns": None, "ended_by": None})

    def _processing_file(self, instance: int) -> Path:
        return self.out_dir / f"app-{instance}.processing"

    def _stop_app(self, how: str) -> None:
        """End the current process: "sigterm" (Quix commits and exits), "sigkill" (a crash)."""
        assert how in ("sigterm", "sigkill") and self.app is not None
        if self.app.poll() is None:
            self.app.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
            try:
                self.app.wait(APP_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                how = "sigkill after sigterm timed out"
                self.app.kill()
                self.app.wait()
        else:
            how = f"exited with {self.app.returncode}"
        self.instances[-1].update(ended_ns=self.recorder.now_ns(), ended_by=how)

    def _supervise(self) -> None:
        """Kill the application now and then; start a new process after each kill or exit. A process
        is killed app_kill_interval_s on average (exponentially distributed) after it processed its
        first input: killed while starting or restoring it would never have a transaction open."""
        next_kill_s = None  # armed once the current process is processing
        while not self.killing.is_set():
            if self.app.poll() is not None:  # it exited by itself
                self._stop_app("sigkill")
                self._flip("stop", {"restarted_after": f"exit {self.app.returncode}"}, self._start_app)
                next_kill_s = None
            elif next_kill_s is None:
                if self._processing_file(self.instances[-1]["instance"]).exists() and self.app_kill_interval_s:
                    next_kill_s = time.monotonic() + self.rng.expovariate(1 / self.app_kill_interval_s)
            elif time.monotonic() >= next_kill_s:
                self._flip("start", {"pid": self.app.pid}, lambda: self._stop_app("sigkill"))
                self.killing.wait(APP_DOWN_S)
                self._flip("stop", {}, self._start_app)
                next_kill_s = None
            self.killing.wait(APP_CHECK_S)

    def _flip(self, action: str, value: dict, do) -> None:
        """One nemesis op, recorded as faults/nemesis.py records its flips."""
        invocation = self.recorder.invoke(NEMESIS_PROCESS, f"{action}-{APP_KILL_PACKAGE}")
        do()
        value = {**value, "instance": self.instances[-1]["instance"]}
        self.recorder.complete(invocation, "info", extra={"value": value})
        with open(self.out_dir / TIMELINE_FILE, "a") as timeline:
            timeline.write(json.dumps({"time_ns": self.recorder.now_ns(), "action": action,
                                       "package": APP_KILL_PACKAGE, "value": value}) + "\n")

    def _wait_caught_up(self, timeout_s: float) -> bool:
        """Whether the group's committed offsets reached every input partition's high watermark."""
        from confluent_kafka import KafkaException
        from spec.history import topic_partition
        partitions = sorted({topic_partition(key) for key in self.options.keys})
        deadline = time.monotonic() + timeout_s
        watermarks = None
        while time.monotonic() < deadline:
            try:
                watermarks = watermarks or self._high_watermarks(partitions)
                committed = committed_offsets(self.bootstrap, APP_GROUP, partitions, {}, timeout_s=10,
                                              require_stable=True)
                if all(committed.get(tp, -1) >= watermarks[tp] for tp in partitions):
                    return True
            except KafkaException:
                pass
            if self.app.poll() is not None:  # crashed while catching up: once more, with a new process
                self._stop_app("sigkill")
                self._start_app()
            time.sleep(0.5)
        return False

    def _high_watermarks(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from confluent_kafka import Consumer, TopicPartition
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "kspec-eos-watermarks",
                             "isolation.level": "read_uncommitted", "log_level": CLIENT_LOG_LEVEL,
                             "logger": CLIENT_LOGGER})
        try:
            return {(t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
                    for t, p in partitions}
        finally:
            consumer.close()

    def _read_outputs(self, timeout_s: float) -> tuple[list[dict], bool]:
        """The output topic read_committed from the beginning up to each partition's high watermark."""
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
        partitions = [(OUTPUT_TOPIC, 0), (OUTPUT_TOPIC, 1)]
        deadline = time.monotonic() + timeout_s
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "kspec-eos-final-reads",
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "enable.partition.eof": True, "log_level": CLIENT_LOG_LEVEL, "logger": CLIENT_LOGGER})
        outputs: list[dict] = []
        try:
            while True:
                try:
                    watermarks = self._high_watermarks(partitions)
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        return outputs, False
            consumer.assign([TopicPartition(t, p, 0) for t, p in partitions])
            positions = {p: 0 for _, p in partitions}
            while time.monotonic() < deadline:
                for message in consumer.consume(500, OUTPUT_POLL_TIMEOUT_S):
                    if message.error():  # at the end: the partition's end, past the last control record
                        if message.error().code() == KafkaError._PARTITION_EOF:
                            positions[message.partition()] = max(positions[message.partition()], message.offset())
                        continue
                    value = json.loads(message.value())
                    outputs.append({"partition": message.partition(), "offset": message.offset(),
                                    "key": value["key"], "count": value["count"], "input": value["input"],
                                    "instance": value["instance"]})
                for tp in consumer.position([TopicPartition(t, p) for t, p in partitions]):
                    positions[tp.partition] = max(positions[tp.partition], tp.offset)
                if all(positions[p] >= watermarks[(t, p)] for t, p in partitions):
                    return outputs, True
            return outputs, False
        finally:
            from kspec.ops.rdkafka import close_within
            close_within({"outputs": consumer}, CLOSE_TIMEOUT_S)


def _project_root() -> str:
    return str(Path(__file__).resolve().parent.parent)


def streams_python() -> str:
    """The interpreter with Quix Streams: KSPEC_STREAMS_PYTHON, else the project's .venv-streams
    (`make setup`; Quix Streams pins an older confluent-kafka than the kit), else this one."""
    if explicit := os.environ.get(STREAMS_PYTHON_ENV):
        return explicit
    candidate = Path(_project_root()) / STREAMS_VENV / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def check_streams_python() -> None:
    """Raise StreamsUnavailable, with what to do, when the interpreter has no Quix Streams."""
    done = subprocess.run([streams_python(), "-c", "import quixstreams"], capture_output=True, text=True)
    if done.returncode != 0:
        raise StreamsUnavailable(f"{streams_python()} cannot import quixstreams: run `make setup` (it makes "
                                 f"{STREAMS_VENV}), or set {STREAMS_PYTHON_ENV} to a Python with quixstreams 3.28")


class StreamsUnavailable(RuntimeError):
    pass
