"""`kspec faults run --workload mirror`: two single-node reference clusters and `kspec mirror`
between them, the link between the clusters cut and leaders killed on either side while the
mirror is killed with -9 and restarted; `kspec check RUN` reports MIR-1, MIR-2 and MIR-3 by id.
A mirror with kspec.bug.mirror.commit.before.ack (progress written before the copies are
acknowledged) loses records across its kills, and the check says MIR-1 is violated."""
from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from faults import net
from faults.mirror_workload import CHECKPOINTS_SCHEMA
from faults.mirror_run import run_mirror as run
from faults.run import RunOptions
from faults.workload import WorkloadOptions
from spark_validation.cli import check


@pytest.fixture(autouse=True)
def namespaces_available() -> None:
    try:
        net.check_capability()
    except net.NetworkUnavailable as e:
        pytest.skip(str(e))


def mirror_run(out, nemeses=("partition", "kill"), time_limit_s=15.0, interval_s=3.0, **mirror_properties):
    options = RunOptions(nodes=1, nemeses=nemeses, time_limit_s=time_limit_s, interval_s=interval_s,
                         quiet_s=0.0, final_read_timeout_s=90.0, workload=WorkloadOptions(rate_hz=150.0),
                         workload_name="mirror", mirror_properties=mirror_properties)
    result = run(options, out)
    assert result.final_reads_complete, result.workload_failures
    assert result.completions["mirror-kill"] >= 1 and result.completions["send-ok"] > 1000
    return result


def kspec_check(spark, out):
    """`kspec check OUT` (in this process, on the tests' Spark session): exit code, output, verdict."""
    checked = CliRunner().invoke(check, [str(out)])
    return checked.exit_code, checked.output, json.loads((out / "check" / "verdict.json").read_text())


@pytest.fixture(scope="module")
def at_least_once_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("alo") / "run"
    mirror_run(out)
    return out


@pytest.mark.guarantee("MIR-1", "MIR-3")
def test_mirror_across_a_cut_link_and_killed_leaders_loses_nothing_and_translates_safely(spark, at_least_once_run):
    out = at_least_once_run
    timeline = [json.loads(line) for line in (out / "nemesis.jsonl").read_text().splitlines()]
    assert {(e["action"], e["package"]) for e in timeline} >= {("start", "partition"), ("stop", "partition")}
    exit_code, output, verdict = kspec_check(spark, out)
    assert exit_code == 0, output
    assert verdict["guarantees"]["MIR-1"]["status"] == "held"
    assert verdict["guarantees"]["MIR-3"]["status"] == "held" and verdict["records"]["checkpoints"] > 0
    assert verdict["guarantees"]["MIR-2"]["status"] == "not checked"  # at least once
    assert "MIR-1 held" in output and "MIR-3 held" in output


@pytest.mark.guarantee("MIR-3")
def test_a_checkpoint_translated_past_unconsumed_records_violates_mir3(spark, at_least_once_run, tmp_path):
    """The run's history with one checkpoint moved: the group's first committed offset translated
    to the end of its remote partition, past the copies of every record the group had not read."""
    tampered = tmp_path / "tampered"
    shutil.copytree(at_least_once_run, tampered, ignore=shutil.ignore_patterns("source", "target", "check"))
    checkpoints = pq.read_table(tampered / "mirror-checkpoints.parquet").to_pylist()
    target = pq.read_table(tampered / "mirror-target.parquet").to_pylist()
    moved = min(checkpoints, key=lambda c: c["upstream"])
    moved["downstream"] = 1 + max(r["offset"] for r in target if r["partition"] == moved["partition"])
    pq.write_table(pa.Table.from_pylist(checkpoints, schema=CHECKPOINTS_SCHEMA), tampered / "mirror-checkpoints.parquet")
    exit_code, output, verdict = kspec_check(spark, tampered)
    assert exit_code == 1, output
    assert verdict["guarantees"]["MIR-3"]["status"] == "violated" and verdict["guarantees"]["MIR-1"]["status"] == "held"
    found = [r for r in pq.read_table(tampered / "check" / "anomalies.parquet").to_pylist()
             if r["anomaly"] == "mirror-checkpoint-skips"]
    assert [(r["partition"], r["guarantee"]) for r in found] == [(moved["partition"], "MIR-3")]
    source = pq.read_table(tampered / "mirror-source.parquet").to_pylist()
    unread = sorted(r["offset"] for r in source if r["partition"] == moved["partition"] and r["offset"] >= moved["upstream"])
    assert found[0]["offsets"] == unread[:len(found[0]["offsets"])] and found[0]["offsets"][0] == moved["upstream"]


@pytest.mark.soak  # a minute or two each: make bench
@pytest.mark.guarantee("MIR-1", "MIR-2")
def test_exactly_once_mirror_under_the_same_faults_duplicates_nothing(spark, tmp_path):
    out = tmp_path / "run"
    mirror_run(out, **{"exactly.once.support": "enabled", "tasks.max": "2"})
    exit_code, output, verdict = kspec_check(spark, out)
    assert exit_code == 0, output
    assert {g: e["status"] for g, e in verdict["guarantees"].items()} == {
        "MIR-1": "held", "MIR-2": "held", "MIR-3": "held"}
    assert verdict["anomalies"]["mirror-duplicate"] == 0


@pytest.mark.soak  # a minute or two each: make bench
@pytest.mark.guarantee("MIR-1")
def test_a_mirror_committing_progress_before_the_copies_are_acked_loses_records(spark, tmp_path):
    """The copies linger 500 ms in the producer while their progress is already acknowledged:
    each kill -9 loses what lingered, and the restarted mirror resumes after it."""
    out = tmp_path / "run"
    mirror_run(out, nemeses=(), interval_s=2.0, **{"kspec.bug.mirror.commit.before.ack": "true",
                                                   "backup.producer.linger.ms": "500",
                                                   "offset.flush.interval.ms": "200",
                                                   "emit.checkpoints.enabled": "false"})  # no syncs with the bug
    exit_code, output, verdict = kspec_check(spark, out)
    assert exit_code == 1, output
    assert verdict["guarantees"]["MIR-1"]["status"] == "violated" and verdict["anomalies"]["mirror-lost"] > 0


@pytest.mark.soak
@pytest.mark.guarantee("MIR-1", "MIR-2", "MIR-3")
def test_three_node_clusters_exactly_once_mirror_for_a_minute(spark, tmp_path):
    """The long variant (make bench): 3-node clusters, replicated remote and internal topics,
    two tasks, a minute of link cuts, leader kills on either side and mirror kills."""
    out = tmp_path / "run"
    options = RunOptions(nodes=3, nemeses=("partition", "kill"), time_limit_s=60.0, interval_s=6.0,
                         final_read_timeout_s=120.0, workload=WorkloadOptions(rate_hz=200.0),
                         workload_name="mirror",
                         mirror_properties={"exactly.once.support": "enabled", "tasks.max": "2"})
    result = run(options, out)
    assert result.final_reads_complete, result.workload_failures
    exit_code, output, verdict = kspec_check(spark, out)
    assert exit_code == 0, output
    assert {g: e["status"] for g, e in verdict["guarantees"].items()} == {
        "MIR-1": "held", "MIR-2": "held", "MIR-3": "held"}
