"""Start and stop `kspec broker` as an OS process: for tests, the conformance kit and the demo.

    with BrokerProcess(data_dir) as broker:
        client(bootstrap_servers=broker.bootstrap)
        broker.kill()      # kill -9
        broker.start()     # again, on the same data dir and the same port

The first start listens on a free port (or the one given); restarts reuse the port the
broker last had, so clients reconnect to the same address. The process's stderr (its log)
goes to `data_dir/../<name>.stderr.log` unless a file is given.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


class BrokerNotReady(RuntimeError):
    pass


class BrokerProcess:
    def __init__(self, data_dir: str, *, listen: str = "127.0.0.1:0", node_id: int = 0,
                 overrides: dict[str, str] | None = None, stderr_path: str | None = None) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.listen = listen
        self.node_id = node_id
        self.overrides = dict(overrides or {})
        self.stderr_path = stderr_path or self.data_dir.rstrip("/") + ".stderr.log"
        self.process: subprocess.Popen | None = None
        self.bootstrap: str | None = None  # HOST:PORT once ready

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "kspec.cli", "broker", "--listen", self.listen,
                   "--data-dir", self.data_dir, "--node-id", str(self.node_id)]
        for key, value in sorted(self.overrides.items()):
            command += ["--set", f"{key}={value}"]
        return command

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> str:
        """Start the process, wait for its ready line, return the bootstrap address."""
        assert not self.running, "already running"
        with open(self.stderr_path, "ab") as stderr:
            self.process = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=stderr,
                                            stdin=subprocess.DEVNULL)
        line = self._read_ready_line(timeout_s)
        if "ready" not in line or "bootstrap=" not in line:
            self.kill()
            raise BrokerNotReady(f"no ready line from {' '.join(self.command())}: {line!r}; see {self.stderr_path}")
        self.bootstrap = line.split("bootstrap=", 1)[1].split()[0]
        self.listen = self.bootstrap  # restarts come back on the same port
        return self.bootstrap

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait: a clean shutdown. Returns the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        finally:
            self.process.stdout.close()

    def kill(self) -> None:
        """kill -9: no flush, no clean-shutdown marker."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process.stdout.close()

    def restart(self) -> str:
        self.stop()
        return self.start()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> BrokerProcess:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self.running:
            self.stop()

    def _read_ready_line(self, timeout_s: float) -> str:
        """The first stdout line, or '' if none came within timeout_s or the process ended."""
        assert self.process is not None and self.process.stdout is not None
        deadline = time.monotonic() + timeout_s
        os.set_blocking(self.process.stdout.fileno(), False)
        line = b""
        while not line.endswith(b"\n") and time.monotonic() < deadline:
            chunk = self.process.stdout.readline()
            if chunk:
                line += chunk
            elif self.process.poll() is not None:
                break
            else:
                time.sleep(0.01)
        return line.decode(errors="replace").strip()
