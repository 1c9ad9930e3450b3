"""Order, per topic-partition: poll-skip and nonmonotonic-poll (ORD-3), nonmonotonic-send and
send-skip (ORD-2), and their internal variants.

All compare dense indices in the version order (delta = index(current) - index(previous);
an unknown index gives delta 1, no error), as Jepsen does:

- Across ops of one process, in history order: the previous value is the last one the
  process's last ok op read (or, for sends, the last ok/info op sent) in the partition;
  the current value is the first one this op read (sent). fail/info polls are checked
  but do not move the position: their reads were rolled back. An ok/info assign or
  subscribe keeps the position only of the partitions it retains.
- Within one op: consecutive reads (sends) of a partition in mop order; a partition in
  the op's rebalance log is exempt from the read checks.

delta > 1 skips records, delta < 1 goes backwards. Between one process's sends, other
producers' records interleave freely, so send-skip (kspec; Jepsen has no external
send-skip) counts only the process's own records from other ops landing in the gap: its
records were stored out of send order. Within one op, a skip is allowed (int-send-skip).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spark_validation.anomalies import anomaly_row
from spark_validation.options import RunOptions
from spark_validation.partition_log import (FAIL, INFO, NO_IDX, OK, POLL, TXN, PartitionLog, group_ends, group_starts,
                                             lookup, member)


def _delta(prev_idx: np.ndarray, cur_idx: np.ndarray) -> np.ndarray:
    return np.where((prev_idx == NO_IDX) | (cur_idx == NO_IDX), 1, cur_idx - prev_idx)


@dataclass
class Steps:
    """Pairs (previous, current) found by a scan, as parallel arrays, with delta."""
    process: np.ndarray
    prev_op: np.ndarray
    op: np.ndarray
    prev_value: np.ndarray
    value: np.ndarray
    prev_idx: np.ndarray
    idx: np.ndarray

    @property
    def delta(self) -> np.ndarray:
        return _delta(self.prev_idx, self.idx)

    def where(self, keep: np.ndarray) -> "Steps":
        return Steps(*(getattr(self, name)[keep] for name in self.__dataclass_fields__))


def _process_scan(p: PartitionLog, rows: np.ndarray, moves: np.ndarray) -> Steps:
    """Each op of rows (row positions, in index order) against the position before it in its
    process; `moves` (per row) says which ops set the position. Assignments that drop the
    partition reset it."""
    starts = group_starts(p.index[rows])
    first, last = rows[starts], rows[group_ends(starts, len(rows)) - 1]
    reset_process, reset_index = p.resets
    process = np.concatenate([p.process[first], reset_process])
    index = np.concatenate([p.index[first], reset_index])
    is_op = np.arange(len(index)) < len(first)
    sets = np.concatenate([moves[first], np.ones(len(reset_index), bool)])
    order = np.lexsort((index, process))
    process, is_op, sets = process[order], is_op[order], sets[order]  # events; order[e] is op e's position
    position = np.where(sets, np.arange(len(order)), -1)
    carried = np.maximum.accumulate(np.concatenate([[-1], position[:-1]])) if len(order) else position
    process_start = np.repeat(group_starts(process), np.diff(np.append(group_starts(process), len(process))))
    checked = is_op & (carried >= process_start)
    checked[checked] &= is_op[carried[checked]]  # a reset before the op: nothing to compare with
    now, before = order[checked], order[carried[checked]]
    return Steps(process[checked], p.index[last[before]], p.index[first[now]], p.value[last[before]],
                 p.value[first[now]], p.idx[last[before]], p.idx[first[now]])


def _internal_scan(p: PartitionLog, rows: np.ndarray) -> Steps:
    same_op = p.index[rows][1:] == p.index[rows][:-1]
    prev, cur = rows[:-1][same_op], rows[1:][same_op]
    steps = Steps(p.process[cur], p.index[cur], p.index[cur], p.value[prev], p.value[cur], p.idx[prev], p.idx[cur])
    return steps.where(steps.delta != 1)


def _joined(values) -> str:
    return ", ".join(map(str, values))


def poll_order(p: PartitionLog, options: RunOptions) -> list[dict]:
    reads = np.flatnonzero(p.is_read & ((p.f == POLL) | (p.f == TXN)))
    steps = _process_scan(p, reads, p.type == OK)
    steps = steps.where(steps.delta != 1)
    rows = []
    for i in range(len(steps.op)):
        delta, prev_idx, idx = int(steps.delta[i]), int(steps.prev_idx[i]), int(steps.idx[i])
        skipped = p.skipped(prev_idx, idx) if delta > 1 else []
        rows.append(anomaly_row(
            "poll-skip" if delta > 1 else "nonmonotonic-poll",
            f"process {steps.process[i]} read value {steps.prev_value[i]} of {p.where()} in op {steps.prev_op[i]}, "
            f"then value {steps.value[i]} first in op {steps.op[i]} (delta {delta}; skipped {_joined(skipped)})",
            violation="subscribe" not in options.sub_via, topic=p.topic, partition=p.partition,
            process=int(steps.process[i]), ops=[int(steps.prev_op[i]), int(steps.op[i])],
            values=[int(steps.prev_value[i]), int(steps.value[i])], delta=delta))
    return rows


def _own_rank(p: PartitionLog) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, writer's process, rank) per written value in the log: its rank among the values
    its writer's process sent to the partition, in log order (dense over indices). A failed op's
    value found in the log (an aborted transaction's record that a read returned) is left out:
    it is G1a's evidence, not a send stored out of order. So is a value no ok read returned: its
    place is only the offset its ack named, and a record lost after its ack (DUR-1, or DUR-2's
    acks=1 window) was never stored out of order, nor between two records that were."""
    row, found = p.writer_of(p.vi_value)
    found &= (p.type[row] != FAIL) & member(p.ok_read_values, p.vi_value)
    value, idx, process = p.vi_value[found], p.vi_idx[found], p.process[row[found]]
    order = np.lexsort((idx, process))
    new = np.ones(len(order), bool)
    new[1:] = (process[order][1:] != process[order][:-1]) | (idx[order][1:] != idx[order][:-1])
    dense = np.cumsum(new)
    starts = group_starts(process[order])
    rank = np.empty(len(order), np.int64)
    rank[order] = dense - np.repeat(dense[starts] - 1, np.diff(np.append(starts, len(order))))
    return value, process, rank  # value is sorted (value_index order)


def send_order(p: PartitionLog, options: RunOptions) -> list[dict]:
    sends = np.flatnonzero(p.is_send & ((p.type == OK) | (p.type == INFO)))
    steps = _process_scan(p, sends, np.ones(p.n, bool))
    steps = steps.where(steps.delta != 1)
    value, process, rank = _own_rank(p)

    def rank_of(values: np.ndarray) -> np.ndarray:
        if len(value) == 0:
            return np.full(len(values), -1)
        at, found = lookup(value, values)
        return np.where(found & (process[at] == steps.process), rank[at], -1)

    prev_rank, cur_rank = rank_of(steps.prev_value), rank_of(steps.value)
    own_between = np.where((prev_rank >= 0) & (cur_rank >= 0), cur_rank - prev_rank - 1, 0)
    keep = (steps.delta < 1) | (own_between > 0)
    steps, own_between = steps.where(keep), own_between[keep]
    rows = []
    for i in range(len(steps.op)):
        delta = int(steps.delta[i])
        rows.append(anomaly_row(
            "send-skip" if delta > 1 else "nonmonotonic-send",
            f"process {steps.process[i]} sent value {steps.prev_value[i]} to {p.where()} in op {steps.prev_op[i]}, "
            f"then value {steps.value[i]} in op {steps.op[i]} (delta {delta}; {max(int(own_between[i]), 0)} of its "
            "own records from other ops between)",
            topic=p.topic, partition=p.partition, process=int(steps.process[i]),
            ops=[int(steps.prev_op[i]), int(steps.op[i])], values=[int(steps.prev_value[i]), int(steps.value[i])],
            delta=delta))
    return rows


def internal_poll_order(p: PartitionLog, options: RunOptions) -> list[dict]:
    reads = np.flatnonzero(p.is_read & ((p.f == POLL) | (p.f == TXN)) & ~p.rebalanced)
    steps = _internal_scan(p, reads)
    rows = []
    for i in range(len(steps.op)):
        delta = int(steps.delta[i])
        skipped = p.skipped(int(steps.prev_idx[i]), int(steps.idx[i])) if delta > 1 else []
        rows.append(anomaly_row(
            "int-poll-skip" if delta > 1 else "int-nonmonotonic-poll",
            f"op {steps.op[i]} read value {steps.prev_value[i]} then value {steps.value[i]} of {p.where()} "
            f"(delta {delta}; skipped {_joined(skipped)})",
            topic=p.topic, partition=p.partition, process=int(steps.process[i]), ops=[int(steps.op[i])],
            values=[int(steps.prev_value[i]), int(steps.value[i])], delta=delta))
    return rows


def internal_send_order(p: PartitionLog, options: RunOptions) -> list[dict]:
    steps = _internal_scan(p, np.flatnonzero(p.is_send))
    rows = []
    for i in range(len(steps.op)):
        delta = int(steps.delta[i])
        rows.append(anomaly_row(
            "int-send-skip" if delta > 1 else "int-nonmonotonic-send",
            f"op {steps.op[i]} sent value {steps.prev_value[i]} then value {steps.value[i]} to {p.where()} "
            f"(delta {delta})",
            violation=delta < 1, topic=p.topic, partition=p.partition, process=int(steps.process[i]),
            ops=[int(steps.op[i])], values=[int(steps.prev_value[i]), int(steps.value[i])], delta=delta))
    return rows
