"""Check a stream processor's run (`kspec faults run --workload quixstreams`) with Spark: EOS-1, EOS-2.

The run (faults/streams.py) leaves the input in history.parquet (the queue workload's sends:
key, value, ok when acknowledged) and the application's committed output, read with
isolation.level=read_committed, in eos-outputs.parquet: one row per output record with the
input key, the key's count after that input, the input's value and the application process
(instance) that wrote it. A key's outputs are in one output partition, in offset order.

Anomalies (one row each, ANOMALY_SCHEMA; values are input values, offsets output offsets):
- eos-duplicate (EOS-1): one input's effect appears more times in the committed output than
  the input topic stores that input. A value the producer stored twice (a client's resend,
  IDM-1's allowed duplicates) is two input records, and each is rightly processed once; the
  history's ok polls of the input topics (the final reads read everything) give the distinct
  offsets that hold it.
- eos-lost (EOS-1): an acknowledged input has no output. A violation only when the last
  process consumed every input (eos.json caught_up) and the output reads completed.
- eos-phantom (EOS-1): an output whose input no producer sent (under its key).
- eos-count-repeat, eos-count-skip (EOS-1): within one process's outputs for a key, a count
  that is not the previous count + 1: an effect counted twice, or not at all.
- eos-state-restore (EOS-2): the first output of a key by a restarted process (or any process
  after the key's earlier outputs) does not continue from the last committed count: the
  state it restored from the changelog is not the state the committed outputs show.

Together: per key the counts form 1..n with no gap or repeat, and n is the number of
distinct inputs processed, which covers every acknowledged input. `kspec check RUN` runs
this beside the history checks when RUN holds eos.json, and adds the rows and EOS-1/EOS-2
to the verdict.
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from spark_validation.anomalies import ANOMALY_SCHEMA, EOS_KINDS

EOS_FILE = "eos.json"              # faults/streams.py
OUTPUTS_FILE = "eos-outputs.parquet"
HISTORY_FILE = "history.parquet"
GUARANTEES = ("EOS-1", "EOS-2")
EVIDENCE_ROWS_MAX = 4096           # anomaly rows kept per kind; the counts stay exact


def is_streams_history(path: Path) -> bool:
    return path.is_dir() and (path / EOS_FILE).exists()


def check_eos(spark: SparkSession, run_dir: Path) -> tuple[list[dict], dict]:
    """(anomaly rows with their guarantee, a summary) for one streams run."""
    run = json.loads((run_dir / EOS_FILE).read_text())
    topic = run["output_topic"]
    complete = run["caught_up"] and run["outputs_complete"]
    history = spark.read.parquet(str(run_dir / HISTORY_FILE)).where(F.col("topic").isin(run["input_topics"]))
    sends = (history.where((F.col("mop_f") == "send") & (F.col("type") != "invoke"))
             .groupBy("key", F.col("value").alias("input"))
             .agg(F.max(F.col("type") == "ok").alias("acked")))
    stored = (history.where((F.col("mop_f") == "poll") & (F.col("type") == "ok") & F.col("offset").isNotNull())
              .select("key", F.col("value").alias("input"), "topic", "partition", "offset").distinct()
              .groupBy("key", "input").agg(F.count("*").alias("stored")))
    outputs = spark.read.parquet(str(run_dir / OUTPUTS_FILE))
    by_key = Window.partitionBy("key").orderBy("offset")
    ordered = (outputs.withColumn("previous_count", F.coalesce(F.lag("count").over(by_key), F.lit(0)))
               .withColumn("previous_instance", F.lag("instance").over(by_key)))
    restarted = F.col("previous_instance").isNull() | (F.col("instance") != F.col("previous_instance"))
    step = F.col("count") - F.col("previous_count")
    counts = (ordered.where(step != 1)
              .select(F.when(restarted & (F.col("previous_instance").isNotNull() | (F.col("instance") > 0)),
                             F.lit("eos-state-restore"))
                      .when(step < 1, F.lit("eos-count-repeat")).otherwise(F.lit("eos-count-skip")).alias("anomaly"),
                      "partition", "instance", F.array("input").alias("values"), F.array("offset").alias("offsets"),
                      step.alias("delta"),
                      F.format_string("key %d: count %d after %d (instance %d, previous output by instance %s)",
                                      "key", "count", "previous_count", "instance",
                                      F.coalesce(F.col("previous_instance").cast("string"), F.lit("none")))
                      .alias("detail")))
    per_input = outputs.groupBy("key", "input").agg(F.count("*").alias("n"), F.collect_list("offset").alias("offsets"),
                                                     F.min("partition").alias("partition"),
                                                     F.collect_set("instance").alias("instances"))
    copies = F.greatest(F.coalesce(F.col("stored"), F.lit(0)), F.lit(1))  # input records holding the value
    duplicates = (per_input.join(stored, ["key", "input"], "left").where(F.col("n") > copies)
                  .select(F.lit("eos-duplicate").alias("anomaly"), "partition",
                          F.lit(None).cast("long").alias("instance"),
                          F.array("input").alias("values"), F.sort_array("offsets").alias("offsets"),
                          (F.col("n") - copies).alias("delta"),
                          F.format_string("key %d: input %d counted %d times, stored %d times in the input "
                                          "(instances %s)", "key", "input", "n", copies,
                                          F.array_join(F.sort_array("instances"), ",")).alias("detail")))
    joined = sends.join(per_input, ["key", "input"], "full_outer")
    lost = (joined.where(F.col("acked") & F.col("n").isNull())
            .select(F.lit("eos-lost").alias("anomaly"), F.lit(None).cast("int").alias("partition"),
                    F.lit(None).cast("long").alias("instance"), F.array("input").alias("values"),
                    F.lit(None).cast("array<long>").alias("offsets"), F.lit(None).cast("long").alias("delta"),
                    F.format_string("key %d: acknowledged input %d has no committed output", "key", "input")
                    .alias("detail")))
    phantoms = (joined.where(F.col("acked").isNull())
                .select(F.lit("eos-phantom").alias("anomaly"), "partition", F.lit(None).cast("long").alias("instance"),
                        F.array("input").alias("values"), "offsets", F.lit(None).cast("long").alias("delta"),
                        F.format_string("key %d: output of input %d, which was never sent", "key", "input")
                        .alias("detail")))
    found = counts.unionByName(duplicates).unionByName(lost).unionByName(phantoms)
    by_kind = Window.partitionBy("anomaly").orderBy("partition", "offsets", "values")
    kept = (found.withColumn("rank", F.row_number().over(by_kind))
            .withColumn("n", F.count("*").over(Window.partitionBy("anomaly")))
            .where(F.col("rank") <= EVIDENCE_ROWS_MAX).orderBy("anomaly", "rank").collect())  # one job: every finding
    per_kind = {r["anomaly"]: r["n"] for r in kept}
    rows = []
    for r in kept:
        violation = r["anomaly"] != "eos-lost" or complete
        rows.append({"anomaly": r["anomaly"], "guarantee": EOS_KINDS[r["anomaly"]].guarantee_id, "violation": violation,
                     "topic": topic, "partition": r["partition"], "process": r["instance"], "ops": None,
                     "values": r["values"], "offsets": r["offsets"], "delta": r["delta"],
                     "detail": r["detail"] + ("" if violation else " (the application had not caught up, or "
                                                                     "the output reads were incomplete)")})
    restored = (ordered.where(restarted & (F.col("instance") > 0)).groupBy("key")
                .agg(F.count("*").alias("restores")))
    keys = (outputs.groupBy("key").agg(F.max("count").alias("final_count"), F.count("*").alias("outputs"))
            .join(sends.groupBy("key").agg(F.sum(F.col("acked").cast("long")).alias("acked_inputs"),
                                           F.count("*").alias("sent_inputs")), "key", "full_outer")
            .join(restored, "key", "left").orderBy("key").collect())
    restores = sum(r["restores"] or 0 for r in keys)
    summary = {"caught_up": run["caught_up"], "outputs_complete": run["outputs_complete"],
               "instances": len(run["instances"]), "outputs": run["outputs"], "restores_checked": restores,
               "anomalies": per_kind,
               "keys": {str(r["key"]): {"final_count": r["final_count"], "outputs": r["outputs"],
                                        "acked_inputs": r["acked_inputs"], "sent_inputs": r["sent_inputs"]}
                        for r in keys}}
    return rows, summary


def add_to_verdict(anomalies: pa.Table, verdict: dict, rows: list[dict], summary: dict) -> tuple[pa.Table, dict]:
    """The history check's anomalies and verdict with the EOS rows and EOS-1/EOS-2 added."""
    verdict = dict(verdict, anomalies=dict(verdict["anomalies"]), violations=dict(verdict["violations"]),
                   guarantees=dict(verdict["guarantees"]), eos=summary)
    for anomaly, n in summary["anomalies"].items():
        verdict["anomalies"][anomaly] = n
    for guarantee_id in GUARANTEES:
        verdict["guarantees"][guarantee_id] = {"status": "held", "anomalies": {}}
    for r in rows:
        if r["violation"]:
            verdict["violations"][r["anomaly"]] = summary["anomalies"][r["anomaly"]]
            entry = verdict["guarantees"][r["guarantee"]]
            entry["status"] = "violated"
            entry["anomalies"][r["anomaly"]] = summary["anomalies"][r["anomaly"]]
    verdict["guarantees"] = dict(sorted(verdict["guarantees"].items()))
    verdict["valid"] = not verdict["violations"]
    table = pa.concat_tables([anomalies, pa.Table.from_pylist(rows, schema=ANOMALY_SCHEMA)])
    return table, verdict
