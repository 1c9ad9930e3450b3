"""Durability, per topic-partition: lost-write (DUR-1, with the highest-read rule), unseen
(DUR-1) and phantom-read (VIS-1).

lost-write (Jepsen): the bound is the highest first dense index of any value an ok op
read. Every value whose last dense index is at or below the bound must have been read;
one that was not, sent by an op that must have committed, is lost.
unseen: values acknowledged to producers that no ok op ever read.
phantom-read: a value read from the partition that no op ever sent there.
"""
from __future__ import annotations

import numpy as np

from spark_validation.anomalies import anomaly_row
from spark_validation.options import RunOptions
from spark_validation.partition_log import OK, PartitionLog, distinct_rows, group_starts, member

EVIDENCE_VALUES_MAX = 1024  # unseen values listed per partition; the count is exact


def lost_write(p: PartitionLog, options: RunOptions) -> list[dict]:
    read = member(p.ok_read_values, p.vi_value)
    if not read.any():
        return []
    top = np.lexsort((p.vi_value[read], p.vi_first_idx[read]))[-1]
    bound_idx, bound_value = int(p.vi_first_idx[read][top]), int(p.vi_value[read][top])
    committed = np.flatnonzero(p.committed)
    writers = committed[distinct_rows(p.value[committed], p.index[committed])]
    writers = writers[group_starts(p.value[writers])]  # the lowest committed op index per value
    rows = []
    for i in np.flatnonzero(~read & (p.vi_idx <= bound_idx)).tolist():
        value, idx = int(p.vi_value[i]), int(p.vi_idx[i])
        at = np.searchsorted(p.value[writers], value)
        if at == len(writers) or p.value[writers[at]] != value:
            continue
        writer = int(p.index[writers[at]])
        rows.append(anomaly_row(
            "lost-write", f"value {value} of {p.where()} (op {writer}, dense index {idx}) was never read, though "
                          f"ok polls read value {bound_value} at index {bound_idx} after it",
            topic=p.topic, partition=p.partition, ops=[writer], values=[value], offsets=p.value_offsets(value)))
    return rows


def unseen(p: PartitionLog, options: RunOptions) -> list[dict]:
    acked = np.flatnonzero(p.is_send & (p.type == OK))
    missing = acked[~member(p.ok_read_values, p.value[acked])]
    if len(missing) == 0:
        return []
    offsets = p.offset[missing]
    # sorted by (value, op, offset) with unknown offsets first, as listed evidence
    missing = missing[np.lexsort((offsets, p.has_offset[missing], p.index[missing], p.value[missing]))]
    shown = missing[:EVIDENCE_VALUES_MAX]
    return [anomaly_row(
        "unseen", f"{len(missing)} acknowledged value(s) of {p.where()} were never read",
        topic=p.topic, partition=p.partition, ops=np.unique(p.index[missing])[:EVIDENCE_VALUES_MAX].tolist(),
        values=p.value[shown].tolist(),
        offsets=[int(o) if known else None for o, known in zip(p.offset[shown], p.has_offset[shown])])]


def phantom_read(p: PartitionLog, options: RunOptions) -> list[dict]:
    reads = np.flatnonzero(p.is_read)
    phantoms = reads[~member(p.wo_value, p.value[reads])]
    rows = []
    for value in np.unique(p.value[phantoms]).tolist():
        these = phantoms[p.value[phantoms] == value]
        readers = np.unique(p.index[these]).tolist()
        offsets = np.unique(p.offset[these][p.has_offset[these]]).tolist()
        rows.append(anomaly_row(
            "phantom-read", f"value {value} was read from {p.where()} by op(s) {', '.join(map(str, readers))} "
                            "but never sent",
            topic=p.topic, partition=p.partition, ops=readers, values=[value], offsets=offsets))
    return rows
