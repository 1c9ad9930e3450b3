"""A real Quix Streams exactly-once application under faults (`--workload quixstreams`):
EOS-1 and EOS-2 hold on the reference cluster while partition leaders and the application
itself are killed, and the checker finds EOS-1 violated when the broker serves aborted
records to read_committed consumers, or lets a late write join the next transaction."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from faults.run import RunOptions, run
from faults.streams import StreamsUnavailable, check_streams_python
from faults.workload import WorkloadOptions
from faults_helpers import brokers_of
from reports.run import render_run
from spark_validation.cli import check
from spark_validation.eos import add_to_verdict, check_eos
from spark_validation.session import spark_session

# Two input topics (4 keys), replicated to all three nodes; with this seed each application
# process is killed about 2.5 to 3 s after it processed its first input (--interval 4).
STREAMS = WorkloadOptions(key_count=4, concurrency=2, rate_hz=40, replication_factor=3)
SEED_WITH_EARLY_APP_KILLS = 2


@pytest.fixture
def streams_python() -> None:
    try:
        check_streams_python()
    except StreamsUnavailable as e:
        pytest.skip(str(e))


def streams_run(out_dir: Path, broker_properties: dict[str, str] | None = None) -> dict:
    result = run(RunOptions(nodes=3, nemeses=("kill",), nemesis_variants={"kill": "leader"}, time_limit_s=30,
                            interval_s=4, quiet_s=1, network="netns", seed=SEED_WITH_EARLY_APP_KILLS,
                            broker_properties=broker_properties or {}, workload=STREAMS,
                            workload_name="quixstreams"), out_dir)
    assert result.final_reads_complete and not result.workload_failures, result
    assert brokers_of(out_dir) == []
    run_info = json.loads((out_dir / "eos.json").read_text())
    assert run_info["caught_up"] and run_info["outputs_complete"], run_info
    # killed, or exited by itself (Quix Streams gives up on an assignment error while a leader is down)
    *restarted, last = run_info["instances"]
    assert restarted and all(i["ended_by"] == "sigkill" or i["ended_by"].startswith("exited") for i in restarted)
    assert last["ended_by"] == "sigterm", run_info["instances"]
    timeline = [json.loads(line) for line in (out_dir / "nemesis.jsonl").read_text().splitlines()]
    assert {"app-kill", "kill"} <= {flip["package"] for flip in timeline}
    return run_info


@pytest.mark.soak  # 90-145 s: a 30 s run, the application's catch-up and a Spark check
@pytest.mark.timeout(300)
def test_quix_streams_counts_every_input_exactly_once_through_leader_and_application_kills(
        namespaces_available, streams_python, tmp_path):
    out_dir = tmp_path / "streams-run"
    run_info = streams_run(out_dir)
    spark = spark_session("local[2]", "kspec-eos-tests")
    rows, summary = check_eos(spark, out_dir)
    assert rows == [], rows[:5]
    assert summary["restores_checked"] >= 1, summary  # a restarted process continued a key's count
    for key, counts in summary["keys"].items():  # every input counted once, the count ends at the inputs
        assert counts["final_count"] == counts["outputs"] >= counts["acked_inputs"] > 0, (key, counts)
    assert sum(c["outputs"] for c in summary["keys"].values()) == run_info["outputs"]
    _, verdict = add_to_verdict(_empty_anomalies(), _empty_verdict(), rows, summary)
    assert verdict["guarantees"]["EOS-1"]["status"] == verdict["guarantees"]["EOS-2"]["status"] == "held"


@pytest.mark.soak  # 70-80 s
@pytest.mark.timeout(300)
def test_a_broker_serving_aborted_records_to_read_committed_breaks_exactly_once(
        namespaces_available, streams_python, tmp_path):
    """With kspec.bug.serve.aborted.to.read.committed the outputs of the transactions each
    killed process left open (aborted when its successor fenced it) reach the read_committed
    final reads, next to the successor's outputs for the same inputs: EOS-1 is violated."""
    out_dir = tmp_path / "streams-run"
    streams_run(out_dir, {"kspec.bug.serve.aborted.to.read.committed": "true"})
    checked = CliRunner().invoke(check, [str(out_dir), "--master", "local[2]"])  # `kspec check RUN`
    assert checked.exit_code == 1, checked.output
    verdict = json.loads((out_dir / "check" / "verdict.json").read_text())
    assert verdict["guarantees"]["EOS-1"]["status"] == "violated", verdict["guarantees"]
    assert verdict["eos"]["anomalies"]["eos-duplicate"] > 0 and verdict["violations"]["eos-duplicate"] > 0
    duplicate = next(r for r in pq.read_table(out_dir / "check" / "anomalies.parquet").to_pylist()
                     if r["anomaly"] == "eos-duplicate")
    assert duplicate["guarantee"] == "EOS-1" and len(duplicate["offsets"]) == 2  # the input's two outputs
    page = render_run(out_dir).read_text()  # the report's guarantee table and the evidence
    assert '<th class="violated">EOS-1</th>' in page and '<h3 id="eos-duplicate">' in page


@pytest.mark.soak  # 170-200 s: a 30 s run, the application's catch-up (it may not finish) and a Spark check
@pytest.mark.timeout(600)
def test_a_late_write_joining_the_next_transaction_breaks_exactly_once(
        namespaces_available, streams_python, tmp_path):
    """With kspec.bug.late.produce.joins.next.transaction a leader now and then holds the
    application's first write to a partition until its transaction's marker (a Produce delayed
    past the client's timeouts): librdkafka gives up on it, the transaction is aborted, the
    process exits and its successor counts the inputs again; the late write, taken without
    KIP-890 verification, opens a transaction that the successor's next one commits, so an
    input's output is committed twice: EOS-1 is violated. The harness still kills the
    application; the partition leaders are not killed, the late writes are the fault here."""
    out_dir = tmp_path / "streams-run"
    result = run(RunOptions(nodes=3, nemeses=(), time_limit_s=30, interval_s=4, quiet_s=1, network="netns",
                            seed=SEED_WITH_EARLY_APP_KILLS, workload=STREAMS, workload_name="quixstreams",
                            broker_properties={"kspec.bug.late.produce.joins.next.transaction": "true"}), out_dir)
    assert not result.workload_failures and brokers_of(out_dir) == []
    held = [line for node_log in out_dir.glob("node-*.log") for line in node_log.read_text().splitlines()
            if "the held write of producer" in line and "after its marker" in line]
    assert held, "no leader held a write until after its transaction's marker"
    checked = CliRunner().invoke(check, [str(out_dir), "--master", "local[2]"])  # `kspec check RUN`
    assert checked.exit_code == 1, checked.output
    verdict = json.loads((out_dir / "check" / "verdict.json").read_text())
    assert verdict["guarantees"]["EOS-1"]["status"] == "violated", verdict["guarantees"]
    assert verdict["violations"]["eos-duplicate"] > 0, verdict["violations"]


def _empty_anomalies():
    from spark_validation.anomalies import ANOMALY_SCHEMA
    return ANOMALY_SCHEMA.empty_table()


def _empty_verdict() -> dict:
    return {"valid": True, "anomalies": {}, "violations": {}, "guarantees": {}}
