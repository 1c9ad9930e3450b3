"""The replica audit's checks (spark_validation/replicas.py) on small written histories: each
anomaly from the ops that show it, and a guarantee left unchecked, with the reason, when the
history holds nothing that checks it."""
from __future__ import annotations

import pytest

from spark_validation import replicas
from spec.history import NEMESIS_PROCESS, Op, Poll, Record, Send, ops_table, write_history

T, P = "t0", 0


class History:
    def __init__(self) -> None:
        self.ops: list[Op] = []

    def add(self, process: int, f: str, type: str = "ok", mops=(), extra=None) -> int:
        index = len(self.ops)
        self.ops.append(Op(index, process, "invoke", f, index, index, tuple(mops) if type != "ok" else (), extra=None))
        self.ops.append(Op(index + 1, process, type, f, index + 1, index, tuple(mops), extra=extra))
        return index + 1

    def send(self, *values: int) -> None:
        self.add(0, "send", mops=[Send(Record(T, P, 0, v, o)) for o, v in enumerate(values)])

    def replica(self, node: int, values: list, epochs=((0, 1),), high_watermark=None, error=None,
                method="follower-fetch") -> int:
        records = tuple(Record(T, P, 0, v, o) for o, v in enumerate(values) if v is not None)  # None: cleaned away
        extra = {"node": node, "method": method, "topic": T, "partition": P, "log_start_offset": 0,
                 "high_watermark": len(values) if high_watermark is None else high_watermark,
                 "epochs": [list(e) for e in epochs], "foreign": []}
        if error:
            return self.add(1_000_000 + len(self.ops), "replica-read", "fail", [Poll()], {**extra, "error": error})
        return self.add(1_000_000 + len(self.ops), "replica-read", mops=[Poll(records)], extra=extra)

    def epochs(self, node_index: int, leader: int, epoch: int) -> int:
        return self.add(-2, "leader-epochs", extra={"node_index": node_index, "leaders": [[T, P, leader, epoch]]})

    def malformed(self, running: bool = True) -> int:
        return self.add(NEMESIS_PROCESS, "start-malformed", "info",
                        extra={"value": {"nodes": {"0": {"frames": 64, "answered": 60, "running": running}}}})

    def check(self, tmp_path, compacted: bool = False):
        path = write_history(ops_table(self.ops), tmp_path / "history.parquet")
        return replicas.check(path, compacted)


def anomalies(rows) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for row in rows:
        found.setdefault(row["anomaly"], []).append(row)
    return found


def test_replicas_that_agree_below_both_high_watermarks_hold_rep_1_whatever_lies_above(tmp_path):
    h = History()
    h.send(10, 11, 12)
    h.replica(1, [10, 11, 12])
    h.replica(2, [10, 11, 99], high_watermark=2)  # offset 2 is above replica 2's high watermark
    h.malformed()
    rows, unchecked = h.check(tmp_path)
    assert rows == [] and unchecked == {}


def test_two_replicas_with_different_records_at_one_offset_violate_rep_1_with_both_records(tmp_path):
    h = History()
    h.send(10, 11, 12)
    a, b = h.replica(1, [10, 11]), h.replica(2, [10, 12])
    rows, _ = h.check(tmp_path)
    (row,) = anomalies(rows)["replica-divergence"]
    assert row["offsets"] == [1] and row["values"] == [11, 12] and row["ops"] == [a, b]


def test_a_client_read_that_a_replica_contradicts_violates_vis_2(tmp_path):
    h = History()
    h.send(10, 11)
    poll = h.add(3, "poll", mops=[Poll((Record(T, P, 0, 10, 0), Record(T, P, 0, 11, 1)))])
    read = h.replica(1, [10, 12])
    rows, _ = h.check(tmp_path)
    (row,) = anomalies(rows)["replica-read-mismatch"]
    assert row["offsets"] == [1] and row["values"] == [11, 12] and row["ops"] == [poll, read]


def test_an_epoch_seen_going_back_or_with_two_leaders_violates_rep_2(tmp_path):
    h = History()
    first = h.epochs(0, leader=1, epoch=3)
    back = h.epochs(0, leader=2, epoch=2)
    other = h.epochs(1, leader=3, epoch=3)
    h.replica(1, [10, 11], epochs=[(0, 2), (1, 1)])
    found = anomalies(h.check(tmp_path)[0])
    assert [r["ops"] for r in found["epoch-regression"] if r["ops"] != [r["ops"][0]]] == [[first, back]]
    assert any(r["offsets"] == [0, 1] for r in found["epoch-regression"])  # along the replica's batches
    assert [r["ops"] for r in found["epoch-two-leaders"]] == [[first, other]]


def test_clients_reading_a_lower_leader_epoch_at_a_higher_offset_violate_rep_2(tmp_path):
    h = History()
    h.epochs(0, leader=1, epoch=1)
    first = h.add(3, "poll", mops=[Poll((Record(T, P, 0, 10, 0),))], extra={"leader_epochs": [[T, P, 0, 2]]})
    later = h.add(4, "poll", mops=[Poll((Record(T, P, 0, 11, 5),))], extra={"leader_epochs": [[T, P, 5, 1]]})
    (row,) = anomalies(h.check(tmp_path)[0])["epoch-regression"]
    assert row["ops"] == [first, later] and row["offsets"] == [0, 5] and row["values"] == [2, 1]


def test_with_malformed_traffic_a_record_no_client_sent_or_a_stopped_node_violates_pro_1(tmp_path):
    h = History()
    h.send(10)
    h.replica(1, [10, -7])
    burst = h.malformed(running=False)
    found = anomalies(h.check(tmp_path)[0])
    assert found["stored-unsent"][0]["offsets"] == [1] and found["stored-unsent"][0]["values"] == [-7]
    assert found["malformed-crash"][0]["ops"] == [burst]


@pytest.mark.parametrize("history, reasons", [
    ("no audit", {"REP-1": "no replica reads", "REP-2": "no leader-epoch observations", "PRO-1": "no malformed"}),
    ("followers refuse", {"REP-1": "lacks follower reads", "PRO-1": "no malformed"}),
    ("one replica", {"REP-1": "replication factor 1", "PRO-1": "no malformed"}),
])
def test_a_guarantee_nothing_checks_is_unchecked_with_the_reason(tmp_path, history, reasons):
    h = History()
    h.send(10)
    if history == "followers refuse":
        h.replica(1, [10])
        h.replica(2, [], error="NOT_LEADER_OR_FOLLOWER from node 2 at offset 0")
    if history == "one replica":
        h.replica(1, [10])
    rows, unchecked = h.check(tmp_path)
    assert rows == [] and set(unchecked) == set(reasons)
    assert all(reasons[g] in unchecked[g] for g in reasons), unchecked
    if history == "followers refuse":
        assert "NOT_LEADER_OR_FOLLOWER" in unchecked["REP-1"]


def test_with_compaction_an_offset_a_replica_cleaned_away_is_no_difference_but_another_record_there_is(tmp_path):
    """Each replica's log cleaner compacts on its own schedule (cleanup.policy=compact): offsets one
    replica still holds may be gone from another, and from under a client's earlier read."""
    h = History()
    h.send(10, 11, 12)
    h.add(3, "poll", mops=[Poll((Record(T, P, 0, 10, 0), Record(T, P, 0, 11, 1)))])
    h.replica(1, [10, 11, 12])
    h.replica(2, [None, 11, 12])  # offset 0 cleaned away on node 2 only
    assert h.check(tmp_path, compacted=True)[0] == []
    assert set(anomalies(h.check(tmp_path)[0])) == {"replica-divergence", "replica-read-mismatch"}, \
        "without compaction a missing offset is a difference"
    h.replica(3, [None, 99, 12])
    found = anomalies(h.check(tmp_path, compacted=True)[0])
    assert [r["offsets"] for r in found["replica-divergence"]] == [[1], [1]]  # node 3 against nodes 1 and 2
    assert [r["values"] for r in found["replica-read-mismatch"]] == [[11, 99]]
