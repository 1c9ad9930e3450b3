"""What each topic-partition's task of the check pass gets about assignments (frames.py): the
assign/subscribe ops that dropped that partition and the ok subscribes, joined in Spark and
shuffled with the partition's mops; never the assignments of the whole history from the driver.

Partitions t-0 and u-0 are written; process 1 assigns t-0, then u-0 (dropping t-0), then both;
process 2 assigns u-0 and crashes in an assign (info) of t-0; process 3 subscribes to topic t.
"""
from __future__ import annotations

import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

from spark_validation.frames import RESETS, HistoryFrames, read_ipc
from spec.history import Op, Poll, Record, Send, ops_table, write_history


class History:
    def __init__(self):
        self.ops: list[Op] = []
        self.now_ns = 0

    def op(self, process: int, f: str, mops=(), done_mops=None, assignment=(), type_: str = "ok") -> int:
        index = len(self.ops)
        self.now_ns += 10
        self.ops.append(Op(index, process, "invoke", f, self.now_ns, self.now_ns, tuple(mops), tuple(assignment)))
        self.ops.append(Op(index + 1, process, type_, f, self.now_ns + 5, self.now_ns,
                           tuple(mops if done_mops is None else done_mops), tuple(assignment)))
        return index + 1


@pytest.fixture(scope="module")
def resets(spark, tmp_path_factory):
    """(topic, partition) -> [(process, op index, dropped, subscribe)] as the check pass's tasks get them."""
    h = History()
    for topic, value in (("t", 1), ("u", 2)):
        h.op(0, "send", [Send(Record(topic, 0, None, value))], [Send(Record(topic, 0, None, value, 0))])
    ops = {
        "1 assigns t-0": h.op(1, "assign", assignment=[("t", 0)]),
        "1 assigns u-0": h.op(1, "assign", assignment=[("u", 0)]),
        "1 assigns both": h.op(1, "assign", assignment=[("t", 0), ("u", 0)]),
        "2 assigns u-0": h.op(2, "assign", assignment=[("u", 0)]),
        "2 crashes assigning t-0": h.op(2, "assign", assignment=[("t", 0)], type_="info"),
        "3 subscribes to t": h.op(3, "subscribe", assignment=[("t", None)]),
    }
    h.op(1, "poll", [Poll()], [Poll((Record("t", 0, None, 1, 0), Record("u", 0, None, 2, 0)))])
    path = write_history(ops_table(h.ops), tmp_path_factory.mktemp("inputs") / "history.parquet")
    frames = HistoryFrames(spark, str(path), shuffle_partitions=4)
    try:
        blobs = frames.blobs.where(F.col("kind") == RESETS).toArrow()
    finally:
        frames.unpersist()
    found: dict[tuple[str, int], list[tuple]] = {}
    for topic, partition, payload in zip(blobs["topic"].to_pylist(), blobs["partition"].to_pylist(), blobs["payload"]):
        rows = read_ipc(payload.as_buffer())
        found.setdefault((topic, partition), []).extend(
            zip(*(rows[c].to_pylist() for c in ("process", "index", "dropped", "subscribe"))))
    names = {index: name for name, index in ops.items()}
    return {tp: sorted((names[index], dropped, subscribe) for _, index, dropped, subscribe in rows)
            for tp, rows in found.items()}


def test_a_partitions_task_gets_the_ops_that_dropped_it_and_the_subscribes_not_the_ops_that_kept_it(resets):
    assert resets[("t", 0)] == [("1 assigns u-0", True, False), ("2 assigns u-0", True, False),
                                ("3 subscribes to t", False, True)]


def test_a_subscribe_to_another_topic_drops_the_partition_and_still_counts_as_a_subscribe(resets):
    assert resets[("u", 0)] == [("1 assigns t-0", True, False), ("2 crashes assigning t-0", True, False),
                                ("3 subscribes to t", True, True)]


def test_only_partitions_with_mops_get_resets(resets):
    assert sorted(resets) == [("t", 0), ("u", 0)]
