"""Transactional visibility: G1a (aborted read), precommitted-read and G1b (intermediate read).

G1a (Jepsen): an ok op read a value that a failed op sent; fail means the write (or its
transaction) definitely did not happen. precommitted-read (Jepsen): an op read a value
it sent itself, which a read_committed consumer can only see after the commit.
G1b (kspec; Jepsen has none): a log has no overwrites, so reading an intermediate state
of a committed transaction W means seeing part of W's records in a partition: an ok
read op whose reads of the partition span an offset W wrote there, read some of W's
records, but not that one. (Its offsets are known because W is ok.)
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_validation.anomalies import anomaly_rows
from spark_validation.frames import TP, HistoryFrames
from spark_validation.options import RunOptions


def g1a(h: HistoryFrames, options: RunOptions) -> DataFrame:
    failed = h.sends.where(F.col("type") == "fail").select(*TP, "value", F.col("index").alias("writer"))
    reads = h.reads.where(F.col("type") == "ok").select(*TP, "value", "offset", F.col("index").alias("reader"))
    aborted = reads.join(failed, [*TP, "value"]).where(F.col("reader") != F.col("writer")).distinct()
    return anomaly_rows(
        aborted, "G1a", topic=F.col("topic"), partition=F.col("partition"), ops=F.array("writer", "reader"),
        values=F.array("value"), offsets=F.array("offset"),
        detail=F.format_string("op %d read value %d of %s-%d, which failed op %d wrote", "reader", "value",
                               "topic", "partition", "writer"))


def precommitted_read(h: HistoryFrames, options: RunOptions) -> DataFrame:
    own = (h.reads.join(h.sends.select("index", *TP, "value"), ["index", *TP, "value"], "left_semi")
           .groupBy("index", "process", *TP).agg(F.sort_array(F.collect_set("value")).alias("vals"),
                                                 F.sort_array(F.collect_set("offset")).alias("offs")))
    return anomaly_rows(
        own, "precommitted-read", topic=F.col("topic"), partition=F.col("partition"), process=F.col("process"),
        ops=F.array("index"), values=F.col("vals"), offsets=F.col("offs"),
        detail=F.format_string("op %d read its own uncommitted value(s) %s of %s-%d", "index",
                               F.array_join("vals", ", "), "topic", "partition"))


def g1b(h: HistoryFrames, options: RunOptions) -> DataFrame:
    txn_writes = (h.sends.where((F.col("f") == "txn") & (F.col("type") == "ok") & F.col("offset").isNotNull())
                  .select(*TP, "value", "offset", F.col("index").alias("writer")))
    reads = (h.reads.where((F.col("type") == "ok") & F.col("offset").isNotNull())
             .select(F.col("index").alias("reader"), *TP, "value", "offset"))
    span = reads.groupBy("reader", *TP).agg(F.min("offset").alias("lo"), F.max("offset").alias("hi"))
    partly_read = (reads.join(txn_writes.select(*TP, "value", "writer"), [*TP, "value"])
                   .where(F.col("reader") != F.col("writer")).select("reader", "writer", *TP).distinct())
    unread = (partly_read.join(txn_writes, ["writer", *TP]).join(span, ["reader", *TP])
              .where((F.col("offset") > F.col("lo")) & (F.col("offset") < F.col("hi")))
              .join(reads.select("reader", *TP, "value"), ["reader", *TP, "value"], "left_anti")
              .groupBy("reader", "writer", *TP, "lo", "hi")
              .agg(F.sort_array(F.collect_list(F.struct("offset", "value"))).alias("u")))
    return anomaly_rows(
        unread, "G1b", topic=F.col("topic"), partition=F.col("partition"), ops=F.array("writer", "reader"),
        values=F.col("u.value"), offsets=F.col("u.offset"),
        detail=F.format_string("op %d read offsets %d..%d of %s-%d, some of transaction %d's records but not "
                               "value(s) %s", "reader", "lo", "hi", "topic", "partition", "writer",
                               F.array_join(F.col("u.value"), ", ")))
