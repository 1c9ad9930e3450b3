"""The mirror lane of a lanes run (faults/lane_mirror.py) on one real broker: `kspec mirror` copies
the lane's topic into the same cluster (primary.mirrored beside mirrored), exactly once, while it
is killed with -9 and started again and a group commits on the source side; the lane's history,
checked as a lane (spark_validation/mirror_lane.py) and merged as `kspec check` merges a lanes
run's, holds MIR-1, MIR-2 and MIR-3. The full lanes run with this lane under broker faults is
tests/faults/test_faults_lanes.py (soak)."""
from __future__ import annotations

import dataclasses
import json
import time

import pytest

from faults.lane_mirror import MirrorLane
from faults.lanes import LANE_CHECKS, plan
from faults.workload import WorkloadOptions
from reference.process import BrokerProcess
from spark_validation.lanes import check_folder, merge

RUN_S = 6.0
KILL_INTERVAL_S = 2.0
SETTLE_TIMEOUT_S = 60.0


@pytest.fixture
def broker(tmp_path):
    process = BrokerProcess(str(tmp_path / "broker"), overrides={"group.initial.rebalance.delay.ms": "0"})
    process.start()
    yield process
    if process.running:
        assert process.stop() == 0


@pytest.fixture(scope="module")
def spark():
    from spark_validation.session import spark_session
    session = spark_session("local[2]", "kspec-lane-mirror-tests")
    yield session
    session.stop()


@pytest.mark.soak  # 70 s on a busy 2-core machine (a mirror started, killed, caught up; a Spark session):
# make test checks the lane's verdict on a written history (tests/checker/test_mirror_lane.py)
@pytest.mark.guarantee("MIR-1", "MIR-2", "MIR-3")
@pytest.mark.timeout(300)
def test_a_self_mirroring_lane_killed_mid_stream_holds_mir_1_to_3_in_the_merged_verdict(broker, spark, tmp_path):
    (lane,) = [lane for lane in plan(WorkloadOptions(rate_hz=1100.0)) if lane.name == "mirror"]
    lane = dataclasses.replace(lane, workload=dataclasses.replace(lane.workload, replication_factor=1))
    out = tmp_path / "lanes" / "mirror"
    out.mkdir(parents=True)
    side = MirrorLane(lane, broker, out, seed=3, kill_interval_s=KILL_INTERVAL_S)
    side.workload.create_topics()
    try:
        side.start()
        deadline = time.monotonic() + RUN_S
        while time.monotonic() < deadline or not side.workload.mirror.kills:  # the lane runs on its threads
            time.sleep(0.2)
        side.workload.stop_invoking()
        side.workload.stop()
        side.workload.close()
        side.finish(SETTLE_TIMEOUT_S, None)
    finally:
        side.abort()
    assert side.result["final_reads_complete"] and side.result["checkpoints_caught_up"], side.result
    assert side.result["mirror_kills"] >= 1 and side.result["completions"]["send-ok"] > 300, side.result
    assert json.loads((out / "mirror.json").read_text())["exactly_once"] is True
    assert (out / "history.parquet").exists(), "the nemesis's flips (none here) for the report"

    result = check_folder(out, tmp_path / "check", lambda: spark)
    assert result.verdict["valid"], result.anomalies.to_pylist()
    assert {g: e["status"] for g, e in result.verdict["guarantees"].items()} == \
        {"MIR-1": "held", "MIR-2": "held", "MIR-3": "held"}
    merged = merge({"mirror": result.verdict}, {"mirror": list(LANE_CHECKS["mirror"])}, {})
    assert all(merged["guarantees"][g]["lanes"] == ["mirror"] for g in ("MIR-1", "MIR-2", "MIR-3"))
    assert merged["mirror"]["records"]["source"] == side.result["completions"]["send-ok"]
    assert merged["mirror"]["flow"] == "primary->backup"
    assert (out / "mm2.properties").read_text().count(broker.bootstrap) == 2, "one cluster on both sides"


def test_the_harness_s_mirror_warnings_go_to_mirror_log_not_the_terminal(tmp_path, caplog):
    """During a run the workload's own warnings (a mirror restarted, checkpoints behind) and those of
    the mirror's clients it reads with go to the run's mirror.log beside the mirror process's lines."""
    import logging

    from faults.mirror_workload import MIRROR_LOG_FILE, MirrorWorkload
    workload = MirrorWorkload("127.0.0.1:1", "127.0.0.1:1", tmp_path)
    workload.route_log()
    try:
        with caplog.at_level(logging.WARNING):
            logging.getLogger("faults.mirror").warning("the mirror exited (status 1); starting it again")
            logging.getLogger("mirror").warning("cluster primary cannot be reached")
    finally:
        workload.detach_log()
    lines = (tmp_path / MIRROR_LOG_FILE).read_text().splitlines()
    assert [line.split(" (harness): ")[1] for line in lines] == [
        "the mirror exited (status 1); starting it again", "cluster primary cannot be reached"]
    assert caplog.records == [], "nothing reached the terminal's handlers"
    with caplog.at_level(logging.WARNING):
        logging.getLogger("mirror").warning("after the run")
    assert [r.getMessage() for r in caplog.records] == ["after the run"], "detached: logged as before"
