"""Helpers for the fault-harness tests: TCP servers inside namespaces, reachability probes, and
the broker processes a run left."""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

from faults import net

TCP_PORT = 7000
CONNECT_TIMEOUT_S = 1.0
_names = itertools.count()


def network_name() -> str:
    """A name no other test (or concurrent run) uses: kt<pid><n>, at most 8 characters."""
    return f"kt{os.getpid() % 10000}{next(_names)}"[:net.NAME_CHARS_MAX]


def start_listeners(network: net.Network) -> list[subprocess.Popen]:
    """A TCP accept loop on TCP_PORT in every node's namespace."""
    processes = []
    for node in range(network.nodes):
        code = (f"import socket\ns = socket.create_server(('{network.node_address(node)}', {TCP_PORT}))\n"
                "print('listening', flush=True)\nwhile True: s.accept()[0].close()")
        process = subprocess.Popen(network.wrap(node, [sys.executable, "-c", code]), stdout=subprocess.PIPE)
        assert process.stdout.readline().strip() == b"listening"
        processes.append(process)
    return processes


def can_connect(network: net.Network, source: int | None, target: int) -> bool:
    """Whether a TCP connect from node source's namespace (None: the host) to target succeeds."""
    code = (f"import socket\nsocket.create_connection(('{network.node_address(target)}', {TCP_PORT}), "
            f"timeout={CONNECT_TIMEOUT_S}).close()")
    command = [sys.executable, "-c", code]
    if source is not None:
        command = network.wrap(source, command)
    return subprocess.run(command, capture_output=True).returncode == 0


def wait_until(predicate, timeout_s: float, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


def brokers_of(out_dir: Path) -> list[int]:
    """pids of broker processes whose command line names out_dir."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"broker" in command and any(str(out_dir).encode() in word for word in command):
                pids.append(int(pid))
        except OSError:
            continue
    return pids
