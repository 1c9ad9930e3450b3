"""The Spark side of the checker: read a history once, group it by topic-partition, and run
every per-partition check on each group in one pass (applyInArrow, numpy inside).

Only three things cross partitions, and each is small or read once:
- proven ops: info ops with a send that some ok op read, in any partition; their sends
  must have committed (an info op's outcome is unknown until a read proves it)
- assignments: ok/info assign and subscribe ops, and the partitions each retains
- the op table of the cycle search (read by the driver, see checker.py)

The pass returns one row per (partition, check): the check's rows as an Arrow IPC stream
and the seconds the check took on that partition.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_validation.partition_log import F_CODES, INFO, NO_NS, NO_OFFSET, OK, TYPE_CODES, PartitionLog
from spec.history import ASSIGNMENT_FS, CLIENT_FS

TP = ["topic", "partition"]
RESULT_SCHEMA = pa.schema([("check", pa.string()), ("seconds", pa.float64()), ("rows", pa.binary())])
RESULT_DDL = "check string, seconds double, rows binary"
IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")

PartitionCheck = Callable[[PartitionLog], pa.Table]


def _code(column: str, codes: dict[str, int]):
    code = None
    for name, value in codes.items():
        code = (F.when(F.col(column) == name, value) if code is None else code.when(F.col(column) == name, value))
    return code.cast("byte")


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=IPC_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def read_ipc(payload: bytes) -> pa.Table:
    return pa.ipc.open_stream(payload).read_all()


class HistoryFrames:
    """One history in Spark: its client mops (the only large frame) and the small cross-partition tables."""

    def __init__(self, spark: SparkSession, parquet_path: str, shuffle_partitions: int):
        self.spark = spark
        self.shuffle_partitions = shuffle_partitions
        completions = spark.read.parquet(parquet_path).where(F.col("type") != "invoke")
        self.mops = (completions.where(F.col("f").isin(*CLIENT_FS) & F.col("mop_f").isNotNull()
                                       & F.col("topic").isNotNull() & F.col("value").isNotNull())
                     .select(*TP, "index", "seq", "process", _code("type", TYPE_CODES).alias("type"),
                             _code("f", F_CODES).alias("f"), (F.col("mop_f") == "send").alias("is_send"), "time_ns",
                             F.coalesce("invoke_time_ns", F.lit(NO_NS)).alias("invoke_ns"), "value",
                             F.coalesce("offset", F.lit(NO_OFFSET)).alias("offset"), "rebalanced"))
        self.assignments = (completions.where(F.col("f").isin(*ASSIGNMENT_FS) & F.col("type").isin("ok", "info"))
                            .select("index", "seq", "process", *TP))

    def proven_ops(self) -> np.ndarray:
        """Op indices of info ops with a send some ok op read (in the same partition)."""
        info_sends = self.mops.where((F.col("type") == INFO) & F.col("is_send")).select(*TP, "value", "index")
        if info_sends.isEmpty():
            return np.zeros(0, np.int64)
        ok_reads = self.mops.where((F.col("type") == OK) & ~F.col("is_send")).select(*TP, "value")
        proven = ok_reads.join(F.broadcast(info_sends), [*TP, "value"]).select("index").distinct()
        return np.sort(proven.toArrow().column("index").to_numpy())

    def assignment_table(self) -> pa.Table:
        return self.assignments.toArrow()

    def per_partition(self, checks: dict[str, PartitionCheck], proven_ops: np.ndarray,
                      assignments: pa.Table) -> pa.Table:
        """Every check on every topic-partition, in one shuffle: RESULT_SCHEMA rows."""
        assignment_ops = assignments.filter(pc.equal(assignments.column("seq"), 0))
        assign_index = assignment_ops.column("index").to_numpy()
        assign_process = assignment_ops.column("process").to_numpy()
        retained = assignments.filter(pc.is_valid(assignments.column("topic"))).to_pylist()

        def check_partition(key: tuple, mops: pa.Table) -> pa.Table:
            topic, partition = key[0].as_py(), key[1].as_py()
            keeps = {r["index"] for r in retained
                     if r["topic"] == topic and (r["partition"] is None or r["partition"] == partition)}
            dropped = ~np.isin(assign_index, list(keeps))
            p = PartitionLog(topic, partition, mops, proven_ops, (assign_process[dropped], assign_index[dropped]))
            results = []
            for name, check in checks.items():
                started = time.perf_counter()
                table = check(p)
                results.append((name, time.perf_counter() - started, _ipc(table)))
            return pa.table(list(zip(*results)), schema=RESULT_SCHEMA)

        grouped = self.mops.repartition(self.shuffle_partitions, *TP).groupBy(*TP)
        return grouped.applyInArrow(check_partition, RESULT_DDL).toArrow()
