"""The cycle search on Spark in bounded memory: the dependency graph is cut where no cycle can
cross, and each piece (a span of time of the history) is searched by one task with cycles.find_cycles.

A cut at time t splits the ops into those completed by t and those completed after. A cycle
with ops on both sides crosses the cut both ways. rt edges only go forward (an op that
completed before another began completed earlier), so the backward crossing is a dependency
edge from a later-completed op to an earlier one (two overlapping ops, or an anomaly). A cut no
backward edge spans (a free cut) splits the graph: no cycle crosses it, and the rt reduction
on each side is the whole history's restricted to it (an op that completes between two ops
completes between them).

1. The ops pass reads every client op's completion (index, type, invocation and completion
   times) once, as compressed blobs per row group, with a sample of the row group's completion
   times (one every chunk_ops / CUT_SAMPLES ops) and whether every invocation came at or before
   its completion (a history where one did not is searched whole, in one task). The driver
   merges the samples and takes every CUT_SAMPLES-th as a candidate cut: about one per
   chunk_ops ops of the whole history, however small its row groups (a Jepsen import's parts
   hold about 50,000 ops each).
2. The window pass: from each candidate, a window of WINDOW_BINS bins of about the mean time
   between completions; each edge task counts the backward edges over each bin (difference
   arrays), the driver sums them and cuts each window in its first bin no backward edge touches.
   A window with none joins its chunks: correct, only larger.
3. Edges and ops are re-blobbed by chunk and shuffled so that each chunk is one task's; each
   task holds one chunk at a time. The cycles come back as anomaly rows with their place in
   the order a search of the whole graph reports them: the first CYCLE_ROWS_MAX rows and the
   count of all by anomaly (a long history of overlapping transactions has millions).

The driver holds the samples (CUT_SAMPLES per chunk_ops ops), one window per candidate and the rows it reports.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_validation.anomalies import ROW_SCHEMA
from spark_validation.cycles import EDGE_SCHEMA, cycle_rows, find_cycles
from spark_validation.frames import RowGroupReader, read_ipc, release_memory, row_groups, to_ipc
from spark_validation.options import RunOptions
from spec.history import CLIENT_FS

CHUNK_OPS = 1 << 19          # ops per chunk, about: a candidate cut every CHUNK_OPS ops of the history
CUT_SAMPLES = 16             # completion times sampled per chunk_ops ops; every CUT_SAMPLES-th merged one is a candidate
SAMPLE_PHASE = 0x9E3779B1    # spreads the first sample of each row group (golden ratio), so that small ones add up
WINDOW_BINS = 1 << 12        # bins searched for a free cut past each candidate
CYCLE_ROWS_MAX = 10_000      # cycle rows reported; the rest are counted
SEARCH_PARTITIONS_MAX = 64   # tasks of the chunk search (each takes its chunks one at a time)
OP_COLUMNS = ["index", "type", "invoke_time_ns", "time_ns"]
OPS_SCHEMA = pa.schema([("ops", pa.int64()), ("first_ns", pa.int64()), ("last_ns", pa.int64()),
                        ("invoked_first", pa.bool_()), ("samples", pa.list_(pa.int64())), ("payload", pa.binary())])
OPS_DDL = "ops long, first_ns long, last_ns long, invoked_first boolean, samples array<long>, payload binary"
WINDOW_DDL = "window int, diff binary"
CHUNK_SCHEMA = pa.schema([("chunk", pa.int32()), ("edges", pa.bool_()), ("payload", pa.binary())])
CHUNK_DDL = "chunk int, edges boolean, payload binary"
ORDER = ["search", "rt_edge", "k0", "k1", "k2", "k3", "k4", "k5", "k6"]  # Cycle.order, column by column
CYCLE_SCHEMA = pa.schema([("search", pa.int32()), ("rt_edge", pa.bool_()), ("k0", pa.int64()), ("k1", pa.int64()),
                          ("k2", pa.int64()), ("k3", pa.string()), ("k4", pa.int32()), ("k5", pa.int64()),
                          ("k6", pa.int64()), ("anomaly", pa.string()), ("violation", pa.bool_()), ("row", pa.binary())])
CYCLE_DDL = ("search int, rt_edge boolean, k0 long, k1 long, k2 long, k3 string, k4 int, k5 long, k6 long, "
             "anomaly string, violation boolean, row binary")


def op_completions(rows: pa.Table) -> pa.Table:
    """Each client op's completion (OP_COLUMNS, type as a string) among rows of a history."""
    keep = pc.and_(pc.and_(pc.equal(rows["seq"], 0), pc.not_equal(rows["type"], "invoke")),
                   pc.is_in(rows["f"], pa.array(CLIENT_FS)))
    ops = rows.filter(keep).select(OP_COLUMNS)
    return ops.set_column(1, "type", pc.cast(ops["type"], pa.string()))


def invoked_first(ops: pa.Table) -> bool:
    """Whether every op has an invocation time at or before its completion."""
    invoke = ops["invoke_time_ns"]
    return bool(invoke.null_count == 0 and (invoke.to_numpy() <= ops["time_ns"].to_numpy()).all())


def window_diffs(src_ns: np.ndarray, dst_ns: np.ndarray, starts: np.ndarray, bin_ns: int) -> np.ndarray:
    """(windows, WINDOW_BINS + 1) difference arrays: per window, +1 at the first bin a backward
    edge's span touches and -1 after the last. Window w holds times from starts[w] (ascending) on,
    in bins of bin_ns; a backward edge spans the cuts at times dst_ns .. src_ns - 1."""
    diff = np.zeros((len(starts), WINDOW_BINS + 1), np.int32)
    back = src_ns > dst_ns
    lo, hi = dst_ns[back], src_ns[back] - 1
    ends = starts + WINDOW_BINS * bin_ns - 1
    first = np.searchsorted(ends, lo, "left")
    last = np.searchsorted(starts, hi, "right") - 1
    counts = np.maximum(last - first + 1, 0)
    edge = np.repeat(np.arange(len(lo)), counts)
    window = np.repeat(first, counts) + np.arange(len(edge)) - np.repeat(np.cumsum(counts) - counts, counts)
    start = starts[window]
    np.add.at(diff, (window, (np.maximum(lo[edge], start) - start) // bin_ns), 1)
    np.add.at(diff, (window, (np.minimum(hi[edge], ends[window]) - start) // bin_ns + 1), -1)
    return diff


def chunk_ends(diff: np.ndarray, starts: np.ndarray, bin_ns: int) -> np.ndarray:
    """The last completion time of each chunk but the last: in each window, the first bin no
    backward edge touches (every time in it is a free cut)."""
    covered = np.cumsum(diff, axis=1)[:, :WINDOW_BINS]
    assert (covered >= 0).all()
    ends = []
    for start, row in zip(starts.tolist(), covered):
        free = np.flatnonzero(row == 0)
        if len(free):
            ends.append(start + int(free[0]) * bin_ns)
    return np.unique(np.array(ends, np.int64))


def search(spark: SparkSession, edge_blobs: DataFrame, parquet_path: Path, options: RunOptions,
           chunk_ops: int = CHUNK_OPS) -> tuple[list[dict], dict[tuple[str, bool], int]]:
    """Cycle rows (the first CYCLE_ROWS_MAX, in the order of a whole-graph search) and the count
    of all cycles by (anomaly, violation). edge_blobs has a column rows: dependency edges as
    Arrow IPC streams (EDGE_SCHEMA)."""
    ops = op_blobs(spark, parquet_path, chunk_ops)
    ends = chunk_ends_of(edge_blobs, ops)
    cycles = _search_chunks(edge_blobs, ops, ends, options).persist(StorageLevel.DISK_ONLY)
    counts = {(r["anomaly"], r["violation"]): r["count"]
              for r in cycles.groupBy("anomaly", "violation").count().collect()}
    shown = cycles.where(F.col("row").isNotNull()).orderBy(*ORDER).limit(CYCLE_ROWS_MAX).select("row").toArrow()
    cycles.unpersist()
    ops.unpersist()
    rows = [row for payload in shown.column("row") for row in read_ipc(payload.as_buffer()).to_pylist()]
    return rows, counts


def op_blobs(spark: SparkSession, parquet_path: Path, chunk_ops: int) -> DataFrame:
    """Per row group: its ops as one blob, their count, first and last completion, a sample of its
    completion times (one every chunk_ops / CUT_SAMPLES ops), and whether each was invoked before it completed."""
    groups = row_groups(parquet_path)
    tasks = spark.range(0, len(groups), numPartitions=max(min(len(groups), SEARCH_PARTITIONS_MAX), 1))
    step = max(chunk_ops // CUT_SAMPLES, 1)

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        history = RowGroupReader(["type", "f"])
        for batch in batches:
            for group in batch.column("id").to_pylist():
                ops = op_completions(history.read(*groups[group], ["seq", "f", *OP_COLUMNS]))
                complete_ns = np.sort(ops["time_ns"].to_numpy())
                yield pa.RecordBatch.from_pylist([{
                    "ops": ops.num_rows, "first_ns": int(complete_ns[0]) if len(complete_ns) else None,
                    "last_ns": int(complete_ns[-1]) if len(complete_ns) else None, "invoked_first": invoked_first(ops),
                    "samples": complete_ns[(group * SAMPLE_PHASE) % step::step].tolist(), "payload": to_ipc(ops)}],
                    schema=OPS_SCHEMA)

    return tasks.mapInArrow(read, OPS_DDL).persist(StorageLevel.DISK_ONLY)


def chunk_ends_of(edge_blobs: DataFrame, ops: DataFrame) -> np.ndarray:
    """The last completion time of each chunk but the last (op_blobs' ops; their summary is read):
    none, one chunk, for a history where an op completed before it was invoked."""
    summary = ops.drop("payload").toArrow().to_pylist()
    parts = [r for r in summary if r["ops"]]
    samples = np.sort(np.array([c for r in parts for c in r["samples"]], np.int64))
    starts = np.unique(samples[CUT_SAMPLES // 2::CUT_SAMPLES])  # about chunk_ops / 2, 3 chunk_ops / 2, ... into the history
    if not parts or not all(r["invoked_first"] for r in parts) or len(starts) == 0:
        return np.zeros(0, np.int64)
    span_ns = max(r["last_ns"] for r in parts) - min(r["first_ns"] for r in parts)
    bin_ns = max(span_ns // sum(r["ops"] for r in parts), 1)  # about one completion per bin

    def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        diff = np.zeros((len(starts), WINDOW_BINS + 1), np.int32)
        for batch in batches:
            for payload in batch.column("rows"):
                edges = read_ipc(payload.as_buffer())
                diff += window_diffs(edges["src_ns"].to_numpy(), edges["dst_ns"].to_numpy(), starts, bin_ns)
        touched = np.flatnonzero(diff.any(axis=1))
        yield pa.RecordBatch.from_pydict({"window": touched.astype(np.int32), "diff": [diff[w].tobytes() for w in touched]})

    diff = np.zeros((len(starts), WINDOW_BINS + 1), np.int32)
    table = edge_blobs.mapInArrow(count, WINDOW_DDL).toArrow()
    for window, payload in zip(table.column("window").to_pylist(), table.column("diff")):
        diff[window] += np.frombuffer(payload.as_py(), np.int32)
    return chunk_ends(diff, starts, bin_ns)


def _by_chunk(table: pa.Table, chunk: np.ndarray, edges: bool) -> pa.RecordBatch:
    """table's rows as one blob per chunk (rows of chunk -1 are dropped)."""
    keep = np.flatnonzero(chunk >= 0)
    keep = keep[np.argsort(chunk[keep], kind="stable")]
    chunks, first = np.unique(chunk[keep], return_index=True)
    ends = np.append(first[1:], len(keep))
    payloads = [to_ipc(table.take(pa.array(keep[a:b]))) for a, b in zip(first, ends)]
    return pa.RecordBatch.from_pydict({"chunk": chunks.astype(np.int32), "edges": [edges] * len(chunks),
                                       "payload": payloads}, schema=CHUNK_SCHEMA)


def _search_chunks(edge_blobs: DataFrame, ops: DataFrame, ends: np.ndarray, options: RunOptions) -> DataFrame:
    def chunk_of(complete_ns: np.ndarray) -> np.ndarray:
        return np.searchsorted(ends, complete_ns, "left")  # chunk k: completed after ends[k - 1], by ends[k]

    def edges_by_chunk(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for payload in batch.column("rows"):
                edges = read_ipc(payload.as_buffer())
                src, dst = (chunk_of(edges[c].to_numpy()) for c in ("src_ns", "dst_ns"))
                yield _by_chunk(edges, np.where(src == dst, src, -1), True)  # between chunks: on no cycle

    def ops_by_chunk(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for payload in batch.column("payload"):
                ops = read_ipc(payload.as_buffer())
                yield _by_chunk(ops, chunk_of(ops["time_ns"].to_numpy()), False)

    def search_chunks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        chunk, edges, ops = None, [], []
        for batch in batches:
            for c, is_edges, payload in zip(*(batch.column(n).to_pylist() for n in ("chunk", "edges", "payload"))):
                if c != chunk:
                    if edges:
                        yield _cycle_batch(edges, ops, options)
                    chunk, edges, ops = c, [], []
                    release_memory()  # one chunk's graph at a time: the last one's pages go back before the next
                (edges if is_edges else ops).append(payload)
        if edges:
            yield _cycle_batch(edges, ops, options)
        release_memory()

    chunks = (edge_blobs.select("rows").mapInArrow(edges_by_chunk, CHUNK_DDL)
              .unionByName(ops.select("payload").mapInArrow(ops_by_chunk, CHUNK_DDL)))
    partitions = max(min(len(ends) + 1, SEARCH_PARTITIONS_MAX), 1)
    return chunks.repartition(partitions, "chunk").sortWithinPartitions("chunk").mapInArrow(search_chunks, CYCLE_DDL)


def _cycle_batch(edges: list[bytes], ops: list[bytes], options: RunOptions) -> pa.RecordBatch:
    """The cycles of one chunk: their places, anomaly, violation, and (the first CYCLE_ROWS_MAX) the row itself."""
    op_table = pa.concat_tables([read_ipc(p) for p in ops]).sort_by("index")
    edge_table = pa.concat_tables([read_ipc(p).cast(EDGE_SCHEMA) for p in edges])
    found = sorted(find_cycles(edge_table, op_table), key=lambda c: c.order)
    rows = cycle_rows(found, options)
    columns = {name: [c.order[i] for c in found] for i, name in enumerate(ORDER)}
    return pa.RecordBatch.from_pydict({
        **columns, "anomaly": [r["anomaly"] for r in rows], "violation": [r["violation"] for r in rows],
        "row": [to_ipc(pa.Table.from_pylist([r], schema=ROW_SCHEMA)) if i < CYCLE_ROWS_MAX else None
                for i, r in enumerate(rows)]}, schema=CYCLE_SCHEMA)
