"""A fault run against SASL_SSL reference nodes (`kspec faults run --secure`): every client the
run makes (the workload's producers and consumers, the epoch observer's and the replica audit's
wire clients) authenticates over TLS, and the checker finds DUR-1 and ORD-1..3 held under kills."""
from __future__ import annotations

import json

import pytest

from faults.run import RunOptions, run
from faults.workload import WorkloadOptions
from spark_validation.checker import run_checks
from spark_validation.options import RunOptions as CheckOptions
from spec.history import ops_from_table, read_history

# Sends keep their 120 s timeout: after a shorter one librdkafka bumps its epoch and re-sends, storing
# duplicates (faults/workload.py), which the final reads see as ORD-3 skips.
WORKLOAD = WorkloadOptions(concurrency=4, rate_hz=60, replication_factor=3)
GUARANTEES = ("DUR-1", "ORD-1", "ORD-2", "ORD-3")
CHECKS = ("lost-write", "unseen", "poll-order", "internal-poll-order", "send-order", "internal-send-order",
          "realtime-order")


@pytest.mark.timeout(180)
@pytest.mark.guarantee(*GUARANTEES)
def test_a_secure_three_node_run_under_kills_holds_dur_1_and_ord(namespaces_available, spark, tmp_path):
    out_dir = tmp_path / "run"
    result = run(RunOptions(nodes=3, nemeses=("kill",), time_limit_s=14, interval_s=3, quiet_s=2,
                            network="netns", seed=3, secure=True, workload=WORKLOAD), out_dir)
    assert result.mode == "netns" and result.final_reads_complete and not result.workload_failures
    results = json.loads((out_dir / "results.json").read_text())
    client = results["options"]["workload"]["client_properties"]
    assert client["security.protocol"] == "SASL_SSL" and client["sasl.password"] == "[hidden]", client
    assert (out_dir / "pki" / "ca.pem").exists()
    assert results["replica_audit"]["unread"] == 0 and results["replica_audit"]["reads"] == 48, results["replica_audit"]
    ops = [op for op in ops_from_table(read_history(out_dir / "history.parquet")) if op.type != "invoke"]
    assert any(op.f == "start-kill" for op in ops)
    assert sum(op.f == "leader-epochs" and op.type == "ok" for op in ops) >= 5  # the observer got through SASL
    assert sum(op.f == "send" and op.type == "ok" for op in ops) > 100
    checked = run_checks(spark, out_dir / "history.parquet", CheckOptions(), checks=CHECKS)
    statuses = {g: checked.verdict["guarantees"].get(g, {}).get("status") for g in GUARANTEES}
    assert statuses == dict.fromkeys(GUARANTEES, "held"), (statuses, checked.anomalies.to_pylist()[:5])
