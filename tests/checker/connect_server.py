"""A Spark Connect server on this machine from the installed PySpark (the class
sbin/start-connect-server.sh starts, run in the foreground by spark-submit), bound to
127.0.0.1 on a free port, running its queries on local[2].

    with ConnectServer(work_dir=tmp) as server:
        subprocess.run(["kspec", "check", history, "--remote", server.url])

The server's Python workers import spark_validation from PYTHONPATH (the project root). It runs
in its own session and is stopped, with its Python workers, by its process group on exit.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .standalone import SPARK_HOME, STOP_TIMEOUT_S, free_port

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT_S = 180.0  # a JVM with Spark and gRPC starts in 15-30 s on an idle machine


class ConnectServer:
    def __init__(self, work_dir: Path, master: str = "local[2]"):
        self.work_dir, self.master = work_dir, master
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def __enter__(self) -> "ConnectServer":
        self.work_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
               "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        with open(self.work_dir / "connect-server.log", "wb") as log:
            self.process = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", self.master,
                 "--conf", f"spark.connect.grpc.binding.port={self.port}",
                 "--conf", "spark.connect.grpc.binding.address=127.0.0.1", "--conf", "spark.ui.enabled=false",
                 "--conf", f"spark.local.dir={self.work_dir}"],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.work_dir, start_new_session=True)
        try:
            self._wait_for_port()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wait_for_port(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Connect server exited with {self.process.returncode}; "
                                   f"see {self.work_dir}/connect-server.log")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Connect server did not listen within {START_TIMEOUT_S} s; "
                                   f"see {self.work_dir}/connect-server.log")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # what is left of its group: Python workers
        except ProcessLookupError:
            pass
        self.process.wait()
        self.process = None
