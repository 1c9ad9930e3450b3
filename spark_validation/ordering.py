"""Order: poll-skip, nonmonotonic-poll, nonmonotonic-send, send-skip and their internal variants.

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

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_validation.anomalies import anomaly_rows
from spark_validation.frames import TP, HistoryFrames
from spark_validation.options import RunOptions


def _per_op(mops: DataFrame) -> DataFrame:
    return mops.groupBy("index", "process", "type", *TP).agg(
        F.min_by("value", "seq").alias("first"), F.max_by("value", "seq").alias("last"),
        F.min_by("idx", "seq").alias("cur_idx"), F.max_by("idx", "seq").alias("last_idx"))


def _process_scan(h: HistoryFrames, per_op: DataFrame, moves: Column) -> DataFrame:
    """per_op rows with prev (the position before the op) and delta; `moves` says which ops set it."""
    partitions = per_op.select("process", *TP).distinct()
    candidates = h.assignment_ops.join(partitions, "process").alias("c")
    retained = h.assignment_rows.alias("a")
    resets = candidates.join(retained, (F.col("c.index") == F.col("a.index")) & (F.col("c.topic") == F.col("a.topic"))
                             & (F.col("a.partition").isNull() | (F.col("c.partition") == F.col("a.partition"))),
                             "left_anti")
    position = F.struct(F.lit(False).alias("reset"), F.col("last").alias("value"), F.col("last_idx").alias("idx"),
                        F.col("index").alias("op"))
    reset = F.struct(F.lit(True).alias("reset"), F.lit(None).cast("long").alias("value"),
                     F.lit(None).cast("int").alias("idx"), F.col("index").alias("op"))
    events = (per_op.select("index", "process", *TP, "first", "cur_idx", F.when(moves, position).alias("position"),
                            F.lit(True).alias("checked"))
              .unionByName(resets.select("index", "process", *TP, F.lit(None).cast("long").alias("first"),
                                         F.lit(None).cast("int").alias("cur_idx"), reset.alias("position"),
                                         F.lit(False).alias("checked"))))
    before = Window.partitionBy("process", *TP).orderBy("index").rowsBetween(Window.unboundedPreceding, -1)
    scanned = (events.withColumn("prev", F.last("position", ignorenulls=True).over(before))
               .where(F.col("checked") & F.col("prev").isNotNull() & ~F.col("prev.reset"))
               .select("index", "process", *TP, "first", "cur_idx", F.col("prev.value").alias("prev_value"),
                       F.col("prev.idx").alias("prev_idx"), F.col("prev.op").alias("prev_op")))
    return h.with_delta(scanned)


def poll_order(h: HistoryFrames, options: RunOptions) -> DataFrame:
    reads = h.reads.where(F.col("f").isin("poll", "txn"))
    scanned = _process_scan(h, _per_op(reads), F.col("type") == "ok").where(F.col("delta") != 1)
    scanned = h.with_skipped(scanned)
    return anomaly_rows(
        scanned, F.when(F.col("delta") > 1, "poll-skip").otherwise("nonmonotonic-poll"),
        violation="subscribe" not in options.sub_via, topic=F.col("topic"), partition=F.col("partition"),
        process=F.col("process"), ops=F.array("prev_op", "index"), values=F.array("prev_value", "first"),
        delta=F.col("delta"),
        detail=F.format_string("process %d read value %d of %s-%d in op %d, then value %d first in op %d "
                               "(delta %d; skipped %s)", "process", "prev_value", "topic", "partition", "prev_op",
                               "first", "index", "delta", F.array_join(F.coalesce("skipped", F.array()), ", ")))


def _own_rank(h: HistoryFrames) -> DataFrame:
    """Each value's rank among the values its writer's process sent to the partition, in log order."""
    writers = h.writer_of.join(h.ops.select(F.col("index").alias("writer"), "process"), "writer")
    return (h.value_index.select(*TP, "value", "idx").join(writers, [*TP, "value"])
            .withColumn("own_rank", F.dense_rank().over(Window.partitionBy(*TP, "process").orderBy("idx")))
            .select(*TP, "process", "value", "own_rank"))


def send_order(h: HistoryFrames, options: RunOptions) -> DataFrame:
    sends = h.sends.where(F.col("type").isin("ok", "info"))
    scanned = _process_scan(h, _per_op(sends), F.lit(True)).where(F.col("delta") != 1)
    own = _own_rank(h)
    scanned = (scanned
               .join(own.withColumnRenamed("value", "prev_value").withColumnRenamed("own_rank", "prev_rank"),
                     [*TP, "process", "prev_value"], "left")
               .join(own.withColumnRenamed("value", "first").withColumnRenamed("own_rank", "cur_rank"),
                     [*TP, "process", "first"], "left")
               .withColumn("own_between", F.col("cur_rank") - F.col("prev_rank") - 1)
               .where((F.col("delta") < 1) | (F.col("own_between") > 0)))
    return anomaly_rows(
        scanned, F.when(F.col("delta") > 1, "send-skip").otherwise("nonmonotonic-send"),
        topic=F.col("topic"), partition=F.col("partition"),
        process=F.col("process"), ops=F.array("prev_op", "index"), values=F.array("prev_value", "first"),
        delta=F.col("delta"),
        detail=F.format_string("process %d sent value %d to %s-%d in op %d, then value %d in op %d (delta %d; "
                               "%d of its own records from other ops between)", "process", "prev_value", "topic",
                               "partition", "prev_op", "first", "index", "delta",
                               F.coalesce(F.greatest("own_between", F.lit(0)), F.lit(0))))


def _internal_scan(h: HistoryFrames, mops: DataFrame) -> DataFrame:
    within = Window.partitionBy("index", *TP).orderBy("seq")
    pairs = (mops.withColumn("prev_value", F.lag("value").over(within)).withColumn("prev_idx", F.lag("idx").over(within))
             .where(F.col("prev_value").isNotNull())
             .select("index", "process", *TP, "prev_value", "prev_idx", F.col("value").alias("cur_value"),
                     F.col("idx").alias("cur_idx")))
    return h.with_delta(pairs).where(F.col("delta") != 1)


def internal_poll_order(h: HistoryFrames, options: RunOptions) -> DataFrame:
    reads = h.reads.where(F.col("f").isin("poll", "txn") & ~F.col("rebalanced"))
    scanned = h.with_skipped(_internal_scan(h, reads))
    return anomaly_rows(
        scanned, F.when(F.col("delta") > 1, "int-poll-skip").otherwise("int-nonmonotonic-poll"),
        topic=F.col("topic"), partition=F.col("partition"), process=F.col("process"), ops=F.array("index"),
        values=F.array("prev_value", "cur_value"), delta=F.col("delta"),
        detail=F.format_string("op %d read value %d then value %d of %s-%d (delta %d; skipped %s)", "index",
                               "prev_value", "cur_value", "topic", "partition", "delta",
                               F.array_join(F.coalesce("skipped", F.array()), ", ")))


def internal_send_order(h: HistoryFrames, options: RunOptions) -> DataFrame:
    scanned = _internal_scan(h, h.sends)
    return anomaly_rows(
        scanned, F.when(F.col("delta") > 1, "int-send-skip").otherwise("int-nonmonotonic-send"),
        violation=F.col("delta") < 1, topic=F.col("topic"), partition=F.col("partition"),
        process=F.col("process"), ops=F.array("index"), values=F.array("prev_value", "cur_value"),
        delta=F.col("delta"),
        detail=F.format_string("op %d sent value %d then value %d to %s-%d (delta %d)", "index", "prev_value",
                               "cur_value", "topic", "partition", "delta"))
