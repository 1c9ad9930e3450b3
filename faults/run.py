"""One fault run: start a target, run the workload under a nemesis schedule, heal, read back.

Phases, as Jepsen runs them (research/jepsen.md section 1, "Test phases"):
  1. set up the network (namespaces, or the proxy layer), start the nodes, create topics;
  2. main phase for time_limit_s: the workload at its rate, the nemesis flipping faults;
  3. final heal of every active fault, then quiet_s of quiet with no faults;
  4. final reads: every partition read from the beginning up to its high watermark;
  5. stop the nodes and tear down everything made in 1, also on Ctrl-C or an error.

The results folder holds history.parquet (spec/history.py), nemesis.jsonl (the
timeline, one line per fault start or heal), run.json (the options `kspec check` reads),
results.json (options, network mode and why, counts) and node-<i>.log with node-<i>/
(each node's log and data).
"""
from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import json
import logging
import os
import random
import signal
import threading
import time
import tomllib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from faults import audit, clock, disk, docker_target, net
from faults.connect_workload import CONNECT_DIR, ConnectPipeline, ConnectWorkloadOptions
from faults.epochs import EpochObserver
from faults.lanes import CONNECT_LANE, LANES_WORKLOAD, side_lanes
from faults.recorder import acked_missing_from_final_reads
from faults.nemesis import INTERVAL_S_DEFAULT, PACKAGES, STORAGE_PACKAGES, VARIANTS, Nemesis, Schedule
from faults.proxy import ToxiproxyClient, ToxiproxyServer
from faults.recorder import Recorder
from faults.streams import WORKLOADS, StreamsWorkload
from faults.targets import MODES, Target, TargetError, reference_target, toml_target
from faults.workload import CLIENT_LOGGER, Workload, WorkloadOptions, checker_options
from spec.history import topic_partition

HISTORY_SCHEMA_VERSION = 1
TICK_S = 0.2
RATE_WINDOW_S = 2.0
TIMELINE_FILE = "nemesis.jsonl"
CLIENTS_LOG_FILE = "clients.log"
STEPS_FILE = "steps.jsonl"     # each step of the run as it begins and ends (see _Steps)
THREADS_FILE = "threads.txt"  # every thread's stack, when a run is ended by SIGTERM or a crash
RUN_FILE = "run.json"          # the checker's options (spark_validation/options.py)
RESULTS_FILE = "results.json"  # what happened in the run


@dataclass(frozen=True)
class RunOptions:
    target: str = "reference"            # "reference", "docker" or the path of a TOML target file
    image: str | None = None             # containers' image (docker targets): None is the reference image
    nodes: int = 1
    nemeses: tuple[str, ...] = ("partition", "kill", "pause")
    nemesis_variants: dict[str, str] = field(default_factory=dict)  # e.g. {"power": "all"}: every start cuts all
    time_limit_s: float = 60.0
    interval_s: float = INTERVAL_S_DEFAULT
    quiet_s: float = 5.0
    final_read_timeout_s: float = 30.0
    network: str = "auto"                # auto, netns or proxy
    seed: int = 0
    broker_properties: dict[str, str] = field(default_factory=dict)  # --set: Kafka properties for the reference nodes
    disk_bytes: int = disk.TMPFS_BYTES_DEFAULT  # each node's data disk with the disk nemesis
    workload: WorkloadOptions = field(default_factory=WorkloadOptions)
    workload_name: str = "queue"         # or "quixstreams": the queue workload feeds a stream processor (faults/streams.py),
    #                                      or "connect": a Connect pipeline beside it (faults/connect_workload.py),
    #                                      or "all": every workload side by side, each in a lane (faults/lanes.py)
    client_properties: dict[str, str] = field(default_factory=dict)  # --command-config (faults/security.py)
    secure: bool = False                 # --secure: SASL_SSL reference nodes (faults/security.py)
    mirror_properties: dict[str, str] = field(default_factory=dict)  # --mirror-set: mm2.properties keys (faults/mirror_run.py)

    def __post_init__(self) -> None:
        unknown = set(self.nemeses) - set(PACKAGES)
        assert not unknown, f"unknown nemeses {sorted(unknown)}; known: {', '.join(PACKAGES)}"
        assert all(v in VARIANTS.get(p, ()) for p, v in self.nemesis_variants.items()), self.nemesis_variants
        assert self.network in ("auto", *MODES) and self.time_limit_s > 0 and self.nodes >= 1
        assert self.image is None or self.target != "reference", "--image is for containers: --target docker"
        assert self.workload_name in (*WORKLOADS, "mirror", LANES_WORKLOAD)
        assert not (self.workload_name == "quixstreams" and self.workload.txn)
        assert not (self.secure and (self.target != "reference" or self.client_properties)), "--secure: reference only"


@dataclass(frozen=True)
class Status:
    """What the progress line shows."""
    phase: str
    elapsed_s: float
    time_limit_s: float
    ops_per_s: float
    completions: dict[str, int]
    active_faults: dict[str, dict]


@dataclass
class RunResult:
    out_dir: Path
    mode: str
    mode_reason: str
    completions: dict[str, int]
    ops_per_s: float
    final_reads_complete: bool
    acked_missing: int | None  # acknowledged values the final reads did not return (None: reads incomplete)
    workload_failures: list[str]
    replica_audit: dict = field(default_factory=dict)  # faults/audit.py: methods used, replicas read
    lanes: dict = field(default_factory=dict)  # --workload all: each lane's summary (faults/lanes.py)


class RunError(RuntimeError):
    pass


def choose_mode(requested: str, nemeses: tuple[str, ...]) -> tuple[str, str]:
    """The network mode and why: namespaces when they can be made, else the proxy layer."""
    if requested == "proxy":
        return "proxy", "requested"
    if "link" in nemeses:
        if requested == "netns":
            raise RunError("link faults go through the proxy layer: use --network proxy (or auto)")
        return "proxy", "link faults go through the proxy layer"
    try:
        net.check_capability()
    except net.NetworkUnavailable as e:
        if requested == "netns":
            raise RunError(str(e)) from None
        return "proxy", f"FALLBACK: {e}"
    return "netns", "network namespaces available"


def run(options: RunOptions, out_dir: Path, progress: Callable[[Status], None] = lambda status: None) -> RunResult:
    if options.workload_name == "mirror":
        raise RunError("two clusters and a mirror between them run through faults.mirror_run.run_mirror")
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise RunError(f"{out_dir} is not empty; give a new folder for the results")
    out_dir.mkdir(parents=True, exist_ok=True)
    options, lanes = side_lanes(options)  # --workload all: the main lane's share, and the other lanes
    container_spec = _container_spec(options)
    if container_spec is not None:
        mode, mode_reason = docker_target.MODE, "containers on a bridge network of their own"
        if options.network != "auto" or "link" in options.nemeses:
            raise RunError("containers' faults go through the Docker network: leave --network auto, no link nemesis")
    else:
        mode, mode_reason = choose_mode(options.network, options.nemeses)
    rng = random.Random(options.seed)
    state_path = net.STATE_DIR / f"ksf{os.getpid() % 100000}.json"
    with contextlib.ExitStack() as cleanup:
        _log_clients_to(out_dir / CLIENTS_LOG_FILE, cleanup)
        _threads_on_signals(out_dir / THREADS_FILE, cleanup)
        steps = _Steps(out_dir / STEPS_FILE)
        network, toxiproxy = None, None
        if mode == "netns":
            network = net.Network(f"ksf{os.getpid() % 100000}", options.nodes)
            cleanup.callback(network.destroy)
            network.create()
        else:
            if mode == "proxy":
                toxiproxy = _toxiproxy(cleanup)
            cleanup.callback(lambda: state_path.exists() and net.clean_state_file(state_path))
        if container_spec is not None:
            target = _docker_target(container_spec, options, out_dir, cleanup)
        else:
            target = _target(options, out_dir, mode, network, toxiproxy)
        lanes.prepare(target)  # --workload all: the auth lane's SASL listener
        if not options.secure:
            target.client_properties = dict(options.client_properties)
        if target.client_properties and options.workload_name == "quixstreams":
            raise RunError("the quixstreams workload's application connects PLAINTEXT: no --secure or --command-config")
        options = dataclasses.replace(options, workload=dataclasses.replace(
            options.workload, client_properties=target.client_properties))  # every client the run makes
        disks = _disks(options, len(target.nodes), out_dir, state_path.stem, cleanup)
        clocks = _clocks(options, target, state_path.stem, cleanup)
        cleanup.callback(target.stop)
        with steps("nodes start"):
            target.start()
            target.wait_until_serving()
        net.record_processes(state_path, [node.pid for node in target.nodes])
        recorder = Recorder(out_dir)
        if options.workload_name == "quixstreams":  # the application is killed as often as a fault package flips
            workload = StreamsWorkload(target.bootstrap, recorder, options.workload, seed=options.seed,
                                       app_kill_interval_s=options.interval_s)
        else:
            workload_class = Workload if options.workload.sub_via == "assign" else _subscribe_workload()
            workload = workload_class(target.bootstrap, recorder, options.workload, seed=options.seed)
        workload.create_topics()
        lanes.open(target, out_dir, options.seed, options.interval_s, options.workload.client_properties)
        cleanup.callback(lanes.abort)
        nemesis = Nemesis(target, lanes.recorder_with(recorder), out_dir / TIMELINE_FILE, rng, disks, clocks,
                          options.nemesis_variants)
        cleanup.callback(nemesis.close)
        nemesis.run_partitions = sorted({topic_partition(k) for k in options.workload.keys})
        observer = EpochObserver(target.bootstrap, options.workload.topics, recorder, options.workload.client_properties,
                                 lanes.observed()).start()  # REP-2, DUR-2
        cleanup.callback(observer.stop)
        schedule = Schedule(tuple(options.nemeses), options.interval_s, rng) if options.nemeses else None
        pipeline = _connect_pipeline(options, target, out_dir, lanes)
        cleanup.callback(lambda: pipeline and [worker.kill() for worker in pipeline.workers if worker.running])
        with steps("lanes start"):
            lanes.start()  # before the main phase's clock: a group forming or an application starting takes a while
        rate = _Rate()
        started_s = time.monotonic()
        steps.begin("main phase")
        workload.start()
        tombstones = _tombstoner(options, target, workload, recorder)
        try:
            while (elapsed_s := time.monotonic() - started_s) < options.time_limit_s:
                for action, package in schedule.due(elapsed_s) if schedule else ():
                    nemesis.apply(action, package)
                    if action == "start" and package == "kill" or action == "stop":
                        net.record_processes(state_path, [n.pid for n in target.nodes if n.running])
                progress(Status("main", elapsed_s, options.time_limit_s, rate.update(recorder),
                                dict(recorder.completions), dict(nemesis.active)))
                time.sleep(TICK_S)
            # ops completed within the main phase; the sends still in flight at its end complete in workload.stop()
            main_ops_per_s = sum(recorder.completions.values()) / (time.monotonic() - started_s)
        finally:
            steps.end("main phase")
            workload.stop_invoking()
            lanes.stop_invoking()
            if pipeline:
                with steps("connect pipeline stops invoking"):
                    pipeline.stop_invoking()
            heal = schedule.heal_all() if schedule else []
            # Sends in flight to a node paused or cut off at the end complete only once it is
            # healed (else they wait out their 120 s send timeout), so the run heals before it
            # waits for them, as Jepsen's generator ends with the nemesis' stop. Transactions
            # are synchronous and end within txn_timeout_s, so they finish against the faults:
            # a node restarted under transactional producers mid-call has left librdkafka's
            # send_offsets_to_transaction blocked far past its timeout, with no open
            # transaction on the broker.
            with steps("transactional lanes stop"):
                lanes.stop_transactional(steps)
            if not options.workload.txn:
                with steps("final heal"):
                    _apply(nemesis, heal)
            with steps("main workload stops"):
                workload.stop()
            if options.workload.txn:
                with steps("final heal"):
                    _apply(nemesis, heal)
            with steps("lanes stop"):
                lanes.stop(steps)
            with steps("clients close"):
                workload.close()
                lanes.close()
        net.record_processes(state_path, [n.pid for n in target.nodes if n.running])
        quiet_until_s = time.monotonic() + options.quiet_s
        while (left_s := quiet_until_s - time.monotonic()) > 0:
            progress(Status("quiet", options.time_limit_s, options.time_limit_s, rate.update(recorder),
                            dict(recorder.completions), {}))
            time.sleep(min(TICK_S, left_s))
        progress(Status("final reads", options.time_limit_s, options.time_limit_s, 0.0,
                        dict(recorder.completions), {}))
        if tombstones:
            with steps("tombstones stop"):
                tombstones.stop()
        if pipeline:
            with steps("connect pipeline closes"):
                pipeline.close(options.final_read_timeout_s)
        observer.stop()  # before the lanes' histories close
        data_dirs = audit.reference_data_dirs(target) if options.target == "reference" else None
        lanes_finished = lanes.finish_in_background(options.final_read_timeout_s, data_dirs, steps)
        with steps("final reads"):
            complete = workload.final_reads(options.final_read_timeout_s)
        with steps("replica audit"):
            replica_audit = audit.audit(target.bootstrap, options.workload.topics, recorder, data_dirs,
                                        properties=options.workload.client_properties)
        with steps("lanes finish"):
            lanes_finished.result()
        history_path = recorder.close()
        result = RunResult(out_dir, mode, mode_reason, dict(recorder.completions), main_ops_per_s, complete,
                           acked_missing_from_final_reads(history_path) if complete else None, workload.failures,
                           replica_audit, lanes.write(out_dir, options.workload))
        _write_results(out_dir, options, result, history_path)
    return result


def _connect_pipeline(options: RunOptions, target: Target, out_dir: Path, lanes) -> ConnectPipeline | None:
    """With --workload connect: the Connect pipeline beside the queue workload, its workers
    killed as often as a fault package flips (CON-1..3, spark_validation/connect.py). In a lanes
    run (--workload all) a pipeline that does not start is a lane skipped, with the reason."""
    if options.workload_name not in ("connect", LANES_WORKLOAD):
        return None
    pipeline = ConnectPipeline(target.bootstrap, out_dir / CONNECT_DIR, ConnectWorkloadOptions(
        kill_interval_s=options.interval_s, replication_factor=options.workload.replication_factor,
        exactly_once=options.workload_name == LANES_WORKLOAD,  # a lanes run checks every guarantee: CON-2 too
        client_properties=tuple(options.workload.client_properties.items())), options.seed)
    from confluent_kafka import KafkaException
    try:
        pipeline.start()
    except (RuntimeError, KafkaException) as e:
        if options.workload_name != LANES_WORKLOAD:
            raise
        for worker in pipeline.workers:
            worker.kill()
        lanes.skip(CONNECT_LANE, f"the Connect pipeline did not start: {e}")
        return None
    return pipeline


def _tombstoner(options: RunOptions, target: Target, workload: Workload, recorder: Recorder):
    """With compaction, tombstones beside the workload's keyed records (RET-1, faults/compaction.py)."""
    if not options.workload.compacted:
        return None
    from faults.compaction import Tombstoner
    return Tombstoner(target.bootstrap, options.workload, recorder, next(workload.next_process), options.seed).start()


def _subscribe_workload() -> type[Workload]:
    from faults.subscribe import SubscribeWorkload
    return SubscribeWorkload


def _apply(nemesis: Nemesis, flips: list[tuple[str, str]]) -> None:
    for action, package in flips:
        nemesis.apply(action, package)


def _log_clients_to(path: Path, cleanup: contextlib.ExitStack) -> None:
    """librdkafka's log lines (connection refused, timeouts, ...) go to a file, not the terminal."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    CLIENT_LOGGER.addHandler(handler)
    CLIENT_LOGGER.propagate = False
    cleanup.callback(CLIENT_LOGGER.removeHandler, handler)
    cleanup.callback(handler.close)


class _Steps:
    """RUN/steps.jsonl: each step of the run, one line as it begins and one as it ends (with its
    seconds), written as the run goes, so that a run ended from outside, or slower than expected,
    shows which step it was in and where its time went. Lanes finish side by side (thread-safe)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.started_s = time.monotonic()
        self.begun: dict[str, float] = {}
        self.lock = threading.Lock()

    def begin(self, step: str) -> None:
        with self.lock:
            self.begun[step] = time.monotonic()
        self._write({"step": step, "event": "begin"})

    def end(self, step: str) -> None:
        with self.lock:
            seconds = time.monotonic() - self.begun.pop(step)
        self._write({"step": step, "event": "end", "seconds": round(seconds, 3)})

    @contextlib.contextmanager
    def __call__(self, step: str):
        self.begin(step)
        yield
        self.end(step)

    def _write(self, line: dict) -> None:
        line = {"at_s": round(time.monotonic() - self.started_s, 3), **line}
        with self.lock, self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")


def unfinished_steps(out_dir: Path) -> list[str]:
    """The steps a run began and did not end (from its steps.jsonl): where a run ended from
    outside was, or where one that failed stopped."""
    path = Path(out_dir) / STEPS_FILE
    open_steps: dict[str, None] = {}
    for line in path.read_text().splitlines() if path.exists() else ():
        entry = json.loads(line)
        if entry["event"] == "begin":
            open_steps[entry["step"]] = None
        else:
            open_steps.pop(entry["step"], None)
    return list(open_steps)


def _threads_on_signals(path: Path, cleanup: contextlib.ExitStack) -> None:
    """A run ended from outside (a demo's time limit, a CI job's) or by a crash inside a client
    library (SIGSEGV, SIGABRT) leaves every thread's stack in the run folder, so that what it was
    waiting on, or doing, can be named afterwards. The dump is made by the interpreter's C signal
    handler, so it is written even while a thread holds the GIL in a blocked library call; the
    SIGTERM handler that unwinds the run still runs after it."""
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        return  # not under `kspec faults run` (which unwinds on SIGTERM): leave the process's handlers alone
    stacks = path.open("w")
    faulthandler.register(signal.SIGTERM, file=stacks, all_threads=True, chain=True)
    was_enabled = faulthandler.is_enabled()
    faulthandler.enable(file=stacks, all_threads=True)
    cleanup.callback(stacks.close)
    cleanup.callback(lambda: faulthandler.enable() if was_enabled else faulthandler.disable())
    cleanup.callback(faulthandler.unregister, signal.SIGTERM)
    cleanup.callback(lambda: path.stat().st_size == 0 and path.unlink())  # nothing dumped: no file


def _toxiproxy(cleanup: contextlib.ExitStack) -> ToxiproxyClient:
    """A real Toxiproxy at TOXIPROXY_URL, else the embedded server; our proxies are removed at the end."""
    url = os.environ.get("TOXIPROXY_URL")
    if not url:
        server = ToxiproxyServer().start()
        cleanup.callback(server.stop)
        url = server.url
    client = ToxiproxyClient(url)
    cleanup.callback(lambda: [client.delete_proxy(name) for name in client.proxies() if name.startswith("kspec-")])
    return client


def _container_spec(options: RunOptions) -> docker_target.ContainerSpec | None:
    """How to run the nodes as containers, when the target is containers: docker, or a TOML with an image."""
    if options.target == "docker":
        return docker_target.reference_spec(options.nodes, options.image, options.broker_properties)
    path = Path(options.target)
    if path.suffix == ".toml" and path.exists():
        with open(path, "rb") as f:
            if "image" in tomllib.load(f):
                return docker_target.spec_from_toml(path, options.image)
    if options.image is not None:
        raise RunError("--image is for containers: --target docker, or a TOML description with an 'image' key")
    return None


def _docker_target(spec: docker_target.ContainerSpec, options: RunOptions, out_dir: Path,
                   cleanup: contextlib.ExitStack) -> Target:
    """Containers made in the engine; removed, with their network, however the run ends."""
    client = docker_target.engine()
    run_name = f"ksf{os.getpid() % 100000}"
    cleanup.callback(docker_target.clean_run, client, run_name)
    target = docker_target.docker_target(spec, options.nodes, out_dir, run_name, client, "clock" in options.nemeses)
    cleanup.callback(target.save_logs)
    return target


def _target(options: RunOptions, out_dir: Path, mode: str, network, toxiproxy) -> Target:
    if options.target == "reference" and options.secure:
        from faults.security import secure_reference_target
        return secure_reference_target(options.nodes, out_dir, mode, network, toxiproxy, options.broker_properties)
    if options.target == "reference":
        return reference_target(options.nodes, out_dir, mode, network, toxiproxy, options.broker_properties)
    path = Path(options.target)
    if options.broker_properties:
        raise TargetError("--set passes properties to the reference nodes; a TOML target sets its own in 'start'")
    if path.suffix != ".toml" or not path.exists():
        raise TargetError(f"--target is 'reference' or an existing .toml file, not {options.target!r}")
    return toml_target(path, out_dir, mode, network, toxiproxy)


def _disks(options: RunOptions, nodes: int, out_dir: Path, run_name: str,
           cleanup: contextlib.ExitStack) -> list[disk.NodeDisk] | None:
    """Each node's data dir on the FUSE layer (power, io) and/or a small tmpfs (disk), mounted now."""
    if not set(options.nemeses) & set(STORAGE_PACKAGES):
        return None
    if os.geteuid() != 0:
        raise RunError("power, disk and io faults mount filesystems (FUSE, tmpfs): run as root")
    state_path = disk.state_path(run_name)
    cleanup.callback(lambda: state_path.unlink(missing_ok=True))
    lazy = bool({"power", "io"} & set(options.nemeses))
    tmpfs_bytes = options.disk_bytes if "disk" in options.nemeses else None
    disks = []
    for index in range(nodes):
        node_disk = disk.NodeDisk(out_dir, index, lazy=lazy, tmpfs_bytes=tmpfs_bytes, state_path=state_path)
        cleanup.callback(node_disk.unmount)
        node_disk.mount()
        disks.append(node_disk)
    return disks


def _clocks(options: RunOptions, target: Target, run_name: str,
            cleanup: contextlib.ExitStack) -> list[clock.NodeClock] | None:
    """With the clock nemesis, every node starts under libfaketime with an offset file of its own."""
    if "clock" not in options.nemeses:
        return None
    if isinstance(target, docker_target.DockerTarget):  # made with the containers, in the run folder
        return target.clocks
    try:
        clocks = [clock.NodeClock(run_name, index) for index in range(len(target.nodes))]
    except clock.ClockUnavailable as e:
        raise RunError(str(e)) from None
    for node, node_clock in zip(target.nodes, clocks):
        node_clock.create()
        cleanup.callback(node_clock.remove)
        if hasattr(node, "wrap"):  # a reference node: the clock goes inside its namespace wrapper
            node.wrap = lambda command, outer=node.wrap, c=node_clock: outer(clock.wrap(c, command))
        else:
            node.command_line = clock.wrap(node_clock, node.command_line)
    return clocks


def _write_results(out_dir: Path, options: RunOptions, result: RunResult, history_path: Path) -> None:
    (out_dir / RUN_FILE).write_text(json.dumps(checker_options(options.workload)))
    results = {
        "history_schema_version": HISTORY_SCHEMA_VERSION,
        "history": history_path.name,
        "options": _options_without_secrets(options),
        "network_mode": result.mode,
        "network_mode_reason": result.mode_reason,
        "completions": result.completions,
        "main_phase_ops_per_s": round(result.ops_per_s, 1),
        "final_reads_complete": result.final_reads_complete,
        "acked_missing_from_final_reads": result.acked_missing,
        "workload_failures": result.workload_failures,
        "replica_audit": result.replica_audit,
        **({"lanes": result.lanes} if result.lanes else {}),
    }
    (out_dir / RESULTS_FILE).write_text(json.dumps(results, indent=2, sort_keys=True))


def _options_without_secrets(options: RunOptions) -> dict:
    from faults.security import without_secrets
    shown = dataclasses.asdict(options)
    shown["client_properties"] = without_secrets(shown["client_properties"])
    shown["workload"]["client_properties"] = without_secrets(shown["workload"]["client_properties"])
    return shown


class _Rate:
    """Completions per second over the last RATE_WINDOW_S."""

    def __init__(self) -> None:
        self.samples: deque[tuple[float, int]] = deque()

    def update(self, recorder: Recorder) -> float:
        now_s, total = time.monotonic(), sum(recorder.completions.values())
        self.samples.append((now_s, total))
        while self.samples and now_s - self.samples[0][0] > RATE_WINDOW_S:
            self.samples.popleft()
        first_s, first_total = self.samples[0]
        return (total - first_total) / (now_s - first_s) if now_s > first_s else 0.0
