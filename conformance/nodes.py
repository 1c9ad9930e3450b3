"""Stop, start, pause and resume the nodes of a local reference cluster from outside, so the
suite can kill leaders and freeze replicas.

The suite controls a target's nodes through commands, templates with {node_id}
(--node-stop-command, --node-start-command, --node-pause-command, --node-resume-command).
For a reference cluster started by LocalCluster they are:

    python -m conformance.nodes stop DIR {node_id}     # kill -9 the node
    python -m conformance.nodes start DIR {node_id}    # the same command line and port; returns once ready
    python -m conformance.nodes pause DIR {node_id}    # SIGSTOP: returns once the process is stopped
    python -m conformance.nodes resume DIR {node_id}   # SIGCONT: returns once it runs again

A paused node keeps its sockets: peers and clients can still connect, and what they send
waits in the kernel until the node resumes, as with a long garbage-collection pause.

LocalCluster(DIR, nodes, overrides, controllers=M) starts `kspec broker` processes (the
command lines of reference.process.ClusterProcess: N combined-mode nodes, or with M > 0, M
controller-only nodes 3001.. and N broker-only nodes 1..N) detached from the caller, and keeps each
node's command line in DIR/node<N>.json, its pid in DIR/node<N>.pid and its output in
DIR/node<N>.log, which is all the commands need. A node started by a command outlives
the command; LocalCluster.stop() stops whichever process holds each node's pid file.
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
POLL_S = 0.05
PAUSED_STATE = "T"  # /proc/PID/stat's state of a process stopped by a signal
VERBS = ("stop", "start", "pause", "resume")
READY_MARK = "bootstrap="  # the broker's ready line: "... ready ... bootstrap=HOST:PORT"


def _paths(base_dir: Path, node_id: int) -> tuple[Path, Path, Path]:
    stem = base_dir / f"node{node_id}"
    return stem.with_suffix(".json"), stem.with_suffix(".pid"), stem.with_suffix(".log")


def _state(pid: int) -> str | None:
    """The process's state letter from /proc (R, S, T for stopped, Z for zombie, ...), None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a node started by a command that
    exited is nobody's child here, so it may linger as a zombie until something reaps it)."""
    return _state(pid) not in (None, "Z")


def _pid(base_dir: Path, node_id: int) -> int | None:
    _, pid_path, _ = _paths(base_dir, node_id)
    return int(pid_path.read_text()) if pid_path.exists() else None


def start_node(base_dir: Path, node_id: int, timeout_s: float = READY_TIMEOUT_S) -> str:
    """Start node_id from its recorded command line, detached; return its bootstrap address once ready."""
    command_path, pid_path, log_path = _paths(base_dir, node_id)
    pid = _pid(base_dir, node_id)
    if pid is not None and _alive(pid):
        raise RuntimeError(f"node {node_id} is running (pid {pid})")
    if not command_path.exists():
        raise RuntimeError(f"no node {node_id} in {base_dir} ({command_path.name} is missing): start the cluster "
                           f"with `kspec cluster --nodes N --data-dir {base_dir}` first")
    command = json.loads(command_path.read_text())
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    pid_path.write_text(str(process.pid))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        for line in log_path.read_text(errors="replace").splitlines():
            if READY_MARK in line:
                return line.split(READY_MARK, 1)[1].split()[0]
        time.sleep(POLL_S)
    process.kill()
    raise RuntimeError(f"node {node_id} not ready within {timeout_s:.0f} s: {shlex.join(command)}; see {log_path}")


def stop_node(base_dir: Path, node_id: int, sig: int = signal.SIGKILL, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Send sig to node_id and wait until its process is gone (a paused node is resumed to take it)."""
    pid = _pid(base_dir, node_id)
    if pid is None or not _alive(pid):
        return
    os.kill(pid, sig)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + timeout_s
    while _alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(POLL_S)


def pause_node(base_dir: Path, node_id: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGSTOP node_id and wait until the kernel reports it stopped."""
    _signal_until(base_dir, node_id, signal.SIGSTOP, lambda state: state == PAUSED_STATE, timeout_s)


def resume_node(base_dir: Path, node_id: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGCONT node_id and wait until it runs again."""
    _signal_until(base_dir, node_id, signal.SIGCONT, lambda state: state != PAUSED_STATE, timeout_s)


def _signal_until(base_dir: Path, node_id: int, sig: int, reached, timeout_s: float) -> None:
    pid = _pid(base_dir, node_id)
    if pid is None or not _alive(pid):
        raise RuntimeError(f"node {node_id} is not running")
    os.kill(pid, sig)
    deadline = time.monotonic() + timeout_s
    while not reached(_state(pid)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"node {node_id} (pid {pid}) still in state {_state(pid)} {timeout_s:.0f} s after "
                               f"{signal.Signals(sig).name}")
        time.sleep(POLL_S)


class LocalCluster:
    """A reference cluster whose nodes the commands above can control."""

    def __init__(self, base_dir: str, nodes: int = 3, overrides: dict[str, str] | None = None, *,
                 controllers: int = 0, base_port: int | None = None) -> None:
        from reference.process import ClusterProcess  # only for the command lines and addresses

        self.base_dir = Path(base_dir)
        self.layout = ClusterProcess(base_dir, nodes, controllers=controllers, base_port=base_port,
                                     overrides=overrides)
        self.node_ids = list(self.layout.nodes)  # controllers first: brokers register with their quorum
        self.client_bootstrap: str | None = None  # the brokers' client listeners, when not the first ones
        self.client_config: dict[str, str] = {}  # client properties for them (security.protocol, sasl.*, ssl.*)

    @property
    def bootstrap(self) -> str:
        return self.layout.bootstrap

    def pid(self, node_id: int) -> int | None:
        return _pid(self.base_dir, node_id)

    def node_command(self, node_id: int) -> list[str]:
        """The `kspec broker` command line of node_id."""
        return self.layout.nodes[node_id].command()

    def command(self, verb: str) -> str:
        """The --node-<verb>-command template for this cluster (verb: stop, start, pause, resume)."""
        assert verb in VERBS, verb
        return shlex.join([sys.executable, "-m", "conformance.nodes", verb, str(self.base_dir)]) + " {node_id}"

    def start(self) -> str:
        for node_id in self.node_ids:
            command_path, _, _ = _paths(self.base_dir, node_id)
            command_path.write_text(json.dumps(self.node_command(node_id)))
            start_node(self.base_dir, node_id)
        self.wait_ready()
        return self.bootstrap

    def metadata(self):
        """The cluster's Metadata as confluent-kafka sees it, or None when no node answers."""
        from reference.process import cluster_metadata
        return cluster_metadata(self.client_bootstrap or self.bootstrap, config=self.client_config)

    def controller_id(self) -> int:
        """The active controller (the quorum's Raft leader, by DescribeQuorum), -1 during an
        election. Metadata's ControllerId would name a live broker then (KIP-590 forwarding)."""
        from conformance import sasl
        from reference.process import QUORUM_ASK_TIMEOUT_S, active_controller_id
        addresses = (self.client_bootstrap or ",".join(self.layout.addresses[n] for n in self.node_ids)).split(",")
        found = active_controller_id(
            addresses, lambda address: sasl.connect(address, self.client_config, timeout_s=QUORUM_ASK_TIMEOUT_S))
        return -1 if found is None else found

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until every broker is registered, a controller is known and every partition has a leader."""
        from reference.process import cluster_ready
        deadline = time.monotonic() + timeout_s
        while True:
            if cluster_ready(self.metadata(), len(self.layout.broker_ids)):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster {self.bootstrap} not ready within {timeout_s:.0f} s")
            time.sleep(POLL_S)

    def stop(self) -> None:
        for node_id in self.node_ids:
            stop_node(self.base_dir, node_id, signal.SIGTERM)

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in VERBS or not argv[2].isdigit():
        print(f"usage: python -m conformance.nodes {{{'|'.join(VERBS)}}} DIR NODE_ID", file=sys.stderr)
        return 2
    verb, base_dir, node_id = argv[0], Path(argv[1]), int(argv[2])
    try:
        if verb == "start":
            print(start_node(base_dir, node_id))
        else:
            {"stop": stop_node, "pause": pause_node, "resume": resume_node}[verb](base_dir, node_id)
    except RuntimeError as e:  # a node that is not there, or not in the state the verb needs
        print(f"conformance.nodes {verb}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
