"""The cycle search on Spark in bounded memory: the dependency graph is cut where no cycle can
cross, and each piece (a chunk of the history) is searched by one task with cycles.find_cycles.

Positions are op indices (an op's completion's place in the history); cut c lies between
positions c and c+1. A cycle spanning cut c crosses it both ways. rt edges only go forward
(an op that completed before another began completed earlier, so sits earlier in a history
kept in time order), so the backward crossing is a dependency edge from a later op to an
earlier one (two overlapping ops, or an anomaly). A cut no backward edge spans (a free cut)
splits the graph: no cycle crosses it, and the rt reduction of each side is the whole
history's restricted to it (an op that completes between two ops sits between them).

1. The ops pass reads every client op's completion (index, type, invocation and completion
   times) once, as compressed blobs per row group, and checks the history is in time order:
   completion times non-decreasing with the index, every invocation before its completion.
   A history that is not is searched whole, in one task.
2. The window pass: from every CHUNK_POSITIONS-th cut on, a window of WINDOW_CUTS cuts; each
   edge task counts the backward edges over each window's cuts (difference arrays), the
   driver sums them (a WINDOW_CUTS-integer array per window) and cuts at each window's first
   free cut. A window with none joins its chunks: correct, only larger.
3. Edges and ops are re-blobbed by chunk and shuffled so that each chunk is one task's; each
   task holds one chunk at a time. The cycles come back as anomaly rows with their place in
   the order a search of the whole graph reports them: the first CYCLE_ROWS_MAX rows and the
   count of the rest by anomaly (a long history of overlapping transactions has millions).

The driver holds only per-task and per-window summaries and the rows it reports.
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

CHUNK_POSITIONS = 1 << 20   # history positions (about half as many ops) per chunk, where a free cut is near
WINDOW_CUTS = 1 << 12       # cuts searched for a free one past each CHUNK_POSITIONS-th
CYCLE_ROWS_MAX = 10_000     # cycle rows reported; the rest are counted
SEARCH_PARTITIONS_MAX = 64  # tasks of the chunk search (each takes its chunks one at a time)
OP_COLUMNS = ["index", "type", "invoke_time_ns", "time_ns"]
OPS_SCHEMA = pa.schema([("first_index", pa.int64()), ("last_index", pa.int64()), ("first_ns", pa.int64()),
                        ("last_ns", pa.int64()), ("in_order", pa.bool_()), ("payload", pa.binary())])
OPS_DDL = "first_index long, last_index long, first_ns long, last_ns long, in_order boolean, payload binary"
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


def in_time_order(ops: pa.Table) -> bool:
    """Whether ops (sorted as read) have rising indices, non-decreasing completion times, and
    every invocation at or before its completion."""
    index, complete_ns = ops["index"].to_numpy(), ops["time_ns"].to_numpy()
    invoke = ops["invoke_time_ns"]
    return bool((index[1:] > index[:-1]).all() and (complete_ns[1:] >= complete_ns[:-1]).all()
                and invoke.null_count == 0 and (invoke.to_numpy() <= complete_ns).all())


def window_diffs(src: np.ndarray, dst: np.ndarray, windows: int, chunk_positions: int) -> np.ndarray:
    """(windows, WINDOW_CUTS + 1) difference arrays: per window, +1 where a backward edge's span
    of cuts enters it and -1 after it leaves. Window w holds cuts from (w + 1) * chunk_positions."""
    diff = np.zeros((windows, WINDOW_CUTS + 1), np.int32)
    back = src > dst
    lo, hi = dst[back], src[back] - 1  # the cuts the edge spans
    first = np.maximum(-(-(lo - WINDOW_CUTS + 1) // chunk_positions) - 1, 0)
    last = np.minimum(hi // chunk_positions - 1, windows - 1)
    counts = np.maximum(last - first + 1, 0)
    edge = np.repeat(np.arange(len(lo)), counts)
    window = np.repeat(first, counts) + np.arange(len(edge)) - np.repeat(np.cumsum(counts) - counts, counts)
    start = (window + 1) * chunk_positions
    np.add.at(diff, (window, np.maximum(lo[edge], start) - start), 1)
    np.add.at(diff, (window, np.minimum(hi[edge], start + WINDOW_CUTS - 1) - start + 1), -1)
    return diff


def chunk_starts(diff: np.ndarray, chunk_positions: int) -> np.ndarray:
    """The first position of each chunk: 0, and one past each window's first free cut."""
    covered = np.cumsum(diff, axis=1)[:, :WINDOW_CUTS]
    assert (covered >= 0).all()
    starts = [0]
    for window, row in enumerate(covered):
        free = np.flatnonzero(row == 0)
        if len(free):
            starts.append((window + 1) * chunk_positions + int(free[0]) + 1)
    return np.array(starts, np.int64)


def search(spark: SparkSession, edge_blobs: DataFrame, parquet_path: Path,
           options: RunOptions, chunk_positions: int = CHUNK_POSITIONS) -> tuple[list[dict], dict[tuple[str, bool], int]]:
    """Cycle rows (the first CYCLE_ROWS_MAX, in the order of a whole-graph search) and the count
    of all cycles by (anomaly, violation). edge_blobs has a column rows: dependency edges as
    Arrow IPC streams (EDGE_SCHEMA)."""
    ops = op_blobs(spark, parquet_path)
    starts = chunk_starts_of(edge_blobs, ops, chunk_positions)
    cycles = _search_chunks(edge_blobs, ops, starts, options).persist(StorageLevel.DISK_ONLY)
    counts = {(r["anomaly"], r["violation"]): r["count"]
              for r in cycles.groupBy("anomaly", "violation").count().collect()}
    shown = cycles.where(F.col("row").isNotNull()).orderBy(*ORDER).limit(CYCLE_ROWS_MAX).select("row").toArrow()
    cycles.unpersist()
    ops.unpersist()
    rows = [row for payload in shown.column("row") for row in read_ipc(payload.as_buffer()).to_pylist()]
    return rows, counts


def op_blobs(spark: SparkSession, parquet_path: Path) -> DataFrame:
    """Per task of row groups: its ops as one blob, the first and last (index, completion time), in order or not."""
    groups = row_groups(parquet_path)
    tasks = spark.range(0, len(groups), numPartitions=max(min(len(groups), SEARCH_PARTITIONS_MAX), 1))

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        history = RowGroupReader(["type", "f"])
        for batch in batches:
            for group in batch.column("id").to_pylist():
                ops = op_completions(history.read(*groups[group], ["seq", "f", *OP_COLUMNS]))
                ends = [None] * 4 if ops.num_rows == 0 else [
                    ops["index"][0].as_py(), ops["index"][-1].as_py(), ops["time_ns"][0].as_py(), ops["time_ns"][-1].as_py()]
                yield pa.RecordBatch.from_pylist([{**dict(zip(OPS_SCHEMA.names, ends)), "in_order": in_time_order(ops),
                                                   "payload": to_ipc(ops)}], schema=OPS_SCHEMA)

    return tasks.mapInArrow(read, OPS_DDL).persist(StorageLevel.DISK_ONLY)


def chunk_starts_of(edge_blobs: DataFrame, ops: DataFrame, chunk_positions: int) -> np.ndarray:
    """Chunk starts: at free cuts near every chunk_positions-th position of a history in time
    order, else the one chunk of the whole history. ops is op_blobs' (its summary columns are read)."""
    assert chunk_positions > WINDOW_CUTS
    summary = ops.drop("payload").toArrow().to_pylist()
    parts = sorted((r for r in summary if r["first_index"] is not None), key=lambda r: r["first_index"])
    in_order = all(r["in_order"] for r in parts) and all(
        a["last_index"] < b["first_index"] and a["last_ns"] <= b["first_ns"] for a, b in zip(parts, parts[1:]))
    windows = parts[-1]["last_index"] // chunk_positions if parts else 0
    if not in_order or windows == 0:
        return np.zeros(1, np.int64)

    def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        diff = np.zeros((windows, WINDOW_CUTS + 1), np.int32)
        for batch in batches:
            for payload in batch.column("rows"):
                edges = read_ipc(payload.as_buffer())
                diff += window_diffs(edges["src"].to_numpy(), edges["dst"].to_numpy(), windows, chunk_positions)
        touched = np.flatnonzero(diff.any(axis=1))
        yield pa.RecordBatch.from_pydict({"window": touched.astype(np.int32), "diff": [diff[w].tobytes() for w in touched]})

    diff = np.zeros((windows, WINDOW_CUTS + 1), np.int32)
    for window, payload in _pairs(edge_blobs.mapInArrow(count, WINDOW_DDL).toArrow(), "window", "diff"):
        diff[window] += np.frombuffer(payload, np.int32)
    return chunk_starts(diff, chunk_positions)


def _pairs(table: pa.Table, key: str, payload: str) -> Iterator[tuple]:
    return zip(table.column(key).to_pylist(), (p.as_py() for p in table.column(payload)))


def _by_chunk(table: pa.Table, position: np.ndarray, starts: np.ndarray, edges: bool) -> pa.RecordBatch:
    """table's rows as one blob per chunk (of position; rows that are dropped have position -1)."""
    chunk = np.searchsorted(starts, position, "right") - 1
    keep = np.flatnonzero(position >= 0)
    keep = keep[np.argsort(chunk[keep], kind="stable")]
    chunks, first = np.unique(chunk[keep], return_index=True)
    ends = np.append(first[1:], len(keep))
    payloads = [to_ipc(table.take(pa.array(keep[a:b]))) for a, b in zip(first, ends)]
    return pa.RecordBatch.from_pydict({"chunk": chunks.astype(np.int32), "edges": [edges] * len(chunks),
                                       "payload": payloads}, schema=CHUNK_SCHEMA)


def _search_chunks(edge_blobs: DataFrame, ops: DataFrame, starts: np.ndarray, options: RunOptions) -> DataFrame:
    def edges_by_chunk(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for payload in batch.column("rows"):
                edges = read_ipc(payload.as_buffer())
                src, dst = edges["src"].to_numpy(), edges["dst"].to_numpy()
                chunk_src, chunk_dst = (np.searchsorted(starts, x, "right") for x in (src, dst))
                # an edge between chunks crosses a free cut: it is on no cycle
                yield _by_chunk(edges, np.where(chunk_src == chunk_dst, src, -1), starts, True)

    def ops_by_chunk(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for payload in batch.column("payload"):
                ops = read_ipc(payload.as_buffer())
                yield _by_chunk(ops, ops["index"].to_numpy(), starts, False)

    def search_chunks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        chunk, edges, ops = None, [], []
        for batch in batches:
            for c, is_edges, payload in zip(*(batch.column(n).to_pylist() for n in ("chunk", "edges", "payload"))):
                if c != chunk:
                    if edges:
                        yield _cycle_batch(edges, ops, options)
                    chunk, edges, ops = c, [], []
                (edges if is_edges else ops).append(payload)
        if edges:
            yield _cycle_batch(edges, ops, options)
        release_memory()

    chunks = (edge_blobs.select("rows").mapInArrow(edges_by_chunk, CHUNK_DDL)
              .unionByName(ops.select("payload").mapInArrow(ops_by_chunk, CHUNK_DDL)))
    partitions = max(min(len(starts), SEARCH_PARTITIONS_MAX), 1)
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
