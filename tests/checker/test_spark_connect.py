"""`kspec check --remote sc://...` through a real Spark Connect server (started from the installed
PySpark): the Jepsen import and every check run as Connect DataFrame operations and give the
verdict and evidence of Spark local[2]."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from .connect_server import START_TIMEOUT_S, ConnectServer
from .standalone import free_port
from .test_jepsen_import import findings

FIXTURES = Path(__file__).parent / "fixtures"
CHECK_TIMEOUT_S = 400  # about 30 s on an idle machine; the generous deadline is for a loaded one


@pytest.mark.timeout(START_TIMEOUT_S + CHECK_TIMEOUT_S + 60)
def test_check_through_spark_connect_gives_the_local_verdict_and_evidence(jepsen_anomalies, tmp_path):
    edn = tmp_path / "history.edn"
    shutil.copy(FIXTURES / "jepsen-anomalies.edn", edn)
    out = tmp_path / "connect-check"
    with ConnectServer(tmp_path / "server") as server:
        run = subprocess.run([sys.executable, "-m", "kspec.cli", "check", str(edn), "--remote", server.url,
                              "--out", str(out)], capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
    assert run.returncode == 1, run.stderr[-2000:]  # the history has anomalies
    assert f"on {server.url}" in run.stderr
    through_connect = SimpleNamespace(anomalies=pq.read_table(out / "anomalies.parquet"),
                                      verdict=json.loads((out / "verdict.json").read_text()))
    assert findings(through_connect) == findings(jepsen_anomalies[1])


def test_a_remote_that_is_not_a_connect_url_is_one_line_and_exit_2(tmp_path):
    run = subprocess.run([sys.executable, "-m", "kspec.cli", "check", str(FIXTURES / "jepsen-clean.edn"),
                          "--remote", "spark://127.0.0.1:7077", "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == ["kspec check: --remote spark://127.0.0.1:7077: expected a Spark "
                                               "Connect URL, sc://HOST:PORT"]
    assert not (tmp_path / "out").exists()


def test_a_connect_server_that_is_not_there_is_one_line_and_exit_2(tmp_path):
    remote = f"sc://127.0.0.1:{free_port()}"  # nothing listens there
    run = subprocess.run([sys.executable, "-m", "kspec.cli", "check", str(FIXTURES / "jepsen-clean.edn"),
                          "--remote", remote, "--out", str(tmp_path / "out")], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kspec check: cannot reach the Spark Connect server at {remote}")
    assert not (tmp_path / "out").exists()
