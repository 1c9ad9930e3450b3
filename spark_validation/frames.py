"""The derived tables every check shares, built once per history.

Names follow Jepsen's Kafka checker (research/jepsen.md section 2), partitioned by
topic-partition instead of Jepsen's abstract key:

- mops: completed send/poll/txn micro-operations that name a record, with idx
- log: the version order's raw slots, (topic, partition, offset, value) from every poll
  (any completion type: pollers report offsets truthfully) and from the sends of ops
  that must have committed
- version: log with idx, the dense index of the offset among occupied slots
- value_index: per value its first and last dense index (Jepsen's :by-value is the last)
- by_index: one value per dense index (the smallest when a slot conflicts)
- writer_of: the op that sent each value
"""
from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from spec.history import ASSIGNMENT_FS, CLIENT_FS

TP = ["topic", "partition"]
MOP_COLUMNS = ["index", "seq", "process", "type", "f", "time_ns", "invoke_time_ns", "mop_f", *TP, "value",
               "offset", "rebalanced"]


class HistoryFrames:
    """Lazily built, cached Spark tables of one history."""

    def __init__(self, spark: SparkSession, parquet_path: str):
        self.spark = spark
        raw = spark.read.parquet(parquet_path)
        completions = raw.where(F.col("type") != "invoke")
        recorded = (completions.where(F.col("f").isin(*CLIENT_FS) & F.col("mop_f").isNotNull()
                                      & F.col("topic").isNotNull() & F.col("value").isNotNull())
                    .select(*MOP_COLUMNS).persist())
        self.ops = (completions.where(F.col("f").isin(*CLIENT_FS) & (F.col("seq") == 0))
                    .select("index", "process", "type", "f", "time_ns", "invoke_time_ns").persist())
        assignments = completions.where(F.col("f").isin(*ASSIGNMENT_FS) & F.col("type").isin("ok", "info"))
        self.assignment_ops = assignments.where(F.col("seq") == 0).select("index", "process")
        self.assignment_rows = assignments.where(F.col("topic").isNotNull()).select("index", *TP)
        reads = recorded.where(F.col("mop_f") == "poll")
        self.ok_read_values = reads.where(F.col("type") == "ok").select(*TP, "value").distinct()
        self.committed_sends = self._committed_sends(recorded.where(F.col("mop_f") == "send"))
        self.log = (reads.where(F.col("offset").isNotNull()).select(*TP, "offset", "value")
                    .unionByName(self.committed_sends.where(F.col("offset").isNotNull())
                                 .select(*TP, "offset", "value"))
                    .distinct().persist())
        slots = self.log.select(*TP, "offset").distinct().withColumn(
            "idx", F.dense_rank().over(Window.partitionBy(*TP).orderBy("offset")) - 1)
        self.version = self.log.join(slots, [*TP, "offset"]).persist()
        self.value_index = self.version.groupBy(*TP, "value").agg(
            F.min("idx").alias("first_idx"), F.max("idx").alias("idx"),
            F.sort_array(F.collect_set("offset")).alias("offsets")).persist()
        # every mop with its value's dense index (null when not in the log), joined once for all checks
        self.mops = recorded.join(self.value_index.select(*TP, "value", "idx"), [*TP, "value"], "left").persist()
        self._recorded = recorded
        self.sends = self.mops.where(F.col("mop_f") == "send")
        self.reads = self.mops.where(F.col("mop_f") == "poll")
        self.by_index = self.version.groupBy(*TP, "idx").agg(F.min("value").alias("value"),
                                                             F.min("offset").alias("offset"))
        self.writer_of = self.sends.groupBy(*TP, "value").agg(F.min("index").alias("writer"))

    def _committed_sends(self, sends: DataFrame) -> DataFrame:
        """Sends of ops that must have committed: ok, or info with a send some ok op read."""
        info_sends = sends.where(F.col("type") == "info")
        proven = info_sends.join(self.ok_read_values, [*TP, "value"], "left_semi").select("index").distinct()
        return sends.where(F.col("type") == "ok").unionByName(info_sends.join(proven, "index", "left_semi"))

    @staticmethod
    def with_delta(df: DataFrame) -> DataFrame:
        """df (with prev_idx and cur_idx) with delta = cur_idx - prev_idx, 1 when either is unknown."""
        return df.withColumn("delta", F.coalesce(F.col("cur_idx") - F.col("prev_idx"), F.lit(1)))

    def with_skipped(self, df: DataFrame) -> DataFrame:
        """Rows with prev_idx/cur_idx get `skipped`: the values at the dense indices between them."""
        between = (df.select(*TP, "prev_idx", "cur_idx").distinct().alias("d")
                   .join(self.by_index.alias("b"), (F.col("d.topic") == F.col("b.topic"))
                         & (F.col("d.partition") == F.col("b.partition"))
                         & (F.col("b.idx") > F.col("d.prev_idx")) & (F.col("b.idx") < F.col("d.cur_idx")))
                   .groupBy("d.topic", "d.partition", "d.prev_idx", "d.cur_idx")
                   .agg(F.sort_array(F.collect_list(F.struct("b.idx", "b.value"))).alias("s"))
                   .select(*TP, "prev_idx", "cur_idx", F.col("s.value").alias("skipped")))
        return df.join(between, [*TP, "prev_idx", "cur_idx"], "left")

    def unpersist(self) -> None:
        for frame in (self.mops, self.ops, self.log, self.version, self.value_index, self._recorded):
            frame.unpersist()
