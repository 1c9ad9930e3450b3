"""Offset integrity: inconsistent-offsets (VIS-2: one offset, two values) and duplicate
(IDM-1: one value, two offsets), per topic-partition.

Both read the raw version-order log, so they hold even when the other is violated.
"""
from __future__ import annotations

import numpy as np

from spark_validation.anomalies import anomaly_row
from spark_validation.options import RunOptions
from spark_validation.partition_log import PartitionLog, group_ends, group_starts

EVIDENCE_OPS_MAX = 16  # ops listed per anomaly; the rest are in the history


def _join(values) -> str:
    return ", ".join(str(v) for v in values)


def _runs_over_one(keys: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of the runs of equal keys longer than one, keys sorted."""
    starts = group_starts(keys)
    ends = group_ends(starts, len(keys))
    long = ends - starts > 1
    return list(zip(starts[long].tolist(), ends[long].tolist()))


def inconsistent_offsets(p: PartitionLog, options: RunOptions) -> list[dict]:
    rows = []
    for start, end in _runs_over_one(p.log_offset):  # the log is sorted by (offset, value)
        offset = int(p.log_offset[start])
        values = p.log_value[start:end].tolist()
        touching = np.unique(p.index[p.offset == offset])[:EVIDENCE_OPS_MAX].tolist()
        rows.append(anomaly_row(
            "inconsistent-offsets", f"offset {offset} of {p.where()} holds values {_join(values)}",
            topic=p.topic, partition=p.partition, ops=touching, values=values, offsets=[offset]))
    return rows


def duplicate(p: PartitionLog, options: RunOptions) -> list[dict]:
    rows = []
    by_value = np.lexsort((p.log_offset, p.log_value))
    values, offsets = p.log_value[by_value], p.log_offset[by_value]
    for start, end in _runs_over_one(values):
        value = int(values[start])
        offs = offsets[start:end].tolist()
        touching = np.unique(p.index[p.value == value])[:EVIDENCE_OPS_MAX].tolist()
        rows.append(anomaly_row(
            "duplicate", f"value {value} of {p.where()} is stored at offsets {_join(offs)}",
            topic=p.topic, partition=p.partition, ops=touching, values=[value], offsets=offs))
    return rows
