"""MirrorMaker under faults, recorded as a history: numbered records sent to a topic of the source
cluster while `kspec mirror` (a real process) copies it into the target cluster and is killed
with -9 and started again, and a consumer group reads the topic in the source and commits, so
the mirror emits checkpoints for it. Either cluster may be faulted meanwhile
(faults/mirror_run.py: leaders killed, the link between the clusters cut): the workload needs
only their bootstrap lists, and a wrapper for the mirror's command (its network namespace).

The history folder is `kspec mirror record`'s (mirror/history.py: `mirror.json`, both clusters'
records of the flow) plus
- `mirror-sends.parquet`: every send with its outcome (ok with its source offset, or the error);
- `mirror-kills.json`: when the mirror was killed and restarted;
- `mirror-progress.parquet`: the mirror's committed progress, read from the target each second;
- `mirror-group.parquet`: the source group's polls (partition, offset, value) and commits;
- `mirror-checkpoints.parquet`: every checkpoint the target holds for the group at the end.
spark_validation/mirror.py checks it for MIR-1, MIR-2 (exactly once) and MIR-3.
"""
from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from kspec.ops.rdkafka import close_within
from mirror.clients import ConnectionLog, build, partition_count, read_to_end
from mirror.config import load
from mirror.history import CHECKPOINTS_FILE, GROUP_FILE, PROGRESS_FILE, record
from mirror.records import Checkpoint, decode_progress

log = logging.getLogger("faults.mirror")
CLIENT_LOG = logging.getLogger("faults.clients")  # faults/run.py sends it to the run's clients.log
MIRROR_LOG_FILE = "mirror.log"
# loggers whose lines in this process (the workload's own, and those of the mirror's clients the
# workload reads with) go to the mirror's log beside the mirror process's, not to the terminal
ROUTED_LOGGERS = ("faults.mirror", "mirror")

SENDS_FILE, KILLS_FILE = "mirror-sends.parquet", "mirror-kills.json"
SENDS_SCHEMA = pa.schema([("value", pa.int64()), ("partition", pa.int32()), ("offset", pa.int64()),
                          ("error", pa.string()), ("sent_ms", pa.int64())])
PROGRESS_SCHEMA = pa.schema([("time_ms", pa.int64()), ("topic", pa.string()), ("partition", pa.int32()),
                             ("last_copied", pa.int64())])
GROUP_SCHEMA = pa.schema([("time_ms", pa.int64()), ("kind", pa.string()),  # "poll" or "commit"
                          ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("value", pa.int64()),
                          ("error", pa.string())])
CHECKPOINTS_SCHEMA = pa.schema([("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                                ("upstream", pa.int64()), ("downstream", pa.int64())])
PROGRESS_SAMPLE_S = 1.0
COPYING_TIMEOUT_S = 120.0         # wait_copying's default: a mirror starting on a loaded machine
GROUP_COMMIT_S = 0.5
GROUP_CLOSE_TIMEOUT_S = 10.0  # the longest the group's member is waited for to close
GROUP_PACE = 0.7                  # the group reads at this fraction of the send rate
CREATE_TIMEOUT_S = 60.0
SEND_FLUSH_TIMEOUT_S = 120.0  # Kafka's delivery.timeout.ms
POLL_S = 0.3
SOURCE_ALIAS, TARGET_ALIAS = "primary", "backup"
GROUP = "mirrored-readers"


@dataclass(frozen=True)
class MirrorWorkloadOptions:
    topic: str = "mirrored"
    partitions: int = 2
    records_per_s: float = 300.0
    kill_interval_s: float = 5.0      # the mirror killed with -9 about this often once it copies (0: never)
    restart_after_s: float = 1.0
    exactly_once: bool = False        # exactly.once.support=enabled: MIR-2 is checked too
    replication_factor: int = -1      # remote and internal topics (-1: the brokers' default)
    offset_flush_interval_ms: int = 1000
    group: bool = True                # a source group reading and committing; checkpoints emitted (MIR-3)
    properties: tuple[tuple[str, str], ...] = ()  # more mm2.properties keys (tasks.max, kspec.bug.*, ...)


def mm2_settings(o: MirrorWorkloadOptions, source_bootstrap: str, target_bootstrap: str) -> dict[str, str]:
    """The mirror's mm2.properties: one flow SOURCE_ALIAS->TARGET_ALIAS of the workload's topic,
    checkpoints of GROUP each second, then the options' own keys (which win)."""
    rf = str(o.replication_factor)
    return {
        "clusters": f"{SOURCE_ALIAS}, {TARGET_ALIAS}",
        f"{SOURCE_ALIAS}.bootstrap.servers": source_bootstrap,
        f"{TARGET_ALIAS}.bootstrap.servers": target_bootstrap,
        f"{SOURCE_ALIAS}->{TARGET_ALIAS}.enabled": "true",
        "topics": o.topic, "refresh.topics.interval.seconds": "1",
        "emit.checkpoints.enabled": str(o.group).lower(), "emit.checkpoints.interval.seconds": "1",
        "groups": GROUP,
        "offset.flush.interval.ms": str(o.offset_flush_interval_ms),
        "exactly.once.support": "enabled" if o.exactly_once else "requested",
        "replication.factor": rf, "offset-syncs.topic.replication.factor": rf,
        "heartbeats.topic.replication.factor": rf, "checkpoints.topic.replication.factor": rf,
        "offset.storage.replication.factor": rf, **dict(o.properties),
    }


class MirrorWorkload:
    """start() -> (records sent, the mirror killed and restarted) -> stop_invoking() -> close()."""

    def __init__(self, source_bootstrap: str, target_bootstrap: str, out_dir: Path,
                 options: MirrorWorkloadOptions = MirrorWorkloadOptions(), seed: int = 0,
                 wrap: Callable[[list[str]], list[str]] = list) -> None:
        self.source_bootstrap, self.target_bootstrap = source_bootstrap, target_bootstrap
        self.out_dir, self.options = Path(out_dir), options
        self.rng = random.Random(seed)
        self.properties = self.out_dir / "mm2.properties"
        self.sends: list[dict] = []
        self.kills: list[dict] = []
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.mirror: subprocess.Popen | None = None
        self.wrap = wrap                  # the mirror's command, e.g. in a network namespace
        self.progress_rows: list[dict] = []
        self.group_rows: list[dict] = []
        self.progress_copied = -1          # the sum of the sampled progress offsets: grows as the mirror copies
        self.caught_up = False            # close(): the progress covered every acked send in time
        self.checkpointed = False         # close(): and the checkpoints reached the group's last commits
        self.log_handler: logging.Handler | None = None  # start() .. close(): see ROUTED_LOGGERS

    def _write_properties(self) -> None:
        settings = mm2_settings(self.options, self.source_bootstrap, self.target_bootstrap)
        self.properties.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))

    def _start_mirror(self) -> None:
        with open(self.out_dir / MIRROR_LOG_FILE, "ab") as log_file:
            self.mirror = subprocess.Popen(self.wrap([sys.executable, "-m", "kspec.cli", "mirror", str(self.properties)]),
                                           stdout=subprocess.DEVNULL, stderr=log_file, stdin=subprocess.DEVNULL)

    def start(self) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.route_log()
        self._write_properties()
        o = self.options
        admin = AdminClient({"bootstrap.servers": self.source_bootstrap, "logger": CLIENT_LOG})
        try:
            admin.create_topics([NewTopic(o.topic, o.partitions, o.replication_factor)])[o.topic].result(
                CREATE_TIMEOUT_S)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        self._start_mirror()
        self.threads = [threading.Thread(target=self._send, name="mirror-send", daemon=True),
                        threading.Thread(target=self._sample_progress, name="mirror-progress", daemon=True)]
        if o.group:
            self.threads.append(threading.Thread(target=self._consume_as_group, name="mirror-group", daemon=True))
        if o.kill_interval_s > 0:
            self.threads.append(threading.Thread(target=self._kill_and_restart, name="mirror-kill", daemon=True))
        for thread in self.threads:
            thread.start()

    def route_log(self) -> None:
        """This process's mirror log lines (ROUTED_LOGGERS) into MIRROR_LOG_FILE until detach_log()."""
        if self.log_handler is not None:
            return
        self.log_handler = logging.FileHandler(self.out_dir / MIRROR_LOG_FILE)
        self.log_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s (harness): %(message)s"))
        for name in ROUTED_LOGGERS:
            logging.getLogger(name).addHandler(self.log_handler)
            logging.getLogger(name).propagate = False

    def detach_log(self) -> None:
        """Undo route_log (close() does; so does a lane that aborts)."""
        if self.log_handler is None:
            return
        for name in ROUTED_LOGGERS:
            logging.getLogger(name).removeHandler(self.log_handler)
            logging.getLogger(name).propagate = True
        self.log_handler.close()
        self.log_handler = None

    def wait_copying(self, timeout_s: float = COPYING_TIMEOUT_S) -> bool:
        """Wait until the mirror has committed progress (it is up and copying); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.progress_copied < 0 and time.monotonic() < deadline:
            time.sleep(POLL_S)
        return self.progress_copied >= 0

    def _send(self) -> None:
        from confluent_kafka import Producer

        o = self.options
        producer = Producer({"bootstrap.servers": self.source_bootstrap, "enable.idempotence": True, "logger": CLIENT_LOG,
                             "linger.ms": 5, "delivery.timeout.ms": int(SEND_FLUSH_TIMEOUT_S * 1000)})

        def delivered(error, message, send):
            if error is None:
                send.update(partition=message.partition(), offset=message.offset())
            else:
                send["error"] = error.str()
        interval_s, started, value = 1.0 / o.records_per_s, time.monotonic(), 0
        while not self.stopping.is_set():
            due = int((time.monotonic() - started) / interval_s) + 1
            for value in range(value, due):
                send = {"value": value, "partition": value % o.partitions, "offset": None, "error": None,
                        "sent_ms": int(time.time() * 1000)}
                self.sends.append(send)
                producer.produce(o.topic, str(value).encode(), partition=send["partition"],
                                 on_delivery=lambda e, m, send=send: delivered(e, m, send))
            value = due
            producer.poll(min(interval_s * 20, 0.05))
        producer.flush(SEND_FLUSH_TIMEOUT_S)

    def _kill_and_restart(self) -> None:
        """Kill the mirror at a random moment within kill_interval_s once it has committed progress
        since it started: a kill during its start-up (seconds on a loaded machine) or while the
        link is cut tests nothing new."""
        o, (config,) = self.options, load(str(self.properties))
        while not self.stopping.is_set():
            copied_before = max(self.progress_copied, sum((self._progress(config) or {}).values()))
            while self.progress_copied <= copied_before and not self.stopping.wait(PROGRESS_SAMPLE_S):
                self._restart_exited()
            if self.stopping.wait(self.rng.uniform(0, o.kill_interval_s)):
                break
            self.mirror.kill()
            self.mirror.wait()
            self.kills.append({"killed_ms": int(time.time() * 1000)})
            if self.stopping.wait(o.restart_after_s):
                break
            self._start_mirror()
            self.kills[-1]["restarted_ms"] = int(time.time() * 1000)

    def completions(self) -> dict[str, int]:
        """The run's counts: sends acked and failed, mirror kills, the group's polls."""
        sends = list(self.sends)
        return {"send-ok": sum(1 for s in sends if s["offset"] is not None),
                "send-fail": sum(1 for s in sends if s["error"] is not None),
                "mirror-kill": len(self.kills),
                "group-poll": sum(1 for r in list(self.group_rows) if r["kind"] == "poll")}

    def _restart_exited(self) -> None:
        """A mirror that exited by itself (e.g. its start-up failed while a broker did not answer)
        is started again, as an operator's supervisor would; it is logged in mirror.log."""
        if self.mirror.poll() is not None:
            log.warning("the mirror exited (status %s); starting it again", self.mirror.returncode)
            self._start_mirror()

    def stop_invoking(self) -> None:
        """No more sends and no more kills; a mirror that is down is started again."""
        self.stopping.set()
        for thread in self.threads:
            thread.join()
        if self.mirror.poll() is not None:
            self._start_mirror()
            if self.kills and "restarted_ms" not in self.kills[-1]:
                self.kills[-1]["restarted_ms"] = int(time.time() * 1000)

    def _progress(self, config) -> dict[tuple[str, int], int] | None:
        """The mirror's committed progress in the target: source partition -> last offset copied
        (None when it cannot be read now: a broker down, the topic not there yet)."""
        connection = ConnectionLog(config.target)
        try:
            admin = build("admin", config.target_clients, connection)
            progress = {}
            for message in read_to_end(config.target_clients, connection, config.offsets_topic,
                                       partition_count(admin, config.offsets_topic), read_committed=True):
                decoded = decode_progress(message.key(), message.value())
                if decoded is not None and decoded[0] == config.source and decoded[3] is not None:
                    progress[(decoded[1], decoded[2])] = decoded[3]
            return progress
        except Exception as e:
            log.info("mirror progress not readable now: %s", e)
            return None

    def _sample_progress(self) -> None:
        (config,) = load(str(self.properties))
        while not self.stopping.wait(PROGRESS_SAMPLE_S):
            progress, now_ms = self._progress(config), int(time.time() * 1000)
            if progress:
                self.progress_copied = max(self.progress_copied, sum(progress.values()))
            for (topic, partition), last in sorted((progress or {}).items()):
                self.progress_rows.append({"time_ms": now_ms, "topic": topic, "partition": partition,
                                           "last_copied": last})

    def _consume_as_group(self) -> None:
        """A member of GROUP reading the source topic and committing its position every
        GROUP_COMMIT_S: the group whose checkpoints MIR-3 checks."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        def committed(error, partitions) -> None:
            """A commit's answer, served by a later poll(): the row that MIR-3's checkpoints are held to."""
            now_ms = int(time.time() * 1000)
            self.group_rows += [{"time_ms": now_ms, "kind": "commit", "topic": tp.topic, "partition": tp.partition,
                                 "offset": tp.offset, "value": None,
                                 "error": error.str() if error else tp.error.str() if tp.error else None}
                                for tp in partitions]

        # Commits are asynchronous, their answers recorded as they come: librdkafka's synchronous
        # commit has no timeout, and under faults has been seen to wait for minutes, which held
        # the run's end (stop_invoking() joins this thread) until the demo's time limit.
        consumer = Consumer({"bootstrap.servers": self.source_bootstrap, "group.id": GROUP,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "on_commit": committed, "logger": CLIENT_LOG})
        consumer.subscribe([self.options.topic])
        positions: dict[int, int] = {}
        started_s = time.monotonic()
        next_commit_s, polled = started_s + GROUP_COMMIT_S, 0
        try:
            while not self.stopping.is_set():
                # The group lags behind the sends, so its checkpoints translate with syncs mid-stream.
                ahead_s = polled / (self.options.records_per_s * GROUP_PACE) - (time.monotonic() - started_s)
                if ahead_s > 0:
                    self.stopping.wait(min(ahead_s, GROUP_COMMIT_S))
                message = consumer.poll(0.2)
                now_ms = int(time.time() * 1000)
                if message is not None and message.error() is None:
                    self.group_rows.append({"time_ms": now_ms, "kind": "poll", "topic": message.topic(),
                                            "partition": message.partition(),
                                            "offset": message.offset(), "value": int(message.value()), "error": None})
                    positions[message.partition()] = message.offset() + 1
                    polled += 1
                if positions and time.monotonic() >= next_commit_s:
                    next_commit_s = time.monotonic() + GROUP_COMMIT_S
                    try:
                        consumer.commit(offsets=[TopicPartition(self.options.topic, p, o) for p, o in positions.items()],
                                        asynchronous=True)
                    except KafkaException as e:  # refused before it was sent
                        self.group_rows += [{"time_ms": now_ms, "kind": "commit", "topic": self.options.topic,
                                             "partition": p, "offset": o, "value": None, "error": e.args[0].str()}
                                            for p, o in sorted(positions.items())]
        finally:
            close_within({"group-member": consumer}, GROUP_CLOSE_TIMEOUT_S)  # close() too can wait for minutes after faults

    def _copied(self, config) -> bool:
        """The mirror's committed progress (in the target) covers every acked send: the copies of
        everything before it are in the target (written before, or with, the progress)."""
        acked: dict[int, int] = {}
        for send in list(self.sends):
            if send["offset"] is not None:
                acked[send["partition"]] = max(acked.get(send["partition"], -1), send["offset"])
        progress = self._progress(config)
        return progress is not None and all(progress.get((self.options.topic, p), -1) >= last
                                            for p, last in acked.items())

    def _checkpointed(self, config) -> bool:
        """The target holds, for every partition the group committed, a checkpoint of its last commit."""
        if not self.options.group or not config.emit_checkpoints:
            return True
        committed = {r["partition"]: r["offset"] for r in list(self.group_rows) if r["kind"] == "commit" and not r["error"]}
        try:
            checkpoints = self._checkpoints(config)
        except Exception as e:  # a broker down, the topic not there yet: not yet
            log.info("checkpoints not readable now: %s", e)
            return False
        upstream = {}
        for c in checkpoints:
            upstream[c["partition"]] = max(upstream.get(c["partition"], -1), c["upstream"])
        return all(upstream.get(p, -1) >= offset for p, offset in committed.items())

    def _checkpoints(self, config) -> list[dict]:
        """The checkpoints of GROUP the target holds (`<source>.checkpoints.internal`)."""
        connection = ConnectionLog(config.target)
        return [{"group": c.group, "topic": c.topic, "partition": c.partition, "upstream": c.upstream_offset,
                 "downstream": c.offset}
                for c in (Checkpoint.decode(m.key(), m.value())
                          for m in read_to_end(config.target_clients, connection, config.checkpoints_topic, 1))
                if c.group == GROUP]

    def close(self, settle_timeout_s: float = 60.0) -> Path:
        """Wait (up to the timeout) for the mirror's progress to cover every acked send, then (in
        what is left of it) for its checkpoints to reach the group's last commits; stop the mirror
        and write the history; returns its folder. `caught_up` says whether the copies caught up,
        `checkpointed` whether the checkpoints did (MIR-3 is checked on those there are either way)."""
        (config,) = load(str(self.properties))
        deadline = time.monotonic() + settle_timeout_s
        while not (caught_up := self._copied(config)) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        while caught_up and not (checkpointed := self._checkpointed(config)) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        self.caught_up, self.checkpointed = caught_up, caught_up and checkpointed
        if caught_up and not checkpointed:
            log.warning("the mirror's checkpoints did not reach the group's last commits within %.0f s",
                        settle_timeout_s)
        self.mirror.terminate()
        try:
            self.mirror.wait(settle_timeout_s)
        except subprocess.TimeoutExpired:
            self.mirror.kill()
            self.mirror.wait()
        record(config, self.out_dir)
        checkpoints = self._checkpoints(config) if self.options.group and config.emit_checkpoints else []
        for rows, schema, name in ((self.sends, SENDS_SCHEMA, SENDS_FILE),
                                   (self.progress_rows, PROGRESS_SCHEMA, PROGRESS_FILE),
                                   (self.group_rows, GROUP_SCHEMA, GROUP_FILE),
                                   (checkpoints, CHECKPOINTS_SCHEMA, CHECKPOINTS_FILE)):
            pq.write_table(pa.Table.from_pylist(rows, schema=schema), self.out_dir / name)
        (self.out_dir / KILLS_FILE).write_text(json.dumps(self.kills, indent=2) + "\n")
        self.detach_log()
        return self.out_dir
