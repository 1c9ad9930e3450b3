"""`kspec check --master spark://...` on a real Spark standalone cluster (a Master and two Workers
started from the installed PySpark): the same verdict and evidence as Spark local[2]."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from .standalone import StandaloneCluster
from .test_jepsen_import import findings

FIXTURES = Path(__file__).parent / "fixtures"
CHECK_TIMEOUT_S = 400  # about 40 s on an idle machine; the generous deadline is for a loaded one


@pytest.mark.timeout(CHECK_TIMEOUT_S + 200)
def test_check_on_a_standalone_cluster_gives_the_local_verdict_and_evidence(jepsen_anomalies, tmp_path):
    edn = tmp_path / "history.edn"
    shutil.copy(FIXTURES / "jepsen-anomalies.edn", edn)
    out = tmp_path / "cluster-check"
    with StandaloneCluster(tmp_path / "cluster", workers=2) as cluster:
        assert len(cluster.state()["workers"]) == 2
        run = subprocess.run([sys.executable, "-m", "kspec.cli", "check", str(edn), "--master", cluster.master_url,
                              "--out", str(out)], capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
        applications = cluster.state()["completedapps"] + cluster.state()["activeapps"]
    assert run.returncode == 1, run.stderr[-2000:]  # the history has anomalies
    assert any(app["name"] == "kspec-check" for app in applications), "the check ran as a cluster application"
    on_cluster = SimpleNamespace(anomalies=pq.read_table(out / "anomalies.parquet"),
                                 verdict=json.loads((out / "verdict.json").read_text()))
    assert findings(on_cluster) == findings(jepsen_anomalies[1])
