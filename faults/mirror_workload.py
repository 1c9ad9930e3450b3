"""MirrorMaker under faults, recorded as a history: numbered records sent to a topic of the source
cluster while `kspec mirror` (a real process) copies it into the target cluster and is killed
with -9 and started again. Either cluster may be faulted meanwhile by faults/run.py's nemesis
(leaders killed, the clusters partitioned from the mirror): the workload needs only their
bootstrap lists.

The history folder is `kspec mirror record`'s (mirror/history.py: `mirror.json`, both clusters'
records of the flow) plus `mirror-sends.parquet`, every send with its outcome (ok with its
source offset, or the error), and `mirror-kills.json`; spark_validation/mirror.py checks it
for MIR-1 and MIR-2.

Wiring into `kspec faults run` (faults/run.py) takes a few lines once it runs two clusters:
`w = MirrorWorkload(source.bootstrap, target.bootstrap, out_dir / "mirror", options)`,
`w.start()` beside `workload.start()`, `w.stop_invoking()` beside `workload.stop_invoking()`,
`w.close(settle_timeout_s)` after the heal; `kspec check OUT/mirror` checks it.
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

import pyarrow as pa
import pyarrow.parquet as pq

from mirror.clients import ConnectionLog, build, partition_count, read_to_end
from mirror.config import load
from mirror.history import record
from mirror.records import decode_progress

log = logging.getLogger("faults.mirror")

SENDS_FILE, KILLS_FILE = "mirror-sends.parquet", "mirror-kills.json"
SENDS_SCHEMA = pa.schema([("value", pa.int64()), ("partition", pa.int32()), ("offset", pa.int64()),
                          ("error", pa.string()), ("sent_ms", pa.int64())])
CREATE_TIMEOUT_S = 60.0
SEND_FLUSH_TIMEOUT_S = 120.0  # Kafka's delivery.timeout.ms
POLL_S = 0.3
SOURCE_ALIAS, TARGET_ALIAS = "primary", "backup"


@dataclass(frozen=True)
class MirrorWorkloadOptions:
    topic: str = "mirrored"
    partitions: int = 2
    records_per_s: float = 300.0
    kill_interval_s: float = 5.0      # the mirror killed with -9 this often (0: never)
    restart_after_s: float = 1.0
    exactly_once: bool = False        # exactly.once.support=enabled: MIR-2 is checked too
    replication_factor: int = -1      # remote and internal topics (-1: the brokers' default)
    offset_flush_interval_ms: int = 1000


class MirrorWorkload:
    """start() -> (records sent, the mirror killed and restarted) -> stop_invoking() -> close()."""

    def __init__(self, source_bootstrap: str, target_bootstrap: str, out_dir: Path,
                 options: MirrorWorkloadOptions = MirrorWorkloadOptions(), seed: int = 0) -> None:
        self.source_bootstrap, self.target_bootstrap = source_bootstrap, target_bootstrap
        self.out_dir, self.options = Path(out_dir), options
        self.rng = random.Random(seed)
        self.properties = self.out_dir / "mm2.properties"
        self.sends: list[dict] = []
        self.kills: list[dict] = []
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.mirror: subprocess.Popen | None = None

    def _write_properties(self) -> None:
        o, rf = self.options, str(self.options.replication_factor)
        settings = {
            "clusters": f"{SOURCE_ALIAS}, {TARGET_ALIAS}",
            f"{SOURCE_ALIAS}.bootstrap.servers": self.source_bootstrap,
            f"{TARGET_ALIAS}.bootstrap.servers": self.target_bootstrap,
            f"{SOURCE_ALIAS}->{TARGET_ALIAS}.enabled": "true",
            "topics": o.topic, "emit.checkpoints.enabled": "false", "refresh.topics.interval.seconds": "1",
            "offset.flush.interval.ms": str(o.offset_flush_interval_ms),
            "exactly.once.support": "enabled" if o.exactly_once else "requested",
            "replication.factor": rf, "offset-syncs.topic.replication.factor": rf,
            "heartbeats.topic.replication.factor": rf, "checkpoints.topic.replication.factor": rf,
            "offset.storage.replication.factor": rf,
        }
        self.properties.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))

    def _start_mirror(self) -> None:
        with open(self.out_dir / "mirror.log", "ab") as log_file:
            self.mirror = subprocess.Popen([sys.executable, "-m", "kspec.cli", "mirror", str(self.properties)],
                                           stdout=subprocess.DEVNULL, stderr=log_file, stdin=subprocess.DEVNULL)

    def start(self) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._write_properties()
        o = self.options
        admin = AdminClient({"bootstrap.servers": self.source_bootstrap})
        try:
            admin.create_topics([NewTopic(o.topic, o.partitions, o.replication_factor)])[o.topic].result(
                CREATE_TIMEOUT_S)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        self._start_mirror()
        self.threads = [threading.Thread(target=self._send, name="mirror-send", daemon=True)]
        if o.kill_interval_s > 0:
            self.threads.append(threading.Thread(target=self._kill_and_restart, name="mirror-kill", daemon=True))
        for thread in self.threads:
            thread.start()

    def _send(self) -> None:
        from confluent_kafka import Producer

        o = self.options
        producer = Producer({"bootstrap.servers": self.source_bootstrap, "enable.idempotence": True,
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
        o = self.options
        while not self.stopping.wait(o.kill_interval_s):
            self.mirror.kill()
            self.mirror.wait()
            self.kills.append({"killed_ms": int(time.time() * 1000)})
            if self.stopping.wait(o.restart_after_s):
                break
            self._start_mirror()
            self.kills[-1]["restarted_ms"] = int(time.time() * 1000)

    def stop_invoking(self) -> None:
        """No more sends and no more kills; a mirror that is down is started again."""
        self.stopping.set()
        for thread in self.threads:
            thread.join()
        if self.mirror.poll() is not None:
            self._start_mirror()
            if self.kills and "restarted_ms" not in self.kills[-1]:
                self.kills[-1]["restarted_ms"] = int(time.time() * 1000)

    def _copied(self, config) -> bool:
        """The mirror's committed progress (in the target) covers every acked send: the copies of
        everything before it are in the target (written before, or with, the progress)."""
        acked: dict[int, int] = {}
        for send in list(self.sends):
            if send["offset"] is not None:
                acked[send["partition"]] = max(acked.get(send["partition"], -1), send["offset"])
        connection = ConnectionLog(config.target)
        try:
            admin = build("admin", config.target_clients, connection)
            progress = {}
            for message in read_to_end(config.target_clients, connection, config.offsets_topic,
                                       partition_count(admin, config.offsets_topic), read_committed=True):
                decoded = decode_progress(message.key(), message.value())
                if decoded is not None and decoded[0] == config.source and decoded[3] is not None:
                    progress[(decoded[1], decoded[2])] = decoded[3]
        except Exception as e:  # a broker down, the topic not there yet: not copied yet
            log.info("mirror progress not readable yet: %s", e)
            return False
        return all(progress.get((self.options.topic, p), -1) >= last for p, last in acked.items())

    def close(self, settle_timeout_s: float = 60.0) -> Path:
        """Wait (up to the timeout) for the target to hold as many records as were acked, stop the
        mirror and write the history; returns its folder."""
        (config,) = load(str(self.properties))
        deadline = time.monotonic() + settle_timeout_s
        while not self._copied(config) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        self.mirror.terminate()
        try:
            self.mirror.wait(settle_timeout_s)
        except subprocess.TimeoutExpired:
            self.mirror.kill()
            self.mirror.wait()
        record(config, self.out_dir)
        pq.write_table(pa.Table.from_pylist(self.sends, schema=SENDS_SCHEMA), self.out_dir / SENDS_FILE)
        (self.out_dir / KILLS_FILE).write_text(json.dumps(self.kills, indent=2) + "\n")
        return self.out_dir
