"""`kspec faults run --workload all`: every workload side by side, one run checking every guarantee.

No one workload can check the whole catalogue: groups need subscribe mode, DUR-2 needs acks=1
(where DUR-1 does not apply), RET-1 compacted topics, TXN-1/2 transactions, EOS-1/2 a stream
processor. So a lanes run runs several workloads ("lanes") at once against the same cluster
under the same nemesis schedule, each a normal workload on topics of its own (its keys start
at its key base: Jepsen's key k is topic "t{k // 2}") with its own recorder, so each lane's
history is complete and checkable alone, as `kspec check` checks any run:

| lane | workload | checks |
|---|---|---|
| main | the queue workload (assign, acks=all, idempotent) | ORD-*, DUR-1, VIS-*, IDM-1, REP-*, PRO-1 |
| (main) | beside it the Connect pipeline with exactly.once.source.support=enabled (`--workload connect` runs it at least once), in RUN/connect/ (a "connect" lane skipped, with why, when it does not start) | CON-1, CON-2, CON-3 |
| txn | transactions of sends and polls (--txn), a tenth aborted by the client after their sends were acked | TXN-1, TXN-2 |
| groups | subscribe mode, one group (--sub-via subscribe) | GRP-1, GRP-2, GRP-3 |
| acks1 | acks=1, no idempotence (--acks 1) | DUR-2 |
| compact | cleanup.policy=compact, small segments, tombstones | RET-1 |
| streams | the Quix Streams exactly-once application (--workload quixstreams) | EOS-1, EOS-2 |
| auth | probes of a SASL listener with ACLs: before authentication, denied operations, a client as a replica or controller (faults/lane_auth.py) | AUTH-1, AUTH-2, AUTH-3 |
| mirror | `kspec mirror` copying a topic into the same cluster, exactly once, killed -9 (faults/lane_mirror.py) | MIR-1, MIR-2, MIR-3 |

The main lane is the run itself (faults/run.py): its history, run.json, results.json are in
RUN/ as in any run, the Connect pipeline's in RUN/connect/. Every other lane writes
RUN/lanes/<lane>/ (history.parquet, run.json, results.json, and the streams lane its
application's files). RUN/lanes.json lists the lanes, what each is for, and why a lane was
skipped (the streams lane when no Python with Quix Streams is installed: `make setup`).
The run's --rate and --concurrency are shared out by LANE_SHARES. The nemesis records its
flips in every lane's history (FanOutRecorder), the replica audit's PRO-1 judges by the malformed
bursts; the leader-epoch observer (faults/epochs.py) records each lane's partitions' leaders in its
history, by which REP-2 and the acks=1 check (DUR-2) judge. `kspec check RUN` checks every lane and merges
the verdicts (spark_validation/lanes.py).

Left out, and why: the replica audit of the compact lane (its records' Kafka keys are 16 bytes
and its tombstones have no value, which the audit, reading 8-byte longs, would take for records
no client sent).
"""
from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from faults import audit, lane_auth
from faults.recorder import Recorder, acked_missing_from_final_reads
from faults.workload import Workload, WorkloadOptions, checker_options

LANES_WORKLOAD = "all"
LANES_DIR = "lanes"
LANES_FILE = "lanes.json"
# A lane's stop (its sends in flight, a streams application catching up) takes at most about
# send_timeout_s + 1 plus the application's catch-up and stop; one still stopping after this is
# waiting on a client call that does not return, and is given up (SideLanes._stop).
LANE_STOP_TIMEOUT_S = 300.0
MAIN = "main"
CONNECT_LANE = "connect"           # the Connect pipeline, in the main lane's folder (RUN/connect/)
KEYS_PER_LANE = 8                  # the queue workload's default: four topics of two partitions
STREAMS_KEY_COUNT = 4              # as `--workload quixstreams`: two topics, so two state stores
# lane -> its share of the run's --rate and --concurrency (weights)
LANE_SHARES = {"main": 3, "txn": 2, "groups": 2, "acks1": 1, "compact": 1, "streams": 1, "auth": 1, "mirror": 1}
LANE_CHECKS = {
    "main": ("ORD-1", "ORD-2", "ORD-3", "DUR-1", "VIS-1", "VIS-2", "IDM-1", "REP-1", "REP-2", "PRO-1"),
    "connect": ("CON-1", "CON-2", "CON-3"),
    "txn": ("TXN-1", "TXN-2"),
    "groups": ("GRP-1", "GRP-2", "GRP-3"),
    "acks1": ("DUR-2",),
    "compact": ("RET-1",),
    "streams": ("EOS-1", "EOS-2"),
    "auth": ("AUTH-1", "AUTH-2", "AUTH-3"),
    "mirror": ("MIR-1", "MIR-2", "MIR-3"),
}
LANE_KINDS = {"groups": "subscribe", "streams": "quixstreams", "auth": "auth", "mirror": "mirror"}  # the others: queue
# the compact lane's topics: segments rolled every 2 KiB or second, cleaned as soon as anything is
# dirty, tombstones kept a minute (so the final reads must still see the last ones)
COMPACTED_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "2048", "segment.ms": "1000",
                          "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "60000"}
# and the nodes' cleaner looks for work every second (Kafka's default: 15 s, longer than a short run)
COMPACTION_BROKER_PROPERTIES = {"log.cleaner.backoff.ms": "1000"}


@dataclass(frozen=True)
class Lane:
    name: str
    workload: WorkloadOptions
    kind: str = "queue"            # queue, subscribe (faults/subscribe.py), quixstreams (faults/streams.py), auth, mirror (faults/lane_mirror.py)

    @property
    def checks(self) -> tuple[str, ...]:
        return LANE_CHECKS[self.name]


def plan(base: WorkloadOptions) -> list[Lane]:
    """Every lane's workload, main first: the base (the run's options) with the lane's changes,
    its share of the rate and concurrency, and its own keys."""
    total = sum(LANE_SHARES.values())
    changes = {
        "main": {},
        "txn": {"txn": True},
        "groups": {"sub_via": "subscribe"},
        "acks1": {"acks": "1", "idempotence": False},
        "compact": {"topic_config": COMPACTED_TOPIC_CONFIG},
        "streams": {"key_count": STREAMS_KEY_COUNT},
        "auth": {"key_count": 4},  # its topics A and B (faults/lane_auth.py)
        "mirror": {},
    }
    lanes = []
    for position, (name, share) in enumerate(LANE_SHARES.items()):
        workload = dataclasses.replace(
            base, **{"key_base": base.key_base + position * KEYS_PER_LANE, "key_count": KEYS_PER_LANE,
                     "rate_hz": base.rate_hz * share / total,
                     "concurrency": max(1, round(base.concurrency * share / total)), **changes[name]})
        lanes.append(Lane(name, workload, LANE_KINDS.get(name, "queue")))
    return lanes


class FanOutRecorder:
    """The nemesis's recorder in a lanes run: each flip goes into every lane's history, stamped by
    that lane's own clock (the nemesis uses invoke, complete and now_ns)."""

    def __init__(self, recorders: list[Recorder]) -> None:
        assert recorders
        self.recorders = recorders

    def now_ns(self) -> int:
        return self.recorders[0].now_ns()

    def invoke(self, process: int, f: str, **fields) -> list:
        return [recorder.invoke(process, f, **fields) for recorder in self.recorders]

    def complete(self, invocations: list, type: str, **fields) -> list:
        return [recorder.complete(invocation, type, **fields)
                for recorder, invocation in zip(self.recorders, invocations)]


class _SideLane:
    """One lane beside the main one: its recorder, workload and the samplers its checks need."""

    def __init__(self, lane: Lane, target, out_dir: Path, seed: int, app_kill_interval_s: float) -> None:
        self.lane = lane
        self.target = target
        self.out_dir = out_dir
        self.recorder = Recorder(out_dir)
        if lane.kind == "quixstreams":
            from faults.streams import StreamsWorkload
            self.workload: Workload = StreamsWorkload(target.bootstrap, self.recorder, lane.workload, seed=seed,
                                                      app_kill_interval_s=app_kill_interval_s)
        elif lane.kind == "auth":
            from faults.lane_auth import AuthWorkload
            self.workload = AuthWorkload(target, self.recorder, lane.workload, seed=seed)
        elif lane.kind == "subscribe":
            from faults.subscribe import SubscribeWorkload
            self.workload = SubscribeWorkload(target.bootstrap, self.recorder, lane.workload, seed=seed)
        else:
            self.workload = Workload(target.bootstrap, self.recorder, lane.workload, seed=seed)
        self.samplers: list = []
        self.result: dict = {}

    def start(self) -> None:
        options = self.lane.workload
        self.workload.start()
        if options.compacted:  # RET-1: tombstones beside the keyed records (faults/compaction.py)
            from faults.compaction import Tombstoner
            self.samplers.append(Tombstoner(self.target.bootstrap, options, self.recorder,
                                            next(self.workload.next_process), self.workload.seed).start())

    def finish(self, final_read_timeout_s: float, data_dirs: dict | None) -> None:
        """Final reads (after the samplers' last ops), the replica audit of the lane's topics, the history."""
        for sampler in self.samplers:
            sampler.stop()
        complete = self.workload.final_reads(final_read_timeout_s)
        replica_audit = {"methods": [], "error": "not audited: compacted records are no 8-byte longs (see above)"} \
            if self.lane.workload.compacted else {"methods": [], "error": "not audited: AUTH-* probes"} \
            if self.lane.kind == "auth" else \
            audit.audit(self.target.bootstrap, self.lane.workload.topics, self.recorder, data_dirs,
                        properties=self.lane.workload.client_properties)
        history_path = self.recorder.close()
        (self.out_dir / "run.json").write_text(json.dumps(checker_options(self.lane.workload)))
        self.result = {"completions": dict(self.recorder.completions), "final_reads_complete": complete,
                       "acked_missing_from_final_reads": acked_missing_from_final_reads(history_path)
                       if complete else None,
                       "workload_failures": self.workload.failures, "replica_audit": replica_audit}
        from faults.security import without_secrets
        workload = dataclasses.asdict(self.lane.workload)
        workload["client_properties"] = without_secrets(workload["client_properties"])
        (self.out_dir / "results.json").write_text(json.dumps({"lane": self.lane.name, "workload": workload,
                                                               **self.result}, indent=2, sort_keys=True))

    def abort(self) -> None:
        """After an error: no more ops, samplers ended, a streams application killed."""
        self.workload.stop_invoking()
        for sampler in self.samplers:
            sampler.stopping.set()
        app = getattr(self.workload, "app", None)
        if app is not None and app.poll() is None:
            app.kill()


class SideLanes:
    """The lanes beside the main one, driven through the run's phases by faults/run.py; with no
    lanes (any run but --workload all) every call does nothing."""

    def __init__(self, lanes: list[Lane]) -> None:
        self.planned = lanes
        self.lanes: list[_SideLane] = []
        self.skipped: dict[str, str] = {}  # lane -> why it did not run

    def open(self, target, out_dir: Path, seed: int, app_kill_interval_s: float, client_properties: dict) -> None:
        """Each lane's folder, recorder and workload, and its topics."""
        for lane in self.planned:
            if lane.kind == "quixstreams":
                from faults.streams import StreamsUnavailable, check_streams_python
                try:
                    check_streams_python()
                    if client_properties:
                        raise StreamsUnavailable("the Quix Streams application connects PLAINTEXT")
                except StreamsUnavailable as e:
                    self.skipped[lane.name] = str(e)
                    continue
            if lane.kind == "auth" and (why := lane_auth.unavailable(target)):
                self.skipped[lane.name] = why
                continue
            if lane.kind == "mirror" and client_properties:
                from faults.lane_mirror import PLAINTEXT_ONLY
                self.skipped[lane.name] = PLAINTEXT_ONLY
                continue
            lane = dataclasses.replace(lane, workload=dataclasses.replace(lane.workload,
                                                                          client_properties=client_properties))
            lane_dir = out_dir / LANES_DIR / lane.name
            lane_dir.mkdir(parents=True)
            if lane.kind == "mirror":
                from faults.lane_mirror import MirrorLane
                self.lanes.append(MirrorLane(lane, target, lane_dir, seed, app_kill_interval_s))
                continue
            self.lanes.append(_SideLane(lane, target, lane_dir, seed, app_kill_interval_s))
        self._each(lambda side: side.workload.create_topics())

    def prepare(self, target) -> None:
        """Before the nodes start: the auth lane's SASL listener and authorizer (faults/lane_auth.py)."""
        if any(lane.kind == "auth" for lane in self.planned):
            lane_auth.add_sasl_listener(target)

    def skip(self, lane: str, why: str) -> None:
        """A lane that could not start (the Connect pipeline): the run goes on, the verdict says why."""
        self.skipped[lane] = why

    def recorder_with(self, main: Recorder):
        """What the nemesis records into: the main recorder, and every lane's."""
        return FanOutRecorder([main, *(side.recorder for side in self.lanes)]) if self.lanes else main

    def observed(self) -> list[tuple[Recorder, list[str]]]:
        """Each lane's history and topics, for the run's leader-epoch observer (faults/epochs.py)."""
        return [(side.recorder, side.lane.workload.topics) for side in self.lanes]

    @property
    def transactional(self) -> bool:
        return any(side.lane.workload.txn for side in self.lanes)

    def start(self) -> None:
        self._each(lambda side: side.start())

    def stop_invoking(self) -> None:
        for side in self.lanes:
            side.workload.stop_invoking()

    def stop_transactional(self, steps) -> None:
        """Transactional lanes end against the faults, before the final heal (see faults/run.py)."""
        self._stop([s for s in self.lanes if s.lane.workload.txn], steps)

    def stop(self, steps) -> None:
        """The other lanes, after the final heal: their sends in flight complete, a streams application catches up."""
        self._stop([s for s in self.lanes if not s.lane.workload.txn], steps)

    def _stop(self, lanes: list[_SideLane], steps) -> None:
        """Stop lanes side by side. One still stopping after LANE_STOP_TIMEOUT_S (a client call that
        never returns) is given up: its history goes unchecked, with where it was waiting as the
        reason, and the run and the other lanes go on."""
        for side, waiting_in in self._each(_marked(steps, "stops", lambda side: side.workload.stop()), lanes,
                                           timeout_s=LANE_STOP_TIMEOUT_S):
            self.lanes.remove(side)
            side.abort()
            self.skipped[side.lane.name] = (f"did not stop within {LANE_STOP_TIMEOUT_S:.0f} s, so its history "
                                            f"is not checked; it was waiting in {waiting_in}")

    def close(self) -> None:
        for side in self.lanes:
            side.workload.close()

    def finish_in_background(self, final_read_timeout_s: float, data_dirs: dict | None, steps) -> Future:
        """Every lane's final reads, audit and history, beside the main lane's: wait with .result().
        steps(name) marks each lane's finish in the run's steps.jsonl (faults/run.py)."""
        executor = ThreadPoolExecutor(1, thread_name_prefix="lanes-finish")
        future = executor.submit(self._each, _marked(steps, "finishes",
                                                     lambda side: side.finish(final_read_timeout_s, data_dirs)))
        executor.shutdown(wait=False)  # its one thread ends once the lanes are finished
        return future

    def abort(self) -> None:
        for side in self.lanes:
            side.abort()

    def write(self, out_dir: Path, main_workload: WorkloadOptions) -> dict:
        """RUN/lanes.json (what `kspec check` reads) and the lanes' summary for results.json."""
        if not self.planned:
            return {}
        connect = [] if CONNECT_LANE in self.skipped else list(LANE_CHECKS[CONNECT_LANE])  # checked in RUN/connect/
        lanes = {MAIN: {"dir": ".", "checks": [*LANE_CHECKS[MAIN], *connect], "keys": _keys(main_workload)}}
        if CONNECT_LANE in self.skipped:
            lanes[CONNECT_LANE] = {"dir": None, "checks": list(LANE_CHECKS[CONNECT_LANE]),
                                   "skipped": self.skipped[CONNECT_LANE]}
        for lane in self.planned:
            side = next((s for s in self.lanes if s.lane.name == lane.name), None)
            entry = {"dir": f"{LANES_DIR}/{lane.name}", "checks": list(lane.checks), "keys": _keys(lane.workload)}
            if side is None or side.result.get("skipped"):  # not run, or (the mirror lane) no history recorded
                entry = {**entry, "dir": None, "skipped": side.result["skipped"] if side else
                         self.skipped.get(lane.name, "not run")}
            else:
                entry.update({k: side.result.get(k) for k in ("completions", "final_reads_complete",
                                                              "workload_failures")})
            lanes[lane.name] = entry
        (out_dir / LANES_FILE).write_text(json.dumps({"lanes": lanes}, indent=2) + "\n")
        return lanes

    def _each(self, action, lanes: list[_SideLane] | None = None,
              timeout_s: float | None = None) -> list[tuple[_SideLane, str]]:
        """action on every lane at once (each in a thread of its own); the first error is raised.
        With timeout_s: the lanes whose action still runs then, each with where its thread waits."""
        errors = []

        def guarded(side: _SideLane) -> None:
            try:
                action(side)
            except Exception as e:  # handed to the caller
                errors.append(e)

        threads = [threading.Thread(target=guarded, args=(side,), name=f"lane-{side.lane.name}", daemon=True)
                   for side in (self.lanes if lanes is None else lanes)]
        for thread in threads:
            thread.start()
        deadline_s = None if timeout_s is None else time.monotonic() + timeout_s
        for thread in threads:
            thread.join(None if deadline_s is None else max(0.0, deadline_s - time.monotonic()))
        if errors:
            raise errors[0]
        sides = self.lanes if lanes is None else lanes
        return [(side, _waiting_in(thread)) for side, thread in zip(sides, threads) if thread.is_alive()]


def _waiting_in(thread: threading.Thread) -> str:
    """Where a thread is now: its innermost frames, innermost first."""
    frame = sys._current_frames().get(thread.ident)
    if frame is None:
        return "(ended)"
    frames = traceback.extract_stack(frame)[-3:]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames))


def _marked(steps, what: str, action):
    """action on a lane, as the step "lane <name> <what>" of the run's steps.jsonl (faults/run.py)."""
    def marked(side: _SideLane) -> None:
        with steps(f"lane {side.lane.name} {what}"):
            action(side)
    return marked


def _keys(workload: WorkloadOptions) -> list[int]:
    return [workload.keys.start, workload.keys.stop]


def side_lanes(options) -> tuple[object, SideLanes]:
    """For --workload all: the run's options with the main lane's workload, and the other lanes;
    for any other workload the options as they are and no lanes."""
    if options.workload_name != LANES_WORKLOAD:
        return options, SideLanes([])
    lanes = plan(options.workload)
    properties = options.broker_properties
    if options.target in ("reference", "docker"):  # a TOML target's nodes take no --set
        properties = {**COMPACTION_BROKER_PROPERTIES, **properties}
    return dataclasses.replace(options, workload=lanes[0].workload, broker_properties=properties), \
        SideLanes(lanes[1:])
