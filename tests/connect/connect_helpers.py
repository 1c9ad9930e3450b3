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

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
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
        env = {**os.environ, "PYTHONPATH": REPO}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=log, env=env,
                                            stdin=subprocess.DEVNULL)
        os.set_blocking(self.process.stdout.fileno(), False)
        line, deadline = b"", time.monotonic() + READY_TIMEOUT_S
        while not line.endswith(b"\n"):
            chunk = self.process.stdout.readline()
            line += chunk or b""
            if not chunk:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.kill()
                    raise AssertionError(f"no ready line from {self.command}: {line!r}; see {self.log_path}")
                time.sleep(0.05)
        fields = dict(part.split("=", 1) for part in line.decode().split() if "=" in part)
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
