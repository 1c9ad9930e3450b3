"""Whole fault runs against the reference broker: they finish, heal, read back every acked
write, record faults in the history, and leave nothing behind."""
from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from faults import net
from faults.edn import export_edn
from faults.run import RunOptions, run
from faults.workload import ABORTED_BY_CLIENT, WorkloadOptions
from faults_helpers import brokers_of
from spark_validation.jepsen import read_edn_history
from spec.history import CLIENT_FS, NEMESIS_PROCESS, Poll, Send, ops_from_table, ops_table, read_history

SHORT = WorkloadOptions(concurrency=4, rate_hz=150, send_timeout_s=3.0)
THREE_NODE_WORKERS = 16
THREE_NODE_RATE_HZ = 400
THREE_NODE_OPS_PER_S_MIN = 200


def acked_values_read_back(out_dir: Path) -> tuple[int, set]:
    """(acked sends, acked (key, value) pairs that no poll returned)."""
    ops = list(ops_from_table(read_history(out_dir / "history.parquet")))
    acked = {(m.record.key, m.record.value) for op in ops if op.type == "ok" and op.f == "send"
             for m in op.mops if isinstance(m, Send)}
    read = {(r.key, r.value) for op in ops if op.type == "ok" and op.f in CLIENT_FS  # not the replica audit's reads
            for m in op.mops if isinstance(m, Poll)
            for r in m.records}
    return len(acked), acked - read


def nemesis_fs(out_dir: Path) -> set[str]:
    ops = ops_from_table(read_history(out_dir / "history.parquet"))
    return {op.f for op in ops if op.process == NEMESIS_PROCESS}


@pytest.mark.timeout(120)
def test_a_short_run_with_kills_and_pauses_heals_reads_back_every_acked_write_and_cleans_up(
        namespaces_available, tmp_path):
    out_dir = tmp_path / "faults-run"
    result = run(RunOptions(nodes=1, nemeses=("kill", "pause", "partition"), time_limit_s=14, interval_s=2,
                            quiet_s=1, network="netns", seed=7, workload=SHORT), out_dir)
    assert result.mode == "netns" and result.final_reads_complete and not result.workload_failures
    acked, missing = acked_values_read_back(out_dir)
    assert acked > 10 and missing == set()  # a loaded machine acks a few dozen
    assert {"start-kill", "stop-kill", "start-pause", "stop-pause"} <= nemesis_fs(out_dir)
    timeline = [json.loads(line) for line in (out_dir / "nemesis.jsonl").read_text().splitlines()]
    active = {}
    for flip in timeline:
        active[flip["package"]] = flip["action"] == "start"
    assert not any(active.values()), "the final heal stopped every fault"
    results = json.loads((out_dir / "results.json").read_text())
    assert results["network_mode"] == "netns" and results["completions"]["ok"] > 200
    assert json.loads((out_dir / "run.json").read_text()) == {"sub_via": ["assign"], "ww_deps": True, "acks": "all"}
    assert (out_dir / "node-0.log").stat().st_size > 0 and not (out_dir / "history.parts").exists()
    assert [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
            if n.startswith(f"ksf{os.getpid() % 100000}")] == []
    assert brokers_of(out_dir) == []


@pytest.mark.soak  # 17 s; the proxy layer itself is tested in tests/faults/test_faults_proxy.py
@pytest.mark.timeout(120)
def test_the_proxy_layer_carries_link_faults_and_client_partitions(tmp_path):
    out_dir = tmp_path / "faults-run"
    result = run(RunOptions(nodes=1, nemeses=("link", "partition", "pause"), time_limit_s=10, interval_s=1.5,
                            quiet_s=1, network="proxy", seed=3, workload=SHORT), out_dir)
    assert result.mode == "proxy" and result.final_reads_complete
    acked, missing = acked_values_read_back(out_dir)
    assert acked > 50 and missing == set()
    timeline = [json.loads(line) for line in (out_dir / "nemesis.jsonl").read_text().splitlines()]
    started = [flip for flip in timeline if flip["action"] == "start"]
    assert any(f["package"] == "link" and "toxic" in f["value"] for f in started)
    assert all("error" not in f["value"] for f in timeline), timeline
    assert brokers_of(out_dir) == []


@pytest.mark.timeout(120)
def test_a_toml_described_target_runs_under_the_same_harness(namespaces_available, tmp_path):
    target_file = tmp_path / "reference-by-command.toml"
    target_file.write_text(textwrap.dedent("""\
        name = "reference-by-command"
        nodes = 1
        port = 9092
        start = ["{python}", "-m", "kspec.cli", "broker", "--listen", "{host}:{port}",
                 "--data-dir", "{data_dir}", "--node-id", "{node_id}",
                 "--set", "advertised.host.name={advertised_host}"]
        data_dir = "{run_dir}/node-{node_id}"
        """))
    out_dir = tmp_path / "faults-run"
    result = run(RunOptions(target=str(target_file), nodes=1, nemeses=("kill",), time_limit_s=8, interval_s=2,
                            quiet_s=1, network="netns", workload=SHORT), out_dir)
    assert result.final_reads_complete
    acked, missing = acked_values_read_back(out_dir)
    assert acked > 50 and missing == set()
    assert brokers_of(out_dir) == []


PAUSED_AT_THE_END_SEED = 2  # with interval_s=2: the pause starts at ~3.8 s and would stop at ~7.6 s
PAUSED_AT_THE_END_TIME_LIMIT_S = 6.0
KAFKA_SEND_TIMEOUT_S = 120.0  # the fault runs' send timeout (Kafka's delivery.timeout.ms)
HEAL_AFTER_MAIN_PHASE_S_MAX = 10.0


@pytest.mark.timeout(100)
def test_a_node_paused_when_the_main_phase_ends_is_resumed_before_the_run_waits_for_sends_in_flight(tmp_path):
    """Sends in flight to a paused node complete only once it is resumed: the run heals first
    (as Jepsen's generator ends with the nemesis' stop), then waits for them, so it does not
    wait out their 120 s send timeout."""
    out_dir = tmp_path / "faults-run"
    workload = WorkloadOptions(concurrency=4, rate_hz=150, send_timeout_s=KAFKA_SEND_TIMEOUT_S)
    result = run(RunOptions(nodes=1, nemeses=("pause",), time_limit_s=PAUSED_AT_THE_END_TIME_LIMIT_S, interval_s=2,
                            quiet_s=0.5, network="proxy", seed=PAUSED_AT_THE_END_SEED, workload=workload), out_dir)
    timeline = [json.loads(line) for line in (out_dir / "nemesis.jsonl").read_text().splitlines()]
    assert [flip["action"] for flip in timeline] == ["start", "stop"], timeline  # staged: paused at the end
    started_s, healed_s = (flip["time_ns"] / 1e9 for flip in timeline)
    assert started_s < PAUSED_AT_THE_END_TIME_LIMIT_S < healed_s < PAUSED_AT_THE_END_TIME_LIMIT_S + \
        HEAL_AFTER_MAIN_PHASE_S_MAX, timeline
    ops = [op for op in ops_from_table(read_history(out_dir / "history.parquet")) if op.process != NEMESIS_PROCESS]
    last_completion_s = max(op.time_ns for op in ops if op.type != "invoke") / 1e9
    assert last_completion_s < healed_s + KAFKA_SEND_TIMEOUT_S / 4, (healed_s, last_completion_s)
    assert result.final_reads_complete and not result.workload_failures
    acked, missing = acked_values_read_back(out_dir)
    assert acked > 50 and missing == set()


@pytest.mark.timeout(120)
def test_jepsen_edn_exported_by_kspec_imports_back_to_the_same_parquet_history(tmp_path):
    out_dir = tmp_path / "faults-run"
    run(RunOptions(nodes=1, nemeses=("pause",), time_limit_s=4, interval_s=1, quiet_s=0.5, network="proxy",
                   workload=SHORT), out_dir)
    table = read_history(out_dir / "history.parquet")
    edn = export_edn(ops_from_table(table), tmp_path / "history.edn")
    assert edn.read_text().count("\n") == len(set(table.column("index").to_pylist()))
    assert ops_table(read_edn_history(edn)).equals(table)


@pytest.mark.timeout(120)
def test_transactions_under_kills_commit_or_abort_whole_and_committed_ones_are_read_back(
        namespaces_available, tmp_path):
    out_dir = tmp_path / "faults-run"
    workload = WorkloadOptions(concurrency=4, rate_hz=100, txn_timeout_s=3.0, txn=True)
    result = run(RunOptions(nodes=1, nemeses=("kill",), time_limit_s=10, interval_s=2, quiet_s=1,
                            network="netns", seed=5, workload=workload), out_dir)
    assert result.final_reads_complete and not result.workload_failures
    ops = list(ops_from_table(read_history(out_dir / "history.parquet")))
    txns = [op for op in ops if op.f == "txn" and op.type != "invoke"]
    assert sum(op.type == "ok" for op in txns) > 50
    assert any(op.type == "fail" and (op.extra or {}).get("error") == ABORTED_BY_CLIENT for op in txns), \
        "some transactions were aborted by the client after their sends were acknowledged"
    written = {kind: {(m.record.key, m.record.value) for op in txns if op.type == kind for m in op.mops
                      if isinstance(m, Send)} for kind in ("ok", "fail")}
    read = {(r.key, r.value) for op in ops if op.type == "ok" and op.f in CLIENT_FS  # not the replica audit's reads
            for m in op.mops if isinstance(m, Poll)
            for r in m.records}
    assert written["ok"] <= read, "every committed send is read back"
    assert written["fail"] and not written["fail"] & read, "no aborted send is read by a read_committed consumer"


# A 3-node run takes 75-90 s; a child still running after this is stuck in librdkafka.
THREE_NODE_RUN_DEADLINE_S = 240
THREE_NODE_ATTEMPTS = 2
CHILD_RUN = """
import pickle, sys
from pathlib import Path
from faults.run import run
run(pickle.loads(Path(sys.argv[1]).read_bytes()), Path(sys.argv[2]))
"""


def run_in_child(options: RunOptions, out_dir: Path) -> tuple[dict, int] | None:
    """The run in a child process: (its results.json, the child's pid, which names its network),
    or None when it outlived THREE_NODE_RUN_DEADLINE_S. librdkafka can deadlock while a client
    call holds Python's GIL (a lock-order inversion when a broker leaves the metadata,
    librdkafka issue 5476), which no timeout inside the stuck process can interrupt; the child
    is then killed with its brokers and its namespaces are cleaned."""
    options_path = out_dir.parent / f"{out_dir.name}.options"
    options_path.write_bytes(pickle.dumps(options))
    child = subprocess.Popen([sys.executable, "-c", CHILD_RUN, str(options_path), str(out_dir)],
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        child.wait(THREE_NODE_RUN_DEADLINE_S)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        state = net.STATE_DIR / f"ksf{child.pid % 100000}.json"
        if state.exists():
            net.clean_state_file(state)
        return None
    assert child.returncode == 0, f"the run failed (exit {child.returncode}); see {out_dir}"
    return json.loads((out_dir / "results.json").read_text()), child.pid


@pytest.mark.soak  # tests/checker/test_replica_audit_run.py makes a 3-node run with these faults in make test
@pytest.mark.timeout(THREE_NODE_ATTEMPTS * THREE_NODE_RUN_DEADLINE_S + 60)
def test_a_three_node_cluster_run_with_partitions_leader_kills_and_pauses_heals_and_leaves_nothing(
        namespaces_available, tmp_path):
    """Issue 7's acceptance run: 60 s under faults at 200+ ops/s. Measured with these settings at
    a load average of about 15 on 2 cores: 383 ops/s (13,118 ok, 10,991 info); the floor leaves
    room for a busier machine. A run stuck in the client library is run again, once."""
    workload = WorkloadOptions(concurrency=THREE_NODE_WORKERS, rate_hz=THREE_NODE_RATE_HZ, send_timeout_s=5.0,
                               replication_factor=3)
    options = RunOptions(nodes=3, nemeses=("partition", "kill", "pause"), time_limit_s=60, interval_s=4,
                         quiet_s=2, network="netns", seed=11, workload=workload)
    for attempt in range(THREE_NODE_ATTEMPTS):
        out_dir = tmp_path / f"faults-run-{attempt}"
        finished = run_in_child(options, out_dir)
        if finished is not None:
            break
    assert finished is not None, f"every run stuck in the client library past {THREE_NODE_RUN_DEADLINE_S} s"
    result, child_pid = finished
    assert result["network_mode"] == "netns" and result["final_reads_complete"] and not result["workload_failures"]
    assert result["main_phase_ops_per_s"] >= THREE_NODE_OPS_PER_S_MIN, result["main_phase_ops_per_s"]
    timeline = [json.loads(line) for line in (out_dir / "nemesis.jsonl").read_text().splitlines()]
    assert {f["package"] for f in timeline if f["action"] == "start"} >= {"partition", "kill"}
    assert all("error" not in f["value"] for f in timeline), timeline
    acked, missing = acked_values_read_back(out_dir)
    assert acked > 10 and missing == set()  # a loaded machine acks a few dozen
    assert all((out_dir / f"node-{i}.log").exists() for i in range(3))
    assert net.leftovers(f"ksf{child_pid % 100000}") == [] and brokers_of(out_dir) == []
