"""The driver-side checks on small histories written by hand: groups (GRP-1..3), acks=1 (DUR-2)
and compaction (RET-1) name the anomaly and its evidence, and find nothing in a clean history."""
from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow.parquet as pq

from spark_validation import acks, groups, retention
from spark_validation.options import RunOptions
from spec.history import NEMESIS_PROCESS, Op, Poll, Record, Send, ops_table

SUBSCRIBE = RunOptions(frozenset({"subscribe"}))


class History:
    """Ops as a run records them: each an invocation and a completion, times in ms."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.index = itertools.count()

    def op(self, process: int, f: str, type: str, start_ms: int, end_ms: int, *, mops=(), assignment=(),
           extra=None) -> int:
        start_ns, end_ns = start_ms * 1_000_000, end_ms * 1_000_000
        self.ops.append(Op(next(self.index), process, "invoke", f, start_ns, start_ns, tuple(mops), tuple(assignment)))
        index = next(self.index)
        self.ops.append(Op(index, process, type, f, end_ns, start_ns, tuple(mops), tuple(assignment), extra=extra))
        return index

    def write(self, folder: Path) -> Path:
        path = folder / "history.parquet"
        pq.write_table(ops_table(self.ops), path)
        return path


def rebalance(h: History, process: int, at_ms: int, event: str, generation: int, partitions, owned) -> int:
    return h.op(process, "rebalance", "ok", at_ms, at_ms, assignment=owned, extra={
        "event": event, "generation": generation, "member": f"m{process}", "partitions": [list(p) for p in partitions],
        "owned": [list(p) for p in owned], "callback_time_ns": at_ms * 1_000_000})


def commit(h: History, process: int, start_ms: int, end_ms: int, offsets, type: str = "ok") -> int:
    return h.op(process, "commit", type, start_ms, end_ms, extra={"offsets": [list(o) for o in offsets],
                                                                  "generation": 1, "member": f"m{process}"})


def test_an_assign_mode_history_leaves_the_group_guarantees_unchecked(tmp_path):
    h = History()
    h.op(0, "poll", "ok", 0, 1, mops=[Poll()])
    assert groups.check(h.write(tmp_path), SUBSCRIBE) is None


def test_eager_rebalances_with_disjoint_owners_commits_going_forward_and_read_back_find_nothing(tmp_path):
    h = History()
    rebalance(h, 0, 10, "assign", 1, [("t0", 0)], [("t0", 0)])
    rebalance(h, 1, 11, "assign", 1, [("t0", 1)], [("t0", 1)])
    commit(h, 0, 20, 25, [("t0", 0, 5)])
    rebalance(h, 0, 30, "revoke", 1, [("t0", 0)], [])
    rebalance(h, 1, 40, "assign", 2, [("t0", 0)], [("t0", 0), ("t0", 1)])
    h.op(1, "poll", "ok", 45, 46, mops=[Poll((Record("t0", 0, 0, 6, 5),))])
    commit(h, 1, 50, 55, [("t0", 0, 6)])
    h.op(9, "offset-fetch", "ok", 90, 91, extra={"offsets": [["t0", 0, 6]]})
    assert groups.check(h.write(tmp_path), SUBSCRIBE) == []


def test_two_members_owning_a_partition_in_one_generation_is_a_double_assignment(tmp_path):
    h = History()
    first = rebalance(h, 0, 10, "assign", 3, [("t0", 0)], [("t0", 0)])
    second = rebalance(h, 1, 12, "assign", 3, [("t0", 0), ("t0", 1)], [("t0", 0), ("t0", 1)])
    [row] = groups.check(h.write(tmp_path), SUBSCRIBE)
    assert (row["anomaly"], row["topic"], row["partition"], row["ops"]) == ("double-assignment", "t0", 0, [first, second])
    assert "generation 3" in row["detail"]


def test_an_acknowledged_commit_below_an_earlier_one_moves_the_offset_backwards(tmp_path):
    h = History()
    rebalance(h, 0, 1, "assign", 1, [("t0", 0)], [("t0", 0)])
    high = commit(h, 0, 10, 12, [("t0", 0, 9)])
    low = commit(h, 0, 20, 22, [("t0", 0, 4)])
    h.op(9, "offset-fetch", "ok", 90, 91, extra={"offsets": [["t0", 0, 4]]})
    [row] = groups.check(h.write(tmp_path), SUBSCRIBE)
    assert (row["anomaly"], row["ops"], row["offsets"], row["delta"]) == ("commit-backwards", [high, low], [9, 4], -5)


def test_offsets_read_back_below_the_last_acknowledged_commit_are_a_lost_commit(tmp_path):
    h = History()
    rebalance(h, 0, 1, "assign", 1, [("t0", 0), ("t0", 1)], [("t0", 0), ("t0", 1)])
    commit(h, 0, 10, 12, [("t0", 0, 3), ("t0", 1, 2)])
    last = commit(h, 0, 20, 22, [("t0", 0, 7), ("t0", 1, 5)])
    commit(h, 0, 30, 40, [("t0", 1, 6)], type="info")  # may have landed: 6 is as good as 5
    fetch = h.op(9, "offset-fetch", "ok", 90, 91, extra={"offsets": [["t0", 0, 3], ["t0", 1, 6]]})
    [row] = groups.check(h.write(tmp_path), SUBSCRIBE)
    assert (row["anomaly"], row["partition"], row["ops"], row["offsets"]) == ("lost-commit", 0, [last, fetch], [7, 3])


def test_a_member_given_a_partition_reading_below_its_acknowledged_commit_is_a_rewound_assignment(tmp_path):
    h = History()
    rebalance(h, 0, 1, "assign", 1, [("t0", 0)], [("t0", 0)])
    acked = commit(h, 0, 10, 12, [("t0", 0, 8)])
    rebalance(h, 0, 20, "revoke", 1, [("t0", 0)], [])
    given = rebalance(h, 1, 30, "assign", 2, [("t0", 0)], [("t0", 0)])
    read = h.op(1, "poll", "ok", 35, 36, mops=[Poll((Record("t0", 0, 0, 1, 0),))])
    h.op(9, "offset-fetch", "ok", 90, 91, extra={"offsets": [["t0", 0, 8]]})
    [row] = groups.check(h.write(tmp_path), SUBSCRIBE)
    assert (row["anomaly"], row["ops"], row["offsets"]) == ("rewound-assignment", [acked, given, read], [8, 0])


def leader_epochs(h: History, at_ms: int, node_index: int, node_id: int, leader: int, epoch: int) -> int:
    """One node's Metadata answer, as faults/epochs.py records it."""
    return h.op(-2, "leader-epochs", "ok", at_ms, at_ms,
                extra={"node_index": node_index, "node_id": node_id, "leaders": [["t0", 0, leader, epoch]]})


def acks_history(h: History, change_at_ms: int | None) -> int | None:
    """Two acks=1 values acked by broker 1, the second lost; the leadership moving to broker 2 at
    change_at_ms (None: never). The op of the observation that shows the change."""
    for node_index, node_id in ((0, 1), (1, 2)):
        leader_epochs(h, 0, node_index, node_id, leader=1, epoch=3)
    h.op(0, "send", "ok", 10, 20, mops=[Send(Record("t0", 0, 0, 1, 0))])
    h.op(0, "send", "ok", 30, 40, mops=[Send(Record("t0", 0, 0, 2, 1))])
    change = None
    if change_at_ms is not None:
        change = leader_epochs(h, change_at_ms, 1, 2, leader=2, epoch=4)
    h.op(NEMESIS_PROCESS, "start-kill", "info", 45, 45, extra={"value": {"node": 1}})  # a fault alone explains nothing
    h.op(5, "poll", "ok", 90_000, 90_001, mops=[Poll((Record("t0", 0, 0, 1, 0),))])
    return change


def test_acks_1_records_lost_when_their_partition_changed_leader_after_the_ack_are_the_documented_window(tmp_path):
    h = History()
    change = acks_history(h, change_at_ms=12_000)
    [row] = acks.check(h.write(tmp_path), RunOptions(acks="1"))
    assert (row["anomaly"], row["violation"], row["values"], row["ops"][1]) == ("acks1-window-loss", False, [2], change)
    assert "broker 1 leading at epoch 3" in row["detail"] and "broker 2 led at epoch 4" in row["detail"]


def test_acks_1_records_lost_while_their_partition_kept_its_leader_are_a_violation_whatever_the_nemesis_did(tmp_path):
    h = History()
    acks_history(h, change_at_ms=None)
    [row] = acks.check(h.write(tmp_path), RunOptions(acks="1"))
    assert (row["anomaly"], row["violation"], row["values"]) == ("acks1-loss", True, [2])
    assert acks.check(h.write(tmp_path), RunOptions()) is None


def test_a_leader_that_still_led_a_follower_window_after_the_ack_does_not_explain_the_loss_by_its_later_fall(
        tmp_path):
    late_ms = int((acks.FOLLOWER_WINDOW_S + 15) * 1000)
    h = History()
    acks_history(h, change_at_ms=late_ms)  # an election seen late (a busy cluster) still explains it
    [row] = acks.check(h.write(tmp_path), RunOptions(acks="1"))
    assert (row["anomaly"], row["violation"]) == ("acks1-window-loss", False)
    h = History()
    leader_epochs(h, int((acks.FOLLOWER_WINDOW_S + 5) * 1000), 0, 1, leader=1, epoch=3)  # broker 1 still leads
    acks_history(h, change_at_ms=late_ms)
    [row] = acks.check(h.write(tmp_path), RunOptions(acks="1"))
    assert (row["anomaly"], row["violation"]) == ("acks1-loss", True)


def test_an_acks_1_record_acked_while_a_deposed_leader_still_led_in_its_own_view_is_the_documented_window(tmp_path):
    h = History()
    leader_epochs(h, 0, 0, 1, leader=1, epoch=3)      # broker 1, cut off, still leads in its own view
    leader_epochs(h, 5, 1, 2, leader=2, epoch=4)      # broker 2 was elected meanwhile
    h.op(0, "send", "ok", 10, 20, mops=[Send(Record("t0", 0, 0, 1, 0))])
    h.op(5, "poll", "ok", 90, 91, mops=[Poll(())])
    [row] = acks.check(h.write(tmp_path), RunOptions(acks="1"))
    assert (row["anomaly"], row["violation"]) == ("acks1-window-loss", False)
    assert "broker 1 still named itself leader at epoch 3" in row["detail"]


def test_an_acks_1_record_whose_ack_reached_the_client_after_the_election_is_judged_from_its_send(tmp_path):
    """The leader appended it some time between the send and the delivery report: a report that
    arrived after the election was seen does not make the loss one with no leadership change."""
    h = History()
    for node_index, node_id in ((0, 1), (1, 2)):
        leader_epochs(h, 0, node_index, node_id, leader=1, epoch=3)
    change = leader_epochs(h, 5_000, 1, 2, leader=2, epoch=4)  # broker 2 elected while the ack was on its way
    h.op(0, "send", "ok", 10, 9_000, mops=[Send(Record("t0", 0, 0, 1, 0))])
    h.op(5, "poll", "ok", 90_000, 90_001, mops=[Poll(())])
    [row] = acks.check(h.write(tmp_path), RunOptions(acks="1"))
    assert (row["anomaly"], row["violation"], row["ops"][1]) == ("acks1-window-loss", False, change)
    assert "sent at 0.010 s, acked at 9.000 s" in row["detail"]


COMPACT = RunOptions(topic_config=(("cleanup.policy", "compact"), ("delete.retention.ms", "60000")))


def test_compaction_keeping_the_latest_value_and_tombstone_of_every_key_finds_nothing(tmp_path):
    h = History()
    h.op(0, "send", "ok", 0, 1, mops=[Send(Record("t0", 0, 0, 1, 0)), Send(Record("t0", 0, 0, 5, 1)),
                                      Send(Record("t0", 0, 0, 2, 2))])
    h.op(1, "tombstone", "ok", 2, 3, extra={"topic": "t0", "partition": 0, "key": 0, "sub_key": 2, "offset": 3})
    h.op(9, "poll", "ok", 10, 11, mops=[Poll((Record("t0", 0, 0, 5, 1),))],
         extra={"tombstones": [["t0", 0, 3, 2]]})
    assert retention.check(h.write(tmp_path), COMPACT) == []
    assert retention.check(h.write(tmp_path), RunOptions()) is None


def test_compaction_losing_a_latest_value_or_an_unexpired_tombstone_violates_ret_1(tmp_path):
    h = History()
    sent = h.op(0, "send", "ok", 0, 1, mops=[Send(Record("t0", 0, 0, 1, 0)), Send(Record("t0", 0, 0, 2, 1))])
    tombstone = h.op(1, "tombstone", "ok", 2, 3, extra={"topic": "t0", "partition": 0, "key": 0, "sub_key": 2,
                                                         "offset": 2})
    h.op(9, "poll", "ok", 10, 11, mops=[Poll((Record("t0", 0, 0, 7, 0),))])
    rows = retention.check(h.write(tmp_path), COMPACT)
    assert sorted((r["anomaly"], r["ops"]) for r in rows) == [
        ("compaction-lost-latest", [sent]), ("compaction-offset-reuse", None), ("tombstone-removed-early", [tombstone])]


def test_acks_1_with_compaction_counts_a_value_superseded_by_a_later_one_of_its_key_as_compacted_not_lost(tmp_path):
    h = History()
    leader_epochs(h, 0, 0, 1, leader=1, epoch=3)
    h.op(0, "send", "ok", 10, 20, mops=[Send(Record("t0", 0, 0, 1, 0)), Send(Record("t0", 0, 0, 5, 1))])
    h.op(5, "poll", "ok", 90, 91, mops=[Poll((Record("t0", 0, 0, 5, 1),))])
    assert acks.check(h.write(tmp_path), RunOptions(acks="1", topic_config=COMPACT.topic_config)) == []
    [row] = acks.check(h.write(tmp_path), RunOptions(acks="1"))
    assert (row["anomaly"], row["values"]) == ("acks1-loss", [1])


def test_in_an_acks_1_run_an_offset_reused_after_a_window_loss_is_explained_by_it():
    from spark_validation.anomalies import anomaly_row
    rows = [anomaly_row("acks1-window-loss", "lost", violation=False, topic="t0", partition=0, values=[7]),
            anomaly_row("inconsistent-offsets", "offset 3 holds 7, 9", topic="t0", partition=0, values=[7, 9]),
            anomaly_row("inconsistent-offsets", "offset 4 holds 8, 10", topic="t0", partition=0, values=[8, 10]),
            anomaly_row("unseen", "1 value", topic="t0", partition=0, values=[7])]
    acks.explain(rows, rows)
    assert [r["violation"] for r in rows] == [False, False, True, False]
    assert rows[1]["detail"].startswith("follows from an acks=1 window loss (DUR-2)")
