"""Durability: lost-write (with the highest-read rule), unseen and phantom-read.

lost-write (Jepsen): per partition, the bound is the highest first dense index of any
value an ok op read. Every value whose last dense index is at or below the bound must
have been read; one that was not, sent by an op that must have committed, is lost.
unseen: values acknowledged to a producer that no ok op ever read, per partition.
phantom-read: a value read from a partition that no op ever sent there.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_validation.anomalies import anomaly_rows
from spark_validation.frames import TP, HistoryFrames
from spark_validation.options import RunOptions

EVIDENCE_VALUES_MAX = 1024  # unseen values listed per partition; the count is exact


def lost_write(h: HistoryFrames, options: RunOptions) -> DataFrame:
    bound = (h.ok_read_values.join(h.value_index, [*TP, "value"])
             .groupBy(*TP).agg(F.max(F.struct("first_idx", "value")).alias("bound")))
    writers = h.committed_sends.groupBy(*TP, "value").agg(F.min("index").alias("writer"))
    lost = (h.value_index.join(bound, TP).where(F.col("idx") <= F.col("bound.first_idx"))
            .join(h.ok_read_values, [*TP, "value"], "left_anti")
            .join(writers, [*TP, "value"]))
    return anomaly_rows(
        lost, "lost-write", topic=F.col("topic"), partition=F.col("partition"), ops=F.array("writer"),
        values=F.array("value"), offsets=F.col("offsets"),
        detail=F.format_string("value %d of %s-%d (op %d, dense index %d) was never read, though ok polls "
                               "read value %d at index %d after it", "value", "topic", "partition", "writer", "idx",
                               "bound.value", "bound.first_idx"))


def unseen(h: HistoryFrames, options: RunOptions) -> DataFrame:
    acked = h.sends.where((F.col("type") == "ok")).select(*TP, "value", "index", "offset")
    missing = (acked.join(h.ok_read_values, [*TP, "value"], "left_anti")
               .groupBy(*TP).agg(F.count("*").alias("n"),
                                 F.sort_array(F.collect_list(F.struct("value", "index", "offset"))).alias("m")))
    return anomaly_rows(
        missing, "unseen", topic=F.col("topic"), partition=F.col("partition"),
        ops=F.slice(F.array_sort(F.array_distinct(F.col("m.index"))), 1, EVIDENCE_VALUES_MAX),
        values=F.slice(F.col("m.value"), 1, EVIDENCE_VALUES_MAX),
        offsets=F.slice(F.col("m.offset"), 1, EVIDENCE_VALUES_MAX),
        detail=F.format_string("%d acknowledged value(s) of %s-%d were never read", "n", "topic", "partition"))


def phantom_read(h: HistoryFrames, options: RunOptions) -> DataFrame:
    phantoms = (h.reads.join(h.writer_of, [*TP, "value"], "left_anti")
                .groupBy(*TP, "value").agg(F.sort_array(F.collect_set("index")).alias("readers"),
                                           F.sort_array(F.collect_set("offset")).alias("offs")))
    return anomaly_rows(
        phantoms, "phantom-read", topic=F.col("topic"), partition=F.col("partition"), ops=F.col("readers"),
        values=F.array("value"), offsets=F.col("offs"),
        detail=F.format_string("value %d was read from %s-%d by op(s) %s but never sent", "value", "topic",
                               "partition", F.array_join("readers", ", ")))
