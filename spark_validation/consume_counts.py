"""Consume counts per topic-partition: how often each subscribed process read each value.

Jepsen's informational exactly-once probe (research/jepsen.md section 3), never an error:
over the ok polls and txns of processes that had done an ok subscribe before them (assign
reads may re-read freely), count the reads of each (process, value). The result is the
distribution {count: number of (process, partition, value)} and, for every value some
process read more than once, that count (the highest over processes).

Rows are (topic, partition, value, count, triples): a distribution row has no value and
the number of triples read `count` times; a duplicate row has the value and its count. The
verdict lists at most DUP_COUNTS_MAX duplicates (the first by topic, partition and value), so a
partition gives at most that many (its lowest values): the distribution counts them all.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from spark_validation.partition_log import OK, POLL, TXN, PartitionLog, distinct_rows, group_ends, group_starts, lookup

CONSUME_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("value", pa.int64()),
                            ("count", pa.int64()), ("triples", pa.int64())])
DUP_COUNTS_MAX = 1024  # duplicates listed in the verdict (and given by one partition)


def consume_counts(p: PartitionLog) -> pa.Table:
    subscribe_process, subscribe_index = p.subscribed
    reads = np.flatnonzero(p.is_read & (p.type == OK) & ((p.f == POLL) | (p.f == TXN)))
    first = distinct_rows(subscribe_process, subscribe_index)
    first = first[group_starts(subscribe_process[first])]  # each process's first ok subscribe
    at, found = lookup(subscribe_process[first], p.process[reads])
    reads = reads[found & (p.index[reads] > subscribe_index[first][at])] if len(first) else reads[:0]
    order = np.lexsort((p.value[reads], p.process[reads]))
    process, value = p.process[reads][order], p.value[reads][order]
    starts = group_starts(process, value)
    count = group_ends(starts, len(value)) - starts
    counts, triples = np.unique(count, return_counts=True)
    dup = np.flatnonzero(count > 1)
    dup_value, dup_count = value[starts][dup], count[dup]
    by_value = np.lexsort((-dup_count, dup_value))
    highest = by_value[group_starts(dup_value[by_value])][:DUP_COUNTS_MAX]  # ascending by value
    values = np.concatenate([np.zeros(len(counts), np.int64), dup_value[highest]])
    rows = len(counts) + len(highest)
    return pa.table({"topic": pa.array([p.topic] * rows, pa.string()),
                     "partition": pa.array([p.partition] * rows, pa.int32()),
                     "value": pa.array(values, mask=np.arange(rows) < len(counts)),
                     "count": np.concatenate([counts, dup_count[highest]]).astype(np.int64),
                     "triples": pa.array(np.concatenate([triples, np.zeros(len(highest), np.int64)]),
                                         mask=np.arange(rows) >= len(counts))}, schema=CONSUME_SCHEMA)
