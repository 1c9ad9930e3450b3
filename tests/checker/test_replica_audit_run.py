"""Acceptance: a 3-node reference fault run with leader kills, partitions and malformed traffic
audits every replica after its final reads, observes leader epochs throughout, and the checker
finds REP-1, REP-2, VIS-2 and PRO-1 held (checked, not merely unviolated)."""
from __future__ import annotations

import json

import pytest

from faults.run import RunOptions, run
from faults.workload import WorkloadOptions
from spark_validation.checker import run_checks
from spark_validation.options import RunOptions as CheckOptions
from spec.history import ops_from_table, read_history

WORKLOAD = WorkloadOptions(concurrency=4, rate_hz=100, send_timeout_s=5.0, replication_factor=3)


@pytest.mark.timeout(300)
@pytest.mark.guarantee("REP-1", "REP-2", "VIS-2", "PRO-1")
def test_a_three_node_run_audits_every_replica_and_holds_rep_1_rep_2_vis_2_pro_1(namespaces_available, spark,
                                                                                  tmp_path):
    out_dir = tmp_path / "run"
    result = run(RunOptions(nodes=3, nemeses=("kill", "partition", "malformed"), time_limit_s=16, interval_s=2,
                            quiet_s=2, network="netns", seed=5, workload=WORKLOAD), out_dir)
    assert result.final_reads_complete and not result.workload_failures
    audit = json.loads((out_dir / "results.json").read_text())["replica_audit"]
    # 8 partitions x 3 replicas, each read by a follower fetch and from its segment files
    assert audit["methods"] == ["follower-fetch", "segment-files"] and audit["reads"] == 48, audit
    assert audit["unread"] == 0, audit
    ops = [op for op in ops_from_table(read_history(out_dir / "history.parquet")) if op.type != "invoke"]
    malformed = [op.extra["value"]["nodes"] for op in ops if op.f == "start-malformed"]
    assert malformed and all(node["frames"] > 0 for burst in malformed for node in burst.values()), malformed
    assert sum(op.f == "leader-epochs" and op.type == "ok" for op in ops) >= 10
    checked = run_checks(spark, out_dir / "history.parquet", CheckOptions(), checks=("inconsistent-offsets", "replicas"))
    statuses = {g: checked.verdict["guarantees"].get(g, {}).get("status") for g in ("REP-1", "REP-2", "VIS-2", "PRO-1")}
    assert statuses == dict.fromkeys(statuses, "held"), (statuses, checked.verdict, checked.anomalies.to_pylist()[:5])
    assert checked.verdict["unchecked"] == {}
