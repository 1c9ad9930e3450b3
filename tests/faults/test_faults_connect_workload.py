"""Kafka Connect under faults (`kspec faults run --workload connect`): a FileStreamSource ->
topic -> FileStreamSink pipeline on two distributed Connect workers runs beside the queue
workload while brokers and workers are killed; `kspec check` of the run folder checks the
pipeline's history too (CON-1, CON-3; CON-2 stays unchecked at least once)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faults.connect_workload import CONNECT_DIR
from faults.run import RunOptions, run
from faults.workload import WorkloadOptions
from faults_helpers import brokers_of

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.mark.soak  # a 25 s run on 3 nodes, two Connect workers and a Spark check: about two minutes
@pytest.mark.guarantee("CON-1", "CON-3")
@pytest.mark.timeout(600)
def test_a_connect_pipeline_beside_the_queue_workload_loses_no_line_under_broker_and_worker_kills(
        namespaces_available, tmp_path):
    out_dir = tmp_path / "run"
    result = run(RunOptions(nodes=3, nemeses=("kill", "partition"), time_limit_s=25, interval_s=5, quiet_s=2,
                            network="netns", seed=1, workload=WorkloadOptions(concurrency=4, rate_hz=100,
                                                                              replication_factor=3),
                            workload_name="connect"), out_dir)
    assert result.final_reads_complete and not result.workload_failures, result
    assert brokers_of(out_dir) == []
    pipeline = json.loads((out_dir / CONNECT_DIR / "connect.json").read_text())
    assert pipeline["kills"] and pipeline["lines"] > 0, pipeline
    assert all("restarted_ms" in kill for kill in pipeline["kills"])
    checked = subprocess.run([sys.executable, "-m", "kspec.cli", "check", str(out_dir)], capture_output=True,
                             text=True, env={**os.environ, "PYTHONPATH": str(REPOSITORY)}, timeout=600)
    assert checked.returncode in (0, 1), checked.stderr[-3000:]
    verdict = json.loads((out_dir / "check" / "verdict.json").read_text())
    assert verdict["connect"]["records"]["source"] == pipeline["lines"]
    assert verdict["guarantees"]["CON-1"]["status"] == "held", checked.stdout[-3000:]
    assert verdict["guarantees"]["CON-3"]["status"] == "held", checked.stdout[-3000:]
    assert "CON-2" in verdict["unchecked"]
