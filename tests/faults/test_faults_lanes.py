"""`kspec faults run --workload all` then `kspec check`, through the real CLI: a 3-node reference
run with kills and partitions (and malformed traffic) in which every lane runs side by side, and
one merged verdict that gives every guarantee a fault run can check a status of held or violated.

The fast test leaves the streams lane out (KSPEC_STREAMS_PYTHON names this Python without its
site-packages, so without Quix Streams: the lane is skipped and says why): the application's start and catch-up take a
minute here. The soak test (`make bench`) runs all six lanes, streams too."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faults.lanes import LANE_CHECKS, LANES_DIR, LANES_FILE
from spark_validation.lanes import FAULT_RUN_UNCHECKED
from spec.catalogue import CATALOGUE

ROOT = Path(__file__).resolve().parents[2]
TIME_LIMIT_S = 15
EOS = ("EOS-1", "EOS-2")


def kspec(*arguments: str, env: dict | None = None, timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kspec.cli", *arguments], capture_output=True, text=True,
                          timeout=timeout_s, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def lanes_run(out: Path, env: dict | None = None, options: tuple[str, ...] = ()) -> dict:
    """Run (with more options, e.g. a bug switch) and check; the merged verdict."""
    run = kspec("faults", "run", "--nodes", "3", "--nemesis", "kill,partition,malformed", "--interval", "4",
                "--time-limit", str(TIME_LIMIT_S), "--quiet", "2", "--seed", "4", "--workload", "all",
                "--out", str(out), *options, env=env, timeout_s=420)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["final_reads_complete"] and not results["workload_failures"], results
    for lane, summary in results["lanes"].items():  # the main lane's figures are the run's, above
        assert lane == "main" or summary.get("skipped") or (summary["final_reads_complete"] and not summary["workload_failures"]), \
            (lane, summary)
    check = kspec("check", str(out), timeout_s=900)
    assert check.returncode in (0, 1), check.stderr[-3000:]
    verdict = json.loads((out / "check" / "verdict.json").read_text())
    assert verdict["valid"] == (check.returncode == 0)
    return verdict


def assert_every_guarantee_has_a_status(verdict: dict, unchecked: set[str]) -> None:
    statuses = {g: e["status"] for g, e in verdict["guarantees"].items()}
    assert set(statuses.values()) <= {"held", "violated"}
    assert set(verdict["unchecked"]) == unchecked, verdict["unchecked"]
    assert set(statuses) == set(CATALOGUE) - unchecked, "every other guarantee is held or violated"
    for lane, guarantees in LANE_CHECKS.items():  # each lane checked what it is there for
        for guarantee_id in set(guarantees) - unchecked:  # the Connect pipeline's findings are the main lane's
            assert {"connect": "main"}.get(lane, lane) in verdict["guarantees"][guarantee_id]["lanes"], guarantee_id


@pytest.mark.soak  # three minutes on an idle 2-core machine: make bench
@pytest.mark.timeout(900)
def test_one_run_of_every_workload_gives_every_guarantee_a_status(namespaces_available, tmp_path):
    python = tmp_path / "python-without-site-packages"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    python.chmod(0o755)
    verdict = lanes_run(tmp_path / "run", env={"KSPEC_STREAMS_PYTHON": str(python)})
    assert_every_guarantee_has_a_status(verdict, set(FAULT_RUN_UNCHECKED) | set(EOS))
    assert all(verdict["unchecked"][g].startswith("the streams lane was skipped") for g in EOS)
    lanes = json.loads((tmp_path / "run" / LANES_FILE).read_text())["lanes"]
    assert lanes["streams"]["dir"] is None and "quixstreams" in lanes["streams"]["skipped"]
    for lane in ("txn", "groups", "acks1", "compact", "auth"):  # each a complete run of its own, on its own topics
        assert (tmp_path / "run" / LANES_DIR / lane / "history.parquet").exists()
        assert (tmp_path / "run" / "check" / "lanes" / lane / "verdict.json").exists()
    assert verdict["lanes"]["acks1"]["options"]["acks"] == "1"
    assert verdict["guarantees"]["DUR-1"]["lanes"] == [lane for lane in verdict["guarantees"]["DUR-1"]["lanes"]
                                                       if lane != "acks1"], "acks=1 does not judge DUR-1"


@pytest.mark.soak  # two to five minutes here: the Quix Streams application starts, is killed, catches up
@pytest.mark.timeout(1200)
def test_one_run_with_the_streams_lane_checks_exactly_once_too(namespaces_available, tmp_path):
    verdict = lanes_run(tmp_path / "run")
    assert_every_guarantee_has_a_status(verdict, set(FAULT_RUN_UNCHECKED))
    assert verdict["guarantees"]["EOS-1"]["lanes"] == ["streams"]


@pytest.mark.soak  # two minutes here; tests/checker/test_txn_abort_run.py makes the txn lane's run alone in make test
@pytest.mark.timeout(900)
def test_a_broker_serving_aborted_records_to_read_committed_fails_the_merged_verdict_on_txn_2(
        namespaces_available, tmp_path):
    """The txn lane aborts a share of its transactions after their sends were acknowledged; with
    kspec.bug.serve.aborted.to.read.committed its read_committed consumers read them (G1a)."""
    python = tmp_path / "python-without-site-packages"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    python.chmod(0o755)
    verdict = lanes_run(tmp_path / "run", env={"KSPEC_STREAMS_PYTHON": str(python)},
                        options=("--set", "kspec.bug.serve.aborted.to.read.committed=true"))
    assert not verdict["valid"]
    txn_2 = verdict["guarantees"]["TXN-2"]
    assert txn_2["status"] == "violated" and txn_2["violated_in"] == ["txn"] and txn_2["anomalies"]["G1a"] > 0
