"""Check a mirror's history (mirror/history.py: both clusters' records) with Spark: MIR-1, MIR-2 and,
when a fault run recorded a source group and its checkpoints, MIR-3.

- mirror-lost (MIR-1): a source record with no copy in its remote partition. When the run recorded
  the mirror's committed progress (faults/mirror_workload.py), only a record at or below the
  furthest progress of its partition is lost; one beyond it is mirror-pending: the mirror had
  not reached it when the run ended (reported, not a violation: MIR-1 holds for what the mirror
  says it copied, and a run that ends before it caught up cannot judge its tail). A run whose
  mirror never committed progress leaves MIR-1 not checked.
- mirror-reorder (MIR-1): the first copies in a remote partition are not in source order: a
  record's first copy lies before the first copy of a record before it in the source.
- mirror-duplicate (MIR-2): a source record copied more than once; a violation only when the
  flow ran exactly once (at least once, duplicates are allowed and reported for the record).
- mirror-source-repeats (reported, not a violation): a value the source partition holds at more
  than one offset. Records are told apart by value, and the workload sends each value once, yet an
  idempotent producer can append a value twice: librdkafka bumps its epoch producer-wide (a
  message timing out in one partition, an out-of-order sequence answer) and renumbers every
  partition's queued messages from sequence 0, among them a batch whose first send was appended
  but never acknowledged (librdkafka issue 4953); the broker takes a new epoch at sequence 0 as new
  records (Kafka's ProducerAppendInfo.checkSequence). Those are distinct source records, each to
  be copied once: the copies of a value are dealt to its source records in target order (the n-th
  copy to the (n mod k)-th of its k source records, k the times the source holds it), so an exactly
  once mirror's copies map one to one, and only copies beyond k count as duplicates.
- mirror-checkpoint-skips (MIR-3): a checkpoint translated the group's source offset u into
  target offset d, yet a source record the group had not consumed (offset >= u, and beyond
  what the group's recorded polls reached) has every copy below d: the group failing over to
  the target at d would never read it. Copies below d of records it had consumed are fine
  (re-reads), as is a record with no copy at all (that is mirror-lost).

One row per (anomaly, topic, partition), listing up to EVIDENCE_VALUES_MAX values and their
source offsets. `kspec check FOLDER` runs this when FOLDER holds mirror.json, and writes
anomalies.parquet and verdict.json as for client histories.
"""
from __future__ import annotations

import json
from pathlib import Path

import click
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from mirror.history import CHECKPOINTS_FILE, GROUP_FILE, MIRROR_FILE, PROGRESS_FILE, SOURCE_FILE, TARGET_FILE
from spark_validation.anomalies import ANOMALY_SCHEMA, AnomalyKind

EVIDENCE_VALUES_MAX = 1024
GUARANTEES = ("MIR-1", "MIR-2", "MIR-3")
# Kept apart from anomalies.ANOMALY_KINDS: a client history's verdict must not list MIR-* as held.
MIRROR_KINDS = {k.name: k for k in (
    AnomalyKind("mirror-lost", "MIR-1", "a source record has no copy in its remote partition"),
    AnomalyKind("mirror-pending", None,
                "a source record beyond the mirror's committed progress: not reached when the run ended"),
    AnomalyKind("mirror-reorder", "MIR-1", "a record's first copy lies before the first copy of an earlier record"),
    AnomalyKind("mirror-duplicate", "MIR-2", "a source record was copied more than once"),
    AnomalyKind("mirror-source-repeats", None,
                "a value the source partition holds at more than one offset (a producer's re-send): "
                "its copies are matched to those records in order"),
    AnomalyKind("mirror-checkpoint-skips", "MIR-3",
                "a checkpoint's translated offset lies past every copy of a record the group had not consumed"),
)}


def is_mirror_history(path: Path) -> bool:
    return path.is_dir() and (path / MIRROR_FILE).exists()


def check_mirror(spark: SparkSession, history: Path) -> tuple[pa.Table, dict]:
    """(anomalies as ANOMALY_SCHEMA, verdict) for one recorded flow."""
    flow = json.loads((history / MIRROR_FILE).read_text())
    source = spark.read.parquet(str(history / SOURCE_FILE))
    target = spark.read.parquet(str(history / TARGET_FILE))
    # A value held k times by the source is k source records; its copies are dealt to them in
    # target order (see mirror-source-repeats above).
    same_value = Window.partitionBy("topic", "partition", "value")
    source = (source.withColumn("occurrence", F.row_number().over(same_value.orderBy("offset")) - 1)
              .withColumn("occurrences", F.count("*").over(same_value)))
    held = source.select("topic", "partition", "value", "occurrences").distinct()
    copies = (target.select(F.col("source_topic").alias("topic"), "partition", "offset", "value")
              .withColumn("copy_index", F.row_number().over(same_value.orderBy("offset")) - 1)
              .join(held, ["topic", "partition", "value"], "left")
              .withColumn("occurrence", F.col("copy_index") % F.coalesce(F.col("occurrences"), F.lit(1)))
              .groupBy("topic", "partition", "value", "occurrence")
              .agg(F.min("offset").alias("first_copy"), F.max("offset").alias("last_copy"),
                   F.count("*").alias("copies")))
    earlier = Window.partitionBy("topic", "partition").orderBy("offset").rowsBetween(Window.unboundedPreceding, -1)
    joined = (source.join(copies, ["topic", "partition", "value", "occurrence"], "left")
              .withColumn("latest_earlier_copy", F.max("first_copy").over(earlier)))
    progress_path = history / PROGRESS_FILE
    progress_recorded = progress_path.exists()
    if progress_recorded:  # the furthest committed progress per source partition (last offset copied)
        fronts = (spark.read.parquet(str(progress_path)).groupBy("topic", "partition")
                  .agg(F.max("last_copied").alias("front")))
        joined = joined.join(fronts, ["topic", "partition"], "left")
        pending = F.coalesce(F.col("offset") > F.col("front"), F.lit(True))
    else:
        pending = F.lit(False)
    flags = F.array_compact(F.array(
        F.when(F.col("first_copy").isNull() & ~pending, F.lit("mirror-lost")),
        F.when(F.col("first_copy").isNull() & pending, F.lit("mirror-pending")),
        F.when(F.col("first_copy") < F.col("latest_earlier_copy"), F.lit("mirror-reorder")),
        F.when(F.col("copies") > 1, F.lit("mirror-duplicate")),
        F.when(F.col("occurrences") > 1, F.lit("mirror-source-repeats"))))
    flagged = joined.select("topic", "partition", "offset", "value", F.explode(flags).alias("anomaly"))
    checkpoints_checked = (history / CHECKPOINTS_FILE).exists() and pq.ParquetFile(
        history / CHECKPOINTS_FILE).metadata.num_rows > 0  # no checkpoint: MIR-3 not checked
    if checkpoints_checked:
        flagged = flagged.unionByName(_checkpoint_skips(spark, history, target, joined))
    found = (flagged
             .groupBy("anomaly", "topic", "partition")
             .agg(F.count("*").alias("n"),
                  F.slice(F.sort_array(F.collect_list(F.struct("offset", "value"))), 1,
                          EVIDENCE_VALUES_MAX).alias("evidence"))
             .orderBy("anomaly", "topic", "partition").collect())  # one Spark job for every finding
    rows = [{"anomaly": r.anomaly, "guarantee": MIRROR_KINDS[r.anomaly].guarantee_id,
             "violation": MIRROR_KINDS[r.anomaly].guarantee_id is not None
                          and (r.anomaly != "mirror-duplicate" or flow["exactly_once"]), "topic": r.topic,
             "partition": r.partition, "process": None, "ops": None,
             "values": [e.value for e in r.evidence], "offsets": [e.offset for e in r.evidence], "delta": None,
             "detail": f"{r.n} record(s) of {r.topic}-{r.partition}: {MIRROR_KINDS[r.anomaly].definition}"}
            for r in found]
    anomalies = pa.Table.from_pylist(rows, schema=ANOMALY_SCHEMA)
    violated = {row["guarantee"] for row in rows if row["violation"]}
    progressed = not progress_recorded or pq.ParquetFile(progress_path).metadata.num_rows > 0
    checked = (*(("MIR-1",) if progressed else ()), *(("MIR-2",) if flow["exactly_once"] else ()),
               *(("MIR-3",) if checkpoints_checked else ()))
    verdict = {
        "valid": not violated, "flow": f"{flow['source']}->{flow['target']}",
        "records": {name: pq.ParquetFile(history / file).metadata.num_rows
                    for name, file in (("source", SOURCE_FILE), ("target", TARGET_FILE),
                                       ("checkpoints", CHECKPOINTS_FILE)) if (history / file).exists()},
        "anomalies": {a: sum(1 for r in rows if r["anomaly"] == a) for a in MIRROR_KINDS},
        "guarantees": {g: {"status": "violated" if g in violated else "held" if g in checked else "not checked"}
                       for g in GUARANTEES},
    }
    return anomalies, verdict


def _checkpoint_skips(spark: SparkSession, history: Path, target, records):
    """MIR-3's finding rows (topic, partition, offset, value, anomaly): each source record some
    checkpoint skips. A group's bound is the checkpoint's upstream offset, lowered to one past
    the last offset the group's recorded polls read (when they were recorded)."""
    remote = target.select(F.col("topic").alias("remote"), "source_topic").distinct()
    checkpoints = (spark.read.parquet(str(history / CHECKPOINTS_FILE))
                   .join(remote, F.col("topic") == F.col("remote"))
                   .select(F.col("source_topic").alias("cp_topic"), F.col("partition").alias("cp_partition"),
                           "group", "upstream", "downstream"))
    if (history / GROUP_FILE).exists():
        consumed = (spark.read.parquet(str(history / GROUP_FILE)).where(F.col("kind") == "poll")
                    .groupBy(F.col("topic").alias("cp_topic"), F.col("partition").alias("cp_partition"))
                    .agg((F.max("offset") + 1).alias("consumed_end")))
        checkpoints = checkpoints.join(consumed, ["cp_topic", "cp_partition"], "left")
        bound = F.least(F.col("upstream"), F.coalesce(F.col("consumed_end"), F.lit(0)))
    else:
        bound = F.col("upstream")
    checkpoints = checkpoints.withColumn("bound", bound)
    copied = records.where(F.col("last_copy").isNotNull())
    skipped = copied.join(checkpoints, (F.col("topic") == F.col("cp_topic"))
                          & (F.col("partition") == F.col("cp_partition"))
                          & (F.col("offset") >= F.col("bound")) & (F.col("last_copy") < F.col("downstream")))
    return (skipped.select("topic", "partition", "offset", "value").distinct()
            .withColumn("anomaly", F.lit("mirror-checkpoint-skips")))


def check_mirror_history(history: Path, spark: SparkSession, out_dir: Path, json_path: Path | None) -> int:
    """`kspec check` on a mirror history: print the findings, write them, exit status 0 or 1."""
    anomalies, verdict = check_mirror(spark, history)
    return report_side_history(anomalies, verdict, out_dir, json_path,
                               f"flow {verdict['flow']}: {verdict['records']['source']} source records, "
                               f"{verdict['records']['target']} copies")


def report_side_history(anomalies, verdict: dict, out_dir: Path, json_path: Path | None, summary: str) -> int:
    """Write a mirror's or Connect pipeline's findings (anomalies.parquet, verdict.json), print
    them with the summary line and the guarantees, and return the exit status (0 valid, 1 not)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(anomalies, out_dir / "anomalies.parquet")
    for path in (out_dir / "verdict.json", json_path):
        if path is not None:
            path.write_text(json.dumps(verdict, indent=2) + "\n")
    violating = set(anomalies.filter(anomalies["violation"]).column("anomaly").to_pylist())
    for anomaly, n in verdict["anomalies"].items():
        click.echo(f"  {anomaly:24} {n:8d}  {'VIOLATION' if anomaly in violating else 'allowed' if n else ''}")
    click.echo(f"{summary}; " + ", ".join(f"{g} {e['status']}" for g, e in verdict["guarantees"].items()))
    click.echo(f"{'VALID' if verdict['valid'] else 'INVALID'}: results in {out_dir}")
    return 0 if verdict["valid"] else 1
