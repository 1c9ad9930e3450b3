"""A Spark standalone cluster on this machine from the installed PySpark: one Master and N Workers
(`spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`), bound to 127.0.0.1
on free ports, small cores and memory. Used by the cluster test and the checker benchmark.

    with StandaloneCluster(workers=2, work_dir=tmp) as cluster:
        subprocess.run(["kspec", "check", history, "--master", cluster.master_url])

Workers get PYTHONPATH (the executors' Python workers import spark_validation from it, as
`--py-files` would ship it to a remote cluster). Each process runs in its own session and is
stopped, with the executors it started, by its process group on exit.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
REGISTER_TIMEOUT_S = 120.0  # a loaded machine starts a JVM slowly
STOP_TIMEOUT_S = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandaloneCluster:
    def __init__(self, work_dir: Path, workers: int = 2, worker_cores: int = 1, worker_memory: str = "1g",
                 python_path: str | None = None):
        self.work_dir = work_dir
        self.workers, self.worker_cores, self.worker_memory = workers, worker_cores, worker_memory
        self.port, self.webui_port = free_port(), free_port()
        self.python_path = python_path or str(Path(__file__).resolve().parents[2])
        self.processes: list[subprocess.Popen] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def __enter__(self) -> "StandaloneCluster":
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", str(self.port), "--webui-port", str(self.webui_port))
            for n in range(self.workers):
                worker_dir = self.work_dir / f"worker-{n}"
                worker_dir.mkdir(parents=True, exist_ok=True)
                self._start(f"worker-{n}", "org.apache.spark.deploy.worker.Worker", self.master_url,
                            "--host", "127.0.0.1", "--port", str(free_port()), "--webui-port", str(free_port()),
                            "--cores", str(self.worker_cores), "--memory", self.worker_memory,
                            "--work-dir", str(worker_dir))
            self._wait_for_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start(self, name: str, main_class: str, *args: str) -> None:
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_LOG_DIR": str(self.work_dir / "logs"), "PYSPARK_PYTHON": sys.executable,
               "PYTHONPATH": self.python_path}
        log = open(self.work_dir / f"{name}.log", "wb")
        self.processes.append(subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), main_class, *args],
                                               stdout=log, stderr=subprocess.STDOUT, env=env,
                                               start_new_session=True))
        log.close()

    def state(self) -> dict:
        """The Master's view of the cluster (its web UI's /json)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json", timeout=5) as response:
            return json.load(response)

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + REGISTER_TIMEOUT_S
        while True:
            for p in self.processes:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[1]} exited with {p.returncode}; see {self.work_dir}/*.log")
            try:
                alive = [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]
                if len(alive) == self.workers:
                    return
            except (urllib.error.URLError, OSError, ValueError):
                pass  # the Master's web UI is not up yet
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.workers} workers did not register within {REGISTER_TIMEOUT_S} s; "
                                   f"see {self.work_dir}/*.log")
            time.sleep(0.5)

    def stop(self) -> None:
        for p in reversed(self.processes):  # workers first: each stops its executors
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(self.processes):
            try:
                p.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)  # what is left of its group: a hung JVM, an executor
            except ProcessLookupError:
                pass
            p.wait()
        self.processes = []
