"""Transactional visibility, per topic-partition: G1a (TXN-2, aborted read),
precommitted-read (TXN-2) and G1b (TXN-1, intermediate read).

G1a (Jepsen): an ok op read a value that a failed op sent; fail means the write (or its
transaction) definitely did not happen. precommitted-read (Jepsen): an op read a value
it sent itself, which a read_committed consumer can only see after the commit.
G1b (kspec; Jepsen has none): a log has no overwrites, so reading an intermediate state
of a committed transaction W means seeing part of W's records in a partition: an ok
read op whose reads of the partition span an offset W wrote there, read some of W's
records, but not that one. (Its offsets are known because W is ok.)
"""
from __future__ import annotations

import numpy as np

from spark_validation.anomalies import anomaly_row
from spark_validation.options import RunOptions
from spark_validation.partition_log import (FAIL, OK, TXN, PartitionLog, distinct_rows, group_starts, join_rows,
                                             member, sorted_unique)


def _offset(p: PartitionLog, row: int) -> int | None:
    return int(p.offset[row]) if p.has_offset[row] else None


def g1a(p: PartitionLog, options: RunOptions) -> list[dict]:
    failed = np.flatnonzero(p.is_send & (p.type == FAIL))
    reads = np.flatnonzero(p.is_read & (p.type == OK))
    reads = reads[member(sorted_unique(p.value[failed]), p.value[reads])]
    pairs = [(int(p.value[r]), _offset(p, r), int(p.index[r]), int(p.index[w]))
             for r in reads.tolist() for w in failed[p.value[failed] == p.value[r]].tolist()
             if p.index[r] != p.index[w]]
    return [anomaly_row("G1a", f"op {reader} read value {value} of {p.where()}, which failed op {writer} wrote",
                        topic=p.topic, partition=p.partition, ops=[writer, reader], values=[value], offsets=[offset])
            for value, offset, reader, writer in sorted(set(pairs), key=lambda t: (t[0], t[2], t[3], t[1] or -1))]


def precommitted_read(p: PartitionLog, options: RunOptions) -> list[dict]:
    sends, reads = np.flatnonzero(p.is_send), np.flatnonzero(p.is_read)
    sent = sorted_unique(p.op_value_key(p.op_code[sends], p.value_code[sends]))
    own = reads[member(sent, p.op_value_key(p.op_code[reads], p.value_code[reads]))]
    rows = []
    for op in np.unique(p.index[own]).tolist():
        these = own[p.index[own] == op]
        values = np.unique(p.value[these]).tolist()
        offsets = np.unique(p.offset[these][p.has_offset[these]]).tolist()
        rows.append(anomaly_row(
            "precommitted-read", f"op {op} read its own uncommitted value(s) {', '.join(map(str, values))} "
                                 f"of {p.where()}",
            topic=p.topic, partition=p.partition, process=int(p.process[these[0]]), ops=[op], values=values,
            offsets=offsets))
    return rows


def g1b(p: PartitionLog, options: RunOptions) -> list[dict]:
    writes = np.flatnonzero(p.is_send & (p.f == TXN) & (p.type == OK) & p.has_offset)
    reads = np.flatnonzero(p.is_read & (p.type == OK) & p.has_offset)
    r, w = join_rows(p.value[reads], p.value[writes])
    other = p.index[reads[r]] != p.index[writes[w]]
    pairs = distinct_rows(p.index[reads[r]][other], p.index[writes[w]][other])
    reader_row, writer = reads[r][other][pairs], p.index[writes[w]][other][pairs]
    reader = p.index[reader_row]
    if len(reader) == 0:
        return []
    starts = group_starts(p.index[reads])  # rows are in index order
    read_ops = p.index[reads][starts]
    lo = np.minimum.reduceat(p.offset[reads], starts)[np.searchsorted(read_ops, reader)]
    hi = np.maximum.reduceat(p.offset[reads], starts)[np.searchsorted(read_ops, reader)]
    pair, w = join_rows(writer, p.index[writes])  # every write of the pair's transaction here
    inside = (p.offset[writes[w]] > lo[pair]) & (p.offset[writes[w]] < hi[pair])
    pair, w = pair[inside], writes[w[inside]]
    was_read = sorted_unique(p.op_value_key(p.op_code[reads], p.value_code[reads]))
    unread = ~member(was_read, p.op_value_key(p.op_code[reader_row[pair]], p.value_code[w]))
    pair, w = pair[unread], w[unread]
    rows = []
    for k in np.unique(pair).tolist():
        these = w[pair == k]
        these = these[np.lexsort((p.value[these], p.offset[these]))]
        values, offsets = p.value[these].tolist(), p.offset[these].tolist()
        rows.append(anomaly_row(
            "G1b", f"op {reader[k]} read offsets {lo[k]}..{hi[k]} of {p.where()}, some of transaction {writer[k]}'s "
                   f"records but not value(s) {', '.join(map(str, values))}",
            topic=p.topic, partition=p.partition, ops=[int(writer[k]), int(reader[k])], values=values,
            offsets=offsets))
    return rows
