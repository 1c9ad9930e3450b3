"""One topic-partition's micro-operations as numpy arrays, and the tables every check derives from them.

The Spark pass (frames.py) groups the history by topic-partition and hands each group here;
the per-partition checks read only a PartitionLog, so they are plain numpy and Spark spreads
the partitions over its workers. Names follow Jepsen's Kafka checker (research/jepsen.md
section 2), partitioned by topic-partition instead of Jepsen's abstract key:

- log: the version order's raw slots, distinct (offset, value) from every poll (any
  completion type: pollers report offsets truthfully) and from the sends of ops that
  must have committed (ok, or info with a send some ok op read, in any partition)
- idx: the dense index of an offset among the occupied slots; a mop's idx is the last
  dense index of its value (Jepsen's :by-value), NO_IDX when the value is not in the log
- value_index: per value in the log its first and last dense index
- by_index: one value per dense index (the smallest when a slot conflicts)
- writer_of: per value the lowest index of an op that sent it

Beside the mops, a partition gets the ok polls of processes that had it assigned (for the
realtime lag of polls that read nothing here) and the processes' ok subscribes.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

OK, FAIL, INFO = 0, 1, 2          # completion types
SEND, POLL, TXN = 0, 1, 2         # client functions (spec.history.CLIENT_FS)
TYPE_CODES = {"ok": OK, "fail": FAIL, "info": INFO}
F_CODES = {"send": SEND, "poll": POLL, "txn": TXN}
NO_OFFSET = -1                    # offsets are never negative in Kafka
NO_IDX = -1
NO_NS = np.iinfo(np.int64).min    # an unknown invocation time sorts before every known one

# the columns of one group, as the Spark pass encodes them
MOP_SCHEMA = pa.schema([
    ("index", pa.int64()), ("seq", pa.int32()), ("process", pa.int64()), ("type", pa.int8()), ("f", pa.int8()),
    ("is_send", pa.bool_()), ("time_ns", pa.int64()), ("invoke_ns", pa.int64()), ("value", pa.int64()),
    ("offset", pa.int64()), ("rebalanced", pa.bool_()),
])

# the ok polls and txns of processes that had the partition assigned
POLL_SCHEMA = pa.schema([("index", pa.int64()), ("process", pa.int64()), ("invoke_ns", pa.int64())])
NONE = (np.zeros(0, np.int64), np.zeros(0, np.int64))
# (op, value) of the sends its client reported timed out to the application
TIMED_OUT_SCHEMA = pa.schema([("index", pa.int64()), ("value", pa.int64())])


def distinct_rows(*columns: np.ndarray) -> np.ndarray:
    """Positions of the distinct rows of columns, sorted by the columns (first most significant)."""
    n = len(columns[0])
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort(columns[::-1])
    new = np.zeros(n, bool)
    new[0] = True
    for c in columns:
        s = c[order]
        new[1:] |= s[1:] != s[:-1]
    return order[new]


def group_starts(*keys: np.ndarray) -> np.ndarray:
    """Starts of runs of equal keys in arrays already sorted by them (always includes 0)."""
    n = len(keys[0])
    new = np.zeros(n, bool)
    if n:
        new[0] = True
    for k in keys:
        new[1:] |= k[1:] != k[:-1]
    return np.flatnonzero(new)


def group_ends(starts: np.ndarray, n: int) -> np.ndarray:
    """Ends (exclusive) of the runs that start at starts, in n rows."""
    return np.append(starts[1:], n) if len(starts) else starts


def lookup(sorted_keys: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position, found) of each x in sorted unique keys."""
    at = np.searchsorted(sorted_keys, x)
    safe = np.minimum(at, max(len(sorted_keys) - 1, 0))
    found = (at < len(sorted_keys)) & (sorted_keys[safe] == x) if len(sorted_keys) else np.zeros(len(x), bool)
    return safe, found


def join_rows(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) for every pair with left[i] == right[j] (an inner join), in left order."""
    order = np.argsort(right, kind="stable")
    lo = np.searchsorted(right[order], left, "left")
    counts = np.searchsorted(right[order], left, "right") - lo
    i = np.repeat(np.arange(len(left)), counts)
    within = np.arange(len(i)) - np.repeat(np.cumsum(counts) - counts, counts)
    return i, order[np.repeat(lo, counts) + within]


def sorted_unique(x: np.ndarray) -> np.ndarray:
    """The distinct values of x, ascending (by sorting: numpy's hash-based unique is slower here)."""
    s = np.sort(x)
    return s[np.append(True, s[1:] != s[:-1])] if len(s) else s


def member(sorted_keys: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Whether each x is one of sorted unique keys."""
    return lookup(sorted_keys, x)[1]


class PartitionLog:
    """The mops of one topic-partition (rows in (index, seq) order) and their derived tables."""

    def __init__(self, topic: str, partition: int, mops: pa.Table, proven_ops: np.ndarray,
                 resets: tuple[np.ndarray, np.ndarray] = NONE, assigned_polls: pa.Table | None = None,
                 subscribed: tuple[np.ndarray, np.ndarray] = NONE, timed_out_sends: pa.Table | None = None):
        """mops in MOP_SCHEMA; proven_ops: info ops proven committed; resets: (process, op index) of the
        assign/subscribe ops that dropped this partition; assigned_polls in POLL_SCHEMA; subscribed:
        (process, op index) of every ok subscribe; timed_out_sends in TIMED_OUT_SCHEMA."""
        self.topic, self.partition = topic, partition
        self.resets = resets
        self.subscribed = subscribed
        polls = POLL_SCHEMA.empty_table() if assigned_polls is None else assigned_polls
        self.assigned_polls = tuple(polls.column(name).to_numpy() for name in POLL_SCHEMA.names)
        cols = {name: mops.column(name).to_numpy() for name in MOP_SCHEMA.names}
        index, seq = cols["index"], cols["seq"]
        in_order = (index[1:] > index[:-1]) | ((index[1:] == index[:-1]) & (seq[1:] > seq[:-1]))
        order = np.arange(len(index)) if in_order.all() else np.lexsort((seq, index))
        for name, column in cols.items():
            setattr(self, name, column[order])
        self.n = len(order)
        self.is_read = ~self.is_send
        self.timed_out = np.zeros(self.n, bool)  # a send reported timed out to the application
        if timed_out_sends is not None and timed_out_sends.num_rows:
            reported = set(zip(timed_out_sends["index"].to_pylist(), timed_out_sends["value"].to_pylist()))
            for row in np.flatnonzero(self.is_send & member(sorted_unique(timed_out_sends["index"].to_numpy()),
                                                            self.index)).tolist():
                self.timed_out[row] = (int(self.index[row]), int(self.value[row])) in reported
        self.has_offset = self.offset != NO_OFFSET
        ok = self.type == OK
        self.ok_read_values = sorted_unique(self.value[self.is_read & ok])
        committed = self.is_send & (ok | ((self.type == INFO) & member(proven_ops, self.index)))
        self.committed = committed

        in_log = np.flatnonzero((self.is_read | committed) & self.has_offset)
        log = in_log[distinct_rows(self.offset[in_log], self.value[in_log])]
        self.log_offset, self.log_value = self.offset[log], self.value[log]  # sorted by (offset, value)
        self.slots = self.log_offset[group_starts(self.log_offset)]
        self.log_idx = np.searchsorted(self.slots, self.log_offset)

        by_value = np.lexsort((self.log_idx, self.log_value))
        starts = group_starts(self.log_value[by_value])
        ends = group_ends(starts, len(by_value))
        self.vi_value = self.log_value[by_value][starts]
        self.vi_first_idx = self.log_idx[by_value][starts]
        self.vi_idx = self.log_idx[by_value][ends - 1]
        at, found = lookup(self.vi_value, self.value)
        # a partition whose log is empty (every send failed or unknown, nothing read) has no values to find
        self.idx = np.where(found, self.vi_idx[at], NO_IDX) if len(self.vi_idx) else np.full(len(self.value), NO_IDX)

        first_of_slot = group_starts(self.log_offset)  # the log is sorted by (offset, value)
        self.bi_value = self.log_value[first_of_slot]

        sends = np.flatnonzero(self.is_send)
        first_send = sends[distinct_rows(self.value[sends], self.index[sends])]
        first_send = first_send[group_starts(self.value[first_send])]
        self.wo_value, self.wo_row = self.value[first_send], first_send  # the writer's row: index, process, invoke

        # (op, value) pairs as one int64 key: op codes count ops in row order, value codes rank values
        self.op_code = np.cumsum(np.append(True, self.index[1:] != self.index[:-1])[:self.n]) - 1
        self.values = sorted_unique(self.value)
        self.value_code = np.searchsorted(self.values, self.value)

    def op_value_key(self, op_code: np.ndarray, value_code: np.ndarray) -> np.ndarray:
        return op_code * len(self.values) + value_code

    def writer_of(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row of the writer's send, found) per value."""
        at, found = lookup(self.wo_value, values)
        return self.wo_row[at] if len(self.wo_row) else np.zeros(len(values), np.int64), found

    def value_offsets(self, value: int) -> list[int]:
        """The distinct offsets the log holds value at, ascending."""
        return sorted_unique(self.log_offset[self.log_value == value]).tolist()

    def skipped(self, prev_idx: int, cur_idx: int) -> list[int]:
        """The values at the dense indices strictly between two."""
        return self.bi_value[prev_idx + 1:cur_idx].tolist() if cur_idx > prev_idx + 1 else []

    def where(self) -> str:
        return f"{self.topic}-{self.partition}"
