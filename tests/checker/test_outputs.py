"""Jepsen's informational outputs, computed in the Spark pass: realtime lag and consume counts.

One small history, checked once: partition t-0 is written at known times; process 1 assigns
it and polls (one poll reads, later polls read nothing and fall behind, a re-assign that
keeps it keeps its position, one that drops it forgets it); process 2 subscribes and reads
value 1 twice; process 3 re-reads under assign, which consume counts ignore (the run is
checked as one with subscribe, so re-reads are allowed and the history is valid).
"""
from __future__ import annotations

import pyarrow.compute as pc
import pytest

from spark_validation.options import RunOptions
from spec.history import Op, Poll, Record, Send
from .conftest import check_ops


def record(value: int, offset: int) -> Record:
    return Record("t", 0, None, value, offset)


class History:
    def __init__(self):
        self.ops: list[Op] = []

    def op(self, process: int, f: str, invoke_ns: int, complete_ns: int, mops=(), done_mops=None, assignment=()):
        index = len(self.ops)
        self.ops.append(Op(index, process, "invoke", f, invoke_ns, invoke_ns, tuple(mops), tuple(assignment)))
        self.ops.append(Op(index + 1, process, "ok", f, complete_ns, invoke_ns,
                           tuple(mops if done_mops is None else done_mops), tuple(assignment)))
        return index + 1


@pytest.fixture(scope="module")
def outputs(spark, tmp_path_factory):
    h = History()
    h.op(0, "send", 0, 10, [Send(Record("t", 0, None, 1))], [Send(record(1, 0))])            # offset 0 from 10
    h.op(1, "assign", 20, 21, assignment=[("t", 0)])
    h.op(1, "poll", 30, 40, [Poll()], [Poll((record(1, 0),))])                              # read the tail: 0
    h.op(1, "poll", 50, 60, [Poll()], [Poll()])                                             # caught up: 0
    h.op(0, "send", 100, 110, [Send(Record("t", 0, None, 2))], [Send(record(2, 1))])        # offset 1 from 110
    h.op(1, "poll", 200, 210, [Poll()], [Poll()])                                           # 200 - 110 = 90
    h.op(1, "assign", 300, 301, assignment=[("t", 0), ("u", 0)])                            # keeps t-0
    h.op(1, "poll", 400, 410, [Poll()], [Poll()])                                           # 400 - 110 = 290
    h.op(1, "assign", 500, 501, assignment=[("u", 0)])                                      # drops t-0
    h.op(1, "poll", 600, 610, [Poll()], [Poll()])                                           # no t-0 row
    h.op(1, "assign", 700, 701, assignment=[("t", 0)])                                      # back at -1
    h.op(1, "poll", 800, 810, [Poll()], [Poll()])                                           # 800 - 10 = 790
    h.op(2, "subscribe", 20, 21, assignment=[("t", None)])
    h.op(2, "poll", 900, 910, [Poll()], [Poll((record(1, 0), record(2, 1)))])
    h.op(2, "poll", 920, 930, [Poll()], [Poll((record(1, 0),))])                            # value 1 again
    h.op(3, "assign", 20, 21, assignment=[("t", 0)])
    h.op(3, "poll", 940, 950, [Poll()], [Poll((record(1, 0),))])
    h.op(3, "poll", 960, 970, [Poll()], [Poll((record(1, 0),))])                            # assign re-read: free
    return check_ops(spark, h.ops, tmp_path_factory.mktemp("outputs") / "history.parquet",
                     RunOptions(sub_via=frozenset({"assign", "subscribe"})))


def test_realtime_lag_is_poll_start_minus_when_the_next_offset_was_known_to_exist(outputs):
    rows = outputs.lag.filter(pc.equal(outputs.lag["topic"], "t")).sort_by("time_ns").to_pylist()
    process_1 = [(r["time_ns"], r["lag_ns"]) for r in rows if r["process"] == 1]
    # as Jepsen, a poll's own reads count: the first poll read the tail, so it lags by nothing
    assert process_1 == [(30, 0), (50, 0), (200, 90), (400, 290), (800, 790)]
    process_2 = [(r["time_ns"], r["lag_ns"]) for r in rows if r["process"] == 2]
    assert process_2 == [(900, 0), (920, 0)], "a subscribed process has lag rows where it read"
    worst = outputs.verdict["realtime-lag"]["worst"]
    assert worst["lag_s"] == pytest.approx(850e-9) and (worst["process"], worst["topic"]) == (3, "t")


def test_consume_counts_count_reads_of_subscribed_processes_only(outputs):
    counts = outputs.verdict["consume-counts"]
    assert counts == {"distribution": {"1": 1, "2": 1}, "dup-counts": {"t-0": {1: 2}}}


def test_outputs_never_make_a_history_invalid(outputs):
    assert outputs.valid, outputs.verdict["violations"]
