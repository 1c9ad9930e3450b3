"""The full conformance suite (every client, thorough tests) against kspec's reference broker (one
node, and a 3-node cluster the suite may stop, start, pause and resume) and against librdkafka's
mock cluster as shipped, through `kspec conformance`.

Writes the published matrices, reports/conformance/reference/, reference-cluster/ and mock/
(conformance.html, conformance.json, junit.xml), and prints each run's duration and totals.
The reference must pass (skips only where it lacks a feature); the mock must fail on its gaps.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conformance.mock_cluster import MockCluster
from conformance.nodes import VERBS as NODE_VERBS
from conformance.nodes import LocalCluster
from reference.process import BrokerProcess

REPORTS_DIR = Path(__file__).resolve().parent.parent / "reports" / "conformance"
RUN_TIMEOUT_S = 1200


def run(name: str, bootstrap: str, *options: str) -> dict:
    out_dir = REPORTS_DIR / name
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kspec.cli", "conformance", "--bootstrap-servers", bootstrap,
                           "--report", str(out_dir), "--junit-xml", str(out_dir / "junit.xml"), *options],
                          timeout=RUN_TIMEOUT_S, capture_output=True, text=True)
    elapsed_s = time.monotonic() - started
    totals = json.loads((out_dir / "conformance.json").read_text())["totals"]
    print(f"{name}: exit {done.returncode}, {elapsed_s:.0f} s, {totals['passed']} passed, {totals['failed']} failed, "
          f"{totals['skipped']} skipped -> {out_dir / 'conformance.html'}", flush=True)
    return {"exit": done.returncode, **totals}


def main() -> int:
    with tempfile.TemporaryDirectory() as data_dir, BrokerProcess(str(Path(data_dir) / "broker")) as broker:
        reference = run("reference", broker.bootstrap)
    with tempfile.TemporaryDirectory() as data_dir, LocalCluster(data_dir, 3) as cluster:
        clustered = run("reference-cluster", cluster.bootstrap,
                        *[f"--node-{verb}-command={cluster.command(verb)}" for verb in NODE_VERBS])
    with MockCluster(3, as_shipped=True) as mock:
        mocked = run("mock", mock.bootstrap)
    return 0 if reference["failed"] == 0 and clustered["failed"] == 0 and mocked["failed"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
