"""Offset integrity: inconsistent-offsets (one offset, two values) and duplicate (one value, two offsets).

Both read the raw version-order log, so they hold even when the other is violated.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_validation.anomalies import anomaly_rows
from spark_validation.frames import TP, HistoryFrames
from spark_validation.options import RunOptions

EVIDENCE_OPS_MAX = 16  # ops listed per anomaly; the rest are in the history


def _ops_touching(h: HistoryFrames, by: list[str]) -> DataFrame:
    return h.mops.groupBy(*TP, *by).agg(F.sort_array(F.collect_set("index")).alias("touching"))


def inconsistent_offsets(h: HistoryFrames, options: RunOptions) -> DataFrame:
    slots = (h.log.groupBy(*TP, "offset").agg(F.sort_array(F.collect_set("value")).alias("vals"))
             .where(F.size("vals") > 1))
    slots = slots.join(_ops_touching(h, ["offset"]), [*TP, "offset"], "left")
    return anomaly_rows(
        slots, "inconsistent-offsets", topic=F.col("topic"), partition=F.col("partition"),
        ops=F.slice("touching", 1, EVIDENCE_OPS_MAX), values=F.col("vals"), offsets=F.array("offset"),
        detail=F.format_string("offset %d of %s-%d holds values %s", "offset", "topic", "partition",
                               F.array_join("vals", ", ")))


def duplicate(h: HistoryFrames, options: RunOptions) -> DataFrame:
    dups = (h.log.groupBy(*TP, "value").agg(F.sort_array(F.collect_set("offset")).alias("offs"))
            .where(F.size("offs") > 1))
    dups = dups.join(_ops_touching(h, ["value"]), [*TP, "value"], "left")
    return anomaly_rows(
        dups, "duplicate", topic=F.col("topic"), partition=F.col("partition"),
        ops=F.slice("touching", 1, EVIDENCE_OPS_MAX), values=F.array("value"), offsets=F.col("offs"),
        detail=F.format_string("value %d of %s-%d is stored at offsets %s", "value", "topic", "partition",
                               F.array_join("offs", ", ")))
