"""Check a Connect pipeline's history (faults/connect_workload.py: the lines appended to the
source file, the topic's records, the sink file's lines) with Spark: CON-1, CON-2, CON-3.

- connect-source-lost (CON-3): a line appended to the source file that is not in the topic.
- connect-sink-lost (CON-1): a record of the topic whose line is not in the sink file.
- connect-duplicate (CON-2): a line written to the topic more than once; a violation only when
  the source ran with exactly-once support (else at least once allows it, and it is reported).
- connect-sink-duplicate: a line the sink wrote more than once; allowed (sinks are at least once).
- connect-phantom (CON-1): a line in the topic or the sink file that was never appended.
- connect-source-pending, connect-sink-pending: not there yet when the run ended, and nothing
  after it either. A FileStreamSource reads its file in order and a sink each partition in
  offset order, so a line missing below a later line that did arrive is lost (a gap), while the
  missing tail beyond the last line that arrived is what the pipeline had not reached: reported,
  not a violation (CON-1 and CON-3 say "eventually"; a run that ends before the pipeline caught
  up cannot judge its tail).

One row per anomaly, listing up to EVIDENCE_VALUES_MAX line numbers. Run by
`check_connect_history` (for `kspec check FOLDER` when FOLDER holds connect.json).
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from faults.connect_workload import CONNECT_FILE, SINK_FILE, SOURCE_FILE, TOPIC_FILE
from spark_validation.anomalies import ANOMALY_SCHEMA, AnomalyKind
from spark_validation.mirror import report_side_history

EVIDENCE_VALUES_MAX = 1024
GUARANTEES = ("CON-1", "CON-2", "CON-3")
AT_LEAST_ONCE = "the pipeline ran at least once (exactly.once.source.support disabled), so a line written twice is allowed"
NOTHING_ARRIVED = "no appended line reached the topic while the run lasted: the pipeline never delivered"

CONNECT_KINDS = {k.name: k for k in (
    AnomalyKind("connect-source-lost", "CON-3", "a line appended to the source file is not in the topic"),
    AnomalyKind("connect-sink-lost", "CON-1", "a record of the topic never reached the sink file"),
    AnomalyKind("connect-duplicate", "CON-2", "a line was written to the topic more than once"),
    AnomalyKind("connect-sink-duplicate", None, "the sink file holds a line more than once (at least once allows it)"),
    AnomalyKind("connect-phantom", "CON-1", "the topic or the sink file holds a line that was never appended"),
    AnomalyKind("connect-source-pending", None,
                "a line after the last one in the topic: the source had not reached it when the run ended"),
    AnomalyKind("connect-sink-pending", None,
                "a record after the last one of its partition in the sink: the sink had not reached it when the run ended"),
)}


def is_connect_history(path: Path) -> bool:
    return path.is_dir() and (path / CONNECT_FILE).exists()


def check_connect(spark: SparkSession, history: Path) -> tuple[pa.Table, dict]:
    """(anomalies as ANOMALY_SCHEMA, verdict) for one recorded pipeline."""
    run = json.loads((history / CONNECT_FILE).read_text())
    # one row per line number with how often the source file, the topic and the sink file hold it
    counts = (spark.read.parquet(str(history / SOURCE_FILE)).select("value", F.lit(1).alias("appended"),
                                                                    F.lit(0).alias("in_topic"), F.lit(0).alias("in_sink"))
              .unionByName(spark.read.parquet(str(history / TOPIC_FILE)).select(
                  "value", F.lit(0).alias("appended"), F.lit(1).alias("in_topic"), F.lit(0).alias("in_sink")))
              .unionByName(spark.read.parquet(str(history / SINK_FILE)).select(
                  "value", F.lit(0).alias("appended"), F.lit(0).alias("in_topic"), F.lit(1).alias("in_sink")))
              .groupBy("value").agg(*(F.sum(c).alias(c) for c in ("appended", "in_topic", "in_sink"))))
    # how far each side got: the last line in the topic, and per partition the last offset in the sink
    topic = spark.read.parquet(str(history / TOPIC_FILE))
    source_front = topic.agg(F.max("value")).first()[0]
    sunk = spark.read.parquet(str(history / SINK_FILE)).select("value").distinct().withColumn("sunk", F.lit(True))
    placed = topic.join(sunk, "value", "left")
    fronts = placed.where(F.col("sunk")).groupBy("partition").agg(F.max("offset").alias("front"))
    sink_pending = (placed.join(fronts, "partition", "left")
                    .groupBy("value").agg(F.min(F.coalesce(F.col("offset") > F.col("front"), F.lit(True)))
                                          .alias("sink_pending")))
    counts = counts.join(sink_pending, "value", "left")
    source_pending = F.lit(True) if source_front is None else F.col("value") > F.lit(source_front)
    flags = F.array_compact(F.array(
        F.when((F.col("appended") > 0) & (F.col("in_topic") == 0) & ~source_pending, F.lit("connect-source-lost")),
        F.when((F.col("appended") > 0) & (F.col("in_topic") == 0) & source_pending, F.lit("connect-source-pending")),
        F.when((F.col("in_topic") > 0) & (F.col("in_sink") == 0) & ~F.col("sink_pending"), F.lit("connect-sink-lost")),
        F.when((F.col("in_topic") > 0) & (F.col("in_sink") == 0) & F.col("sink_pending"), F.lit("connect-sink-pending")),
        F.when(F.col("in_topic") > 1, F.lit("connect-duplicate")),
        F.when(F.col("in_sink") > 1, F.lit("connect-sink-duplicate")),
        F.when((F.col("appended") == 0), F.lit("connect-phantom"))))
    found = (counts.select("value", F.explode(flags).alias("anomaly"))
             .groupBy("anomaly")
             .agg(F.count("*").alias("n"), F.slice(F.sort_array(F.collect_list("value")), 1,
                                                   EVIDENCE_VALUES_MAX).alias("values"))
             .orderBy("anomaly").collect())  # one Spark job for every finding
    rows = [{"anomaly": r.anomaly, "guarantee": CONNECT_KINDS[r.anomaly].guarantee_id,
             "violation": (CONNECT_KINDS[r.anomaly].guarantee_id is not None
                           and (r.anomaly != "connect-duplicate" or run["exactly_once"])),
             "topic": run["topic"], "partition": None, "process": None, "ops": None,
             "values": list(r["values"]), "offsets": None, "delta": None,
             "detail": f"{r.n} line(s): {CONNECT_KINDS[r.anomaly].definition}"}
            for r in found]
    anomalies = pa.Table.from_pylist(rows, schema=ANOMALY_SCHEMA)
    violated = {row["guarantee"] for row in rows if row["violation"]}
    checked = GUARANTEES if run["exactly_once"] else ("CON-1", "CON-3")
    reasons = {} if run["exactly_once"] else {"CON-2": AT_LEAST_ONCE}
    if source_front is None:  # no line reached the topic: nothing to judge a loss against
        checked = ()
        reasons = {g: NOTHING_ARRIVED for g in GUARANTEES}
    verdict = {
        "valid": not violated, "topic": run["topic"], "exactly_once": run["exactly_once"],
        "worker_kills": len(run["kills"]),
        "records": {name: pq.ParquetFile(history / file).metadata.num_rows
                    for name, file in (("source", SOURCE_FILE), ("topic", TOPIC_FILE), ("sink", SINK_FILE))},
        "anomalies": {a: next((int(r.n) for r in found if r.anomaly == a), 0) for a in CONNECT_KINDS},
        "guarantees": {g: {"status": "violated" if g in violated else "held" if g in checked else "not checked"}
                       for g in GUARANTEES},
        "unchecked": reasons,
    }
    return anomalies, verdict


def add_to_verdict(anomalies: pa.Table, verdict: dict, connect_anomalies: pa.Table,
                   connect_verdict: dict) -> tuple[pa.Table, dict]:
    """A fault run's anomalies and verdict with its Connect pipeline's (`--workload connect`)
    findings and CON-1..3 added."""
    verdict = dict(verdict, anomalies=dict(verdict["anomalies"]), violations=dict(verdict["violations"]),
                   guarantees=dict(verdict["guarantees"]), unchecked=dict(verdict.get("unchecked", {})),
                   connect={k: connect_verdict[k] for k in ("topic", "exactly_once", "worker_kills", "records")})
    for row in connect_anomalies.to_pylist():
        n = connect_verdict["anomalies"][row["anomaly"]]
        verdict["anomalies"][row["anomaly"]] = n
        if row["violation"]:
            verdict["violations"][row["anomaly"]] = n
    for guarantee_id, entry in connect_verdict["guarantees"].items():
        if entry["status"] == "not checked":
            verdict["unchecked"][guarantee_id] = connect_verdict.get("unchecked", {}).get(guarantee_id, AT_LEAST_ONCE)
            continue
        verdict["guarantees"][guarantee_id] = {"status": entry["status"], "anomalies": {
            r["anomaly"]: connect_verdict["anomalies"][r["anomaly"]] for r in connect_anomalies.to_pylist()
            if r["violation"] and r["guarantee"] == guarantee_id}}
    verdict["guarantees"] = dict(sorted(verdict["guarantees"].items()))
    verdict["valid"] = not verdict["violations"]
    return pa.concat_tables([anomalies, connect_anomalies]), verdict


def check_connect_history(history: Path, spark: SparkSession, out_dir: Path, json_path: Path | None) -> int:
    """`kspec check` on a Connect pipeline's history: print the findings, write them, exit 0 or 1."""
    anomalies, verdict = check_connect(spark, history)
    return report_side_history(anomalies, verdict, out_dir, json_path,
                               f"pipeline to {verdict['topic']}: {verdict['records']['source']} lines appended, "
                               f"{verdict['records']['topic']} records, {verdict['records']['sink']} sink lines, "
                               f"{verdict['worker_kills']} worker kills")
