"""Real-time order of each partition log, by sort and running maximum (never a cross join).

A partition log is linearizable when its appends and reads fit one total order that
respects real time. The offsets fix the order of appends, so the order is verified, not
searched for. Two rules cover every way it can fail (with offsets unique, which
inconsistent-offsets and duplicate check):

- realtime-order: an append A acked before append B was invoked must have the lower
  offset. Sorted by time (invocations before completions at the same instant), the
  running maximum of completed appends' offsets must stay below each new append's.
- future-read: a read that returned offset m must come after every append at or below m,
  so each of those must have been invoked before the read completed. Sorted by offset,
  the running maximum of append invocation times must stay below each read's completion.

Each anomaly names the two ops that contradict each other: a minimal counterexample.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_validation.anomalies import anomaly_rows
from spark_validation.frames import TP, HistoryFrames
from spark_validation.options import RunOptions

INVOKE, COMPLETE = 0, 1  # event order at equal times: "before" is strict
DONE_TYPE = "struct<offset:long,op:long,value:long>"
APPEND_TYPE = "struct<invoke_ns:long,op:long,offset:long,value:long>"


def realtime_order(h: HistoryFrames, options: RunOptions) -> DataFrame:
    acked = (h.sends.where((F.col("type") == "ok") & F.col("offset").isNotNull())
             .groupBy("index", *TP).agg(F.min("offset").alias("lo"), F.max("offset").alias("hi"),
                                        F.min_by("value", "offset").alias("lo_value"),
                                        F.max_by("value", "offset").alias("hi_value"),
                                        F.first("invoke_time_ns").alias("invoke_ns"),
                                        F.first("time_ns").alias("complete_ns")))
    completed = F.struct(F.col("hi").alias("offset"), F.col("index").alias("op"), F.col("hi_value").alias("value"))
    events = (acked.select(*TP, F.col("complete_ns").alias("t"), F.lit(COMPLETE).alias("kind"),
                           completed.alias("done"), "index", "lo", "lo_value")
              .unionByName(acked.select(*TP, F.col("invoke_ns").alias("t"), F.lit(INVOKE).alias("kind"),
                                        F.lit(None).cast(DONE_TYPE).alias("done"),
                                        "index", "lo", "lo_value")))
    so_far = Window.partitionBy(*TP).orderBy("t", "kind").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    late = (events.withColumn("max_done", F.max("done").over(so_far))
            .where((F.col("kind") == INVOKE) & (F.col("max_done.offset") > F.col("lo"))))
    return anomaly_rows(
        late, "realtime-order", topic=F.col("topic"), partition=F.col("partition"),
        ops=F.array("max_done.op", "index"), values=F.array("max_done.value", "lo_value"),
        offsets=F.array("max_done.offset", "lo"),
        detail=F.format_string("op %d was acked with offset %d of %s-%d before op %d began, which got offset %d",
                               "max_done.op", "max_done.offset", "topic", "partition", "index", "lo"))


def future_read(h: HistoryFrames, options: RunOptions) -> DataFrame:
    invoked = h.ops.select(F.col("index").alias("writer"), F.col("invoke_time_ns").alias("invoke_ns"))
    appends = h.version.join(h.writer_of, [*TP, "value"]).join(invoked, "writer")
    reads = (h.reads.where(F.col("offset").isNotNull()).groupBy("index", *TP)
             .agg(F.max("offset").alias("m"), F.first("time_ns").alias("complete_ns")))
    append = F.struct(F.col("invoke_ns"), F.col("writer").alias("op"), F.col("offset"), F.col("value"))
    events = (appends.select(*TP, F.col("offset").alias("position"), F.lit(0).alias("kind"), append.alias("a"),
                             F.lit(None).cast("long").alias("index"), F.lit(None).cast("long").alias("complete_ns"))
              .unionByName(reads.select(*TP, F.col("m").alias("position"), F.lit(1).alias("kind"),
                                        F.lit(None).cast(APPEND_TYPE).alias("a"), "index", "complete_ns")))
    so_far = Window.partitionBy(*TP).orderBy("position", "kind").rowsBetween(Window.unboundedPreceding,
                                                                            Window.currentRow)
    early = (events.withColumn("latest", F.max("a").over(so_far))
             .where((F.col("kind") == 1) & (F.col("latest.invoke_ns") > F.col("complete_ns"))))
    return anomaly_rows(
        early, "future-read", topic=F.col("topic"), partition=F.col("partition"), ops=F.array("latest.op", "index"),
        values=F.array("latest.value"), offsets=F.array("latest.offset", "position"),
        detail=F.format_string("op %d read %s-%d up to offset %d and completed before op %d, which appended "
                               "value %d at offset %d, was invoked", "index", "topic", "partition", "position",
                               "latest.op", "latest.value", "latest.offset"))
