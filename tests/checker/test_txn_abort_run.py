"""Acceptance: the transactional workload (the lanes run's txn lane) aborts a share of its
transactions once their sends were acknowledged, as a user testing isolation would; with
kspec.bug.serve.aborted.to.read.committed the broker serves those aborted records to its
read_committed consumers, and the checker names TXN-2 violated (G1a) with the aborting op and
the op that read its record as evidence. (Without the switch the same run reads none of them:
tests/faults/test_faults_run.py.)"""
from __future__ import annotations

import pytest

from faults.run import RunOptions, run
from faults.workload import ABORTED_BY_CLIENT, WorkloadOptions
from spark_validation.checker import run_checks
from spark_validation.options import RunOptions as CheckOptions
from spec.history import ops_from_table, read_history

WORKLOAD = WorkloadOptions(concurrency=4, rate_hz=100, txn_timeout_s=3.0, txn=True, txn_abort_p=0.2)


@pytest.mark.timeout(180)
@pytest.mark.guarantee("TXN-2")
def test_aborted_transactions_served_to_read_committed_consumers_are_a_txn_2_violation_naming_the_abort(
        namespaces_available, spark, tmp_path):
    out_dir = tmp_path / "run"
    result = run(RunOptions(nodes=1, nemeses=(), time_limit_s=8, quiet_s=1, network="netns", seed=3,
                            broker_properties={"kspec.bug.serve.aborted.to.read.committed": "true"},
                            workload=WORKLOAD), out_dir)
    assert result.final_reads_complete and not result.workload_failures
    ops = [op for op in ops_from_table(read_history(out_dir / "history.parquet")) if op.type != "invoke"]
    aborted = {op.index for op in ops if op.f == "txn" and op.type == "fail"
               and (op.extra or {}).get("error") == ABORTED_BY_CLIENT}
    assert aborted, "the workload aborted transactions after their sends were acknowledged"
    checked = run_checks(spark, out_dir / "history.parquet", CheckOptions(), checks=("G1a",))
    assert checked.verdict["guarantees"]["TXN-2"]["status"] == "violated", checked.verdict
    rows = [r for r in checked.anomalies.to_pylist() if r["anomaly"] == "G1a"]
    assert rows and all(r["violation"] and r["guarantee"] == "TXN-2" for r in rows)
    assert {r["ops"][0] for r in rows} & aborted, "an aborted transaction is named as the writer"
