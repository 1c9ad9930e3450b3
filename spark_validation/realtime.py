"""Real-time order of one partition log (ORD-1 and VIS-1), by sort and running maximum.

A partition log is linearizable when its appends and reads fit one total order that
respects real time. The offsets fix the order of appends, so the order is verified, not
searched for. Two rules cover every way it can fail (with offsets unique, which
inconsistent-offsets and duplicate check):

- realtime-order (ORD-1): an append A acked before append B was invoked must have the
  lower offset. Sorted by time (invocations before completions at the same instant), the
  running maximum of completed appends' offsets must stay below each new append's.
- future-read (VIS-1): a read that returned offset m must come after every append at or
  below m, so each of those must have been invoked before the read completed. Sorted by
  offset, the running maximum of append invocation times must stay below each read's
  completion.

Each anomaly names the two ops that contradict each other: a minimal counterexample.
"""
from __future__ import annotations

import numpy as np

from spark_validation.anomalies import anomaly_row
from spark_validation.options import RunOptions
from spark_validation.partition_log import OK, PartitionLog, group_ends, group_starts

INVOKE, COMPLETE = 0, 1  # event order at equal times: "before" is strict


def _running_best(is_candidate: np.ndarray, keys: tuple[np.ndarray, ...]) -> np.ndarray:
    """Per event in order, the position of the greatest candidate so far (keys compared in
    order, as a struct), -1 before the first: a window max over a sorted stream."""
    candidates = np.flatnonzero(is_candidate)
    by_rank = candidates[np.lexsort([k[candidates] for k in keys[::-1]])]
    rank = np.full(len(is_candidate), -1)
    rank[by_rank] = np.arange(len(by_rank))
    best = np.maximum.accumulate(rank)
    return np.where(best >= 0, by_rank[np.maximum(best, 0)] if len(by_rank) else -1, -1)


def _per_op(p: PartitionLog, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rows (in index order) sorted by (op, offset), with the first and last row of each op."""
    rows = rows[np.lexsort((p.offset[rows], p.index[rows]))]
    starts = group_starts(p.index[rows])
    return rows, rows[starts], rows[group_ends(starts, len(rows)) - 1]


def realtime_order(p: PartitionLog, options: RunOptions) -> list[dict]:
    acked, low, high = _per_op(p, np.flatnonzero(p.is_send & (p.type == OK) & p.has_offset))
    if len(acked) == 0:
        return []
    n = len(low)
    # events: each append's completion (carrying its highest offset) and its invocation
    t = np.concatenate([p.time_ns[low], p.invoke_ns[low]])
    kind = np.repeat([COMPLETE, INVOKE], n)
    order = np.lexsort((kind, t))
    kind, op = kind[order], order % n
    done_offset, done_op, done_value = p.offset[high][op], p.index[high][op], p.value[high][op]
    done = _running_best(kind == COMPLETE, (done_offset, done_op, done_value))
    late = np.flatnonzero((kind == INVOKE) & (done >= 0))
    late = late[done_offset[done[late]] > p.offset[low][op[late]]]
    rows = []
    for e in late.tolist():
        a, b = high[op[done[e]]], low[op[e]]
        rows.append(anomaly_row(
            "realtime-order", f"op {p.index[a]} was acked with offset {p.offset[a]} of {p.where()} before op "
                              f"{p.index[b]} began, which got offset {p.offset[b]}",
            topic=p.topic, partition=p.partition, ops=[int(p.index[a]), int(p.index[b])],
            values=[int(p.value[a]), int(p.value[b])], offsets=[int(p.offset[a]), int(p.offset[b])]))
    return rows


def future_read(p: PartitionLog, options: RunOptions) -> list[dict]:
    writer, found = p.writer_of(p.log_value)
    appended = np.flatnonzero(found)  # log entries with a writer
    writer = writer[found]
    reads, _, highest = _per_op(p, np.flatnonzero(p.is_read & p.has_offset))
    if len(appended) == 0 or len(reads) == 0:
        return []
    n = len(appended)
    # events: appends at their offset, then reads at the highest offset they returned
    position = np.concatenate([p.log_offset[appended], p.offset[highest]])
    kind = np.repeat([0, 1], [n, len(highest)])
    order = np.lexsort((kind, position))
    kind, position = kind[order], position[order]
    keys = tuple(np.concatenate([a, np.zeros(len(highest), np.int64)])[order]
                 for a in (p.invoke_ns[writer], p.index[writer], p.log_offset[appended], p.log_value[appended]))
    latest = _running_best(kind == 0, keys)
    early = np.flatnonzero((kind == 1) & (latest >= 0))
    read_row = highest[order[early] - n]
    early_now = p.invoke_ns[writer][order[latest[early]]] > p.time_ns[read_row]
    rows = []
    for e, r in zip(early[early_now].tolist(), read_row[early_now].tolist()):
        a = order[latest[e]]
        op, value, offset = int(p.index[writer[a]]), int(p.log_value[appended[a]]), int(p.log_offset[appended[a]])
        rows.append(anomaly_row(
            "future-read", f"op {p.index[r]} read {p.where()} up to offset {position[e]} and completed before op "
                           f"{op}, which appended value {value} at offset {offset}, was invoked",
            topic=p.topic, partition=p.partition, ops=[op, int(p.index[r])], values=[value],
            offsets=[offset, int(position[e])]))
    return rows
