"""Realtime lag per topic-partition: how far behind the log each consumer was when it polled.

Jepsen's informational realtime lag (research/jepsen.md section 3), never an error:
offset i of a partition is known to exist from the earliest completion that named it or a
higher offset (a send's ack, a read). A process tracks the highest offset it read of each
partition it has, -1 at first; an ok assign keeps the partitions it retains and starts new
ones at -1, an ok subscribe forgets them all. Each ok poll or txn of a process that has the
partition, or that read it, has lag = its invocation time - the time offset (highest + 1)
was known to exist, at least 0 (0 when that offset was never known to exist).

Per partition this is a sort, a segmented running maximum and a searchsorted: events are
the partition's read ops and its assigned polls (frames.py) and the assignments that
dropped it, by (process, index); a drop starts a new segment. In subscribe mode a poll
that read nothing of a partition has no lag row (Jepsen's would keep the partition once read).

Rows are (topic, partition, process, time_ns, lag_ns); a partition with more than
LAG_POINTS_MAX keeps the worst lag of each of LAG_POINTS_MAX equal time buckets.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from spark_validation.partition_log import NO_NS, OK, POLL, TXN, PartitionLog, group_starts

LAG_FILE = "realtime-lag.parquet"  # the rows, beside verdict.json
LAG_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("process", pa.int64()),
                        ("time_ns", pa.int64()), ("lag_ns", pa.int64())])
LAG_POINTS_MAX = 2048
SEGMENT_SPAN = 1 << 40  # offsets + 1 stay below this, so segment * SEGMENT_SPAN + offset orders by segment first
RESET, POLLED = 0, 1     # event kinds; a drop before a poll of the same op index cannot happen (one op per index)


def known_since(p: PartitionLog) -> tuple[np.ndarray, np.ndarray]:
    """(offsets named by any completion, ascending; per offset the earliest time it or a higher one was named)."""
    named = np.flatnonzero(p.has_offset)
    order = np.lexsort((p.time_ns[named], p.offset[named]))
    offsets, times = p.offset[named][order], p.time_ns[named][order]
    return offsets, np.minimum.accumulate(times[::-1])[::-1] if len(times) else times


def realtime_lag(p: PartitionLog) -> pa.Table:
    reads = np.flatnonzero(p.is_read & (p.type == OK) & ((p.f == POLL) | (p.f == TXN)))
    starts = group_starts(p.index[reads])
    first = reads[starts]
    highest = np.maximum.reduceat(np.where(p.has_offset[reads], p.offset[reads], -1), starts) if len(reads) else \
        np.zeros(0, np.int64)
    polled_index, polled_process, polled_invoke = p.assigned_polls
    reset_process, reset_index = p.resets
    process = np.concatenate([p.process[first], polled_process, reset_process])
    index = np.concatenate([p.index[first], polled_index, reset_index])
    invoke_ns = np.concatenate([p.invoke_ns[first], polled_invoke, np.full(len(reset_index), NO_NS)])
    offset = np.concatenate([highest, np.full(len(polled_index) + len(reset_index), -1)])
    kind = np.repeat([POLLED, POLLED, RESET], [len(first), len(polled_index), len(reset_index)])
    order = np.lexsort((-offset, index, process))  # an op both read and assigned: its read first
    process, index, invoke_ns, offset, kind = process[order], index[order], invoke_ns[order], offset[order], kind[order]
    once = np.ones(len(index), bool)
    once[1:] = (index[1:] != index[:-1]) | (process[1:] != process[:-1])
    process, index, invoke_ns, offset, kind = process[once], index[once], invoke_ns[once], offset[once], kind[once]
    if not (kind == POLLED).any():
        return LAG_SCHEMA.empty_table()
    new_segment = np.ones(len(index), bool)
    new_segment[1:] = (process[1:] != process[:-1]) | (kind[1:] == RESET)
    segment = np.cumsum(new_segment)
    assert (offset + 1 < SEGMENT_SPAN).all()
    highest_read = np.maximum.accumulate(segment * SEGMENT_SPAN + offset + 1) - segment * SEGMENT_SPAN - 1
    polls = (kind == POLLED) & (invoke_ns != NO_NS)
    offsets, since_ns = known_since(p)
    at = np.searchsorted(offsets, highest_read[polls] + 1)
    if len(offsets) == 0:  # no offset of the partition is known (nothing written): no poll lags behind
        return _thinned(p, process[polls], invoke_ns[polls], np.zeros(int(polls.sum()), np.int64))
    known = at < len(offsets)
    lag_ns = np.where(known, np.maximum(invoke_ns[polls] - since_ns[np.minimum(at, len(offsets) - 1)], 0), 0)
    return _thinned(p, process[polls], invoke_ns[polls], lag_ns)


def _thinned(p: PartitionLog, process: np.ndarray, time_ns: np.ndarray, lag_ns: np.ndarray) -> pa.Table:
    if len(lag_ns) > LAG_POINTS_MAX:
        span_ns = int(time_ns.max() - time_ns.min()) + 1
        bucket = (time_ns - time_ns.min()) * LAG_POINTS_MAX // span_ns
        order = np.lexsort((-lag_ns, bucket))
        worst = order[group_starts(bucket[order])]
        process, time_ns, lag_ns = process[worst], time_ns[worst], lag_ns[worst]
    assert len(lag_ns) <= LAG_POINTS_MAX and (lag_ns >= 0).all()
    return pa.table({"topic": pa.array([p.topic] * len(lag_ns), pa.string()),
                     "partition": pa.array([p.partition] * len(lag_ns), pa.int32()),
                     "process": process, "time_ns": time_ns, "lag_ns": lag_ns}, schema=LAG_SCHEMA)
