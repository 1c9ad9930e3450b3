"""Power loss (DUR-1): a record lost because the node that lost its unflushed writes came back as
its partition's last in-sync replica and led it again is Kafka's own behaviour (power-loss-window,
allowed, with what follows from its offsets being handed out again); any other loss stays a violation."""
from __future__ import annotations

from spark_validation import power_loss
from spark_validation.checker import run_checks
from spark_validation.options import RunOptions
from spec.history import NEMESIS_PROCESS, Poll, Record, Send, ops_table, write_history

from .test_run_checks import History, leader_epochs

CUT_NODE_INDEX, CUT_BROKER, OTHER_BROKER = 0, 1, 2


def power_history(leader_after: int) -> History:
    """Broker 1 leads t0-0 and acks values 1 and 2 (read by a poll); a power loss of its node drops
    its unflushed log; leader_after leads at epoch 1 afterwards and acks value 3 at offset 0, which
    the final reads find there."""
    h = History()
    for node_index, node_id in ((0, CUT_BROKER), (1, OTHER_BROKER)):
        leader_epochs(h, 0, node_index, node_id, leader=CUT_BROKER, epoch=0)
    h.op(1, "assign", "ok", 1, 2, assignment=[("t0", 0)])
    h.op(0, "send", "ok", 10, 20, mops=[Send(Record("t0", 0, 0, 1, 0))])
    h.op(0, "send", "ok", 30, 40, mops=[Send(Record("t0", 0, 0, 2, 1))])
    h.op(1, "poll", "ok", 50, 60, mops=[Poll((Record("t0", 0, 0, 1, 0), Record("t0", 0, 0, 2, 1)))])
    h.op(NEMESIS_PROCESS, "start-power", "info", 100, 100, extra={"value": {
        "variant": "one", "nodes": [CUT_NODE_INDEX], "dropped_bytes": {str(CUT_NODE_INDEX): 140},
        "dropped_files": {str(CUT_NODE_INDEX): {"/t0-0/00000000000000000000.log": 140,
                                                "/__cluster_metadata-0/00000000000000000000.index": 24}}}})
    h.op(NEMESIS_PROCESS, "stop-power", "info", 3_000, 3_000, extra={"value": {"restarted": [CUT_NODE_INDEX]}})
    leader_epochs(h, 5_000, 1, OTHER_BROKER, leader=leader_after, epoch=1)
    h.op(0, "send", "ok", 6_000, 6_010, mops=[Send(Record("t0", 0, 0, 3, 0))])
    h.op(9, "assign", "ok", 7_000, 7_001, assignment=[("t0", 0)], extra={"seek-to-beginning": True})
    h.op(9, "poll", "ok", 7_010, 7_020, mops=[Poll((Record("t0", 0, 0, 3, 0),))])
    return h


def test_values_lost_when_the_power_cut_node_led_its_partition_again_are_the_power_loss_window(tmp_path):
    rows = power_loss.check(power_history(leader_after=CUT_BROKER).write(tmp_path), RunOptions())
    assert [(r["anomaly"], r["violation"], r["values"], r["offsets"]) for r in rows] == [
        ("power-loss-window", False, [1], [0]), ("power-loss-window", False, [2], [1])]
    assert "dropped 140 unflushed byte(s)" in rows[0]["detail"]
    assert "broker 1 led it again at epoch 1" in rows[0]["detail"]


def test_an_election_of_the_cut_node_made_before_its_restart_does_not_explain_a_loss(tmp_path):
    h = power_history(leader_after=OTHER_BROKER)
    leader_epochs(h, 2_000, 1, OTHER_BROKER, leader=CUT_BROKER, epoch=1)  # while it was down
    assert power_loss.check(h.write(tmp_path), RunOptions()) == []


def test_values_lost_while_another_broker_led_after_the_power_loss_are_not_explained_by_it(tmp_path):
    assert power_loss.check(power_history(leader_after=OTHER_BROKER).write(tmp_path), RunOptions()) == []


def test_a_run_without_the_power_nemesis_has_nothing_to_judge(tmp_path):
    h = History()
    h.op(0, "send", "ok", 10, 20, mops=[Send(Record("t0", 0, 0, 1, 0))])
    assert power_loss.check(h.write(tmp_path), RunOptions()) is None


def checked(spark, h: History, path):
    return run_checks(spark, write_history(ops_table(h.ops), path), RunOptions(),
                      checks=("inconsistent-offsets", "lost-write", "unseen", "power"))


def test_the_checker_holds_dur_1_and_vis_2_after_a_power_loss_window_and_not_otherwise(spark, tmp_path):
    window = checked(spark, power_history(leader_after=CUT_BROKER), tmp_path / "window.parquet")
    reused = [r for r in window.anomalies.to_pylist() if r["anomaly"] == "inconsistent-offsets"]
    assert reused and not any(r["violation"] for r in reused)
    assert reused[0]["detail"].startswith("follows from a power-loss-window loss (DUR-1)")
    assert window.verdict["guarantees"]["DUR-1"]["status"] == "held"
    assert window.verdict["guarantees"]["VIS-2"]["status"] == "held"
    other = checked(spark, power_history(leader_after=OTHER_BROKER), tmp_path / "other.parquet")
    assert other.verdict["guarantees"]["VIS-2"]["status"] == "violated"
