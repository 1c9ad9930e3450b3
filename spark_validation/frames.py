"""The Spark side of the checker: read a history once, group it by topic-partition, and run
every per-partition check on each group in one pass (mapInArrow, numpy inside).

0. A first scan (a few columns) finds the assign/subscribe ops and the topic-partitions the
   mops name. The ok assigns and subscribes come to the driver (CurrentAssignment, step 1);
   everything else stays in Spark.
1. One task per Parquet row group reads only the columns the checks need, keeps the
   completed client mops, encodes them compactly (MOP_SCHEMA) and emits one Arrow IPC
   blob per topic-partition, plus the ok polls of the processes that had each topic-partition
   assigned (by their last ok assign), for the realtime lag of polls that read nothing there.
2. The blobs are shuffled by topic-partition (a few per partition and row group, not one
   row per mop) and cached on local disk: every partition's mops now sit in one Spark partition.
   The same shuffle brings each topic-partition its resets blob: the assign/subscribe ops that
   dropped it (every one that does not retain it) and every ok subscribe, joined in Spark
   from the first scan (a task gets its own partition's, nothing goes through the driver).
3. Each task joins its blobs per topic-partition into a PartitionLog and runs the checks.

Three more things cross partitions; each is small or goes through the same shuffle:
- assigned polls: per topic-partition, the ok polls of processes that had it assigned
  (by their last ok assign), for the realtime lag of polls that read nothing there;
  emitted beside the mops blobs, so the one shuffle brings them to their partition.
- timed-out sends: per topic-partition, (op, value) of each send its client reported timed out
  to the application (listed in the extra of the op's first row), for the resends the judgement
  explains (resends.py); emitted beside the mops blobs like the assigned polls.
- proven ops: info ops with a send that some ok op read, in any partition; their sends
  must have committed (an info op's outcome is unknown until a read proves it). Found by
  one more pass over the cached blobs, only when the history has info sends, and collected
  (they grow with the info sends).

The check pass returns one row per (partition, check): the check's rows as an Arrow IPC
stream and the seconds the check took there (and one BUILD row per partition), kept in Spark:
the dependency edges among them grow with the history and stay there (cycle_search.py).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_validation.partition_log import (F_CODES, INFO, MOP_SCHEMA, NO_NS, NO_OFFSET, OK, POLL_SCHEMA,
                                            TIMED_OUT_SCHEMA, TYPE_CODES, PartitionLog, group_ends, group_starts,
                                            member, sorted_unique)
from spec.history import ASSIGNMENT_FS, CLIENT_FS

TP = ["topic", "partition"]
READ_COLUMNS = ["index", "seq", "process", "type", "f", "time_ns", "invoke_time_ns", "mop_f", "topic", "partition",
                "value", "offset", "rebalanced", "extra"]
STRING_COLUMNS = ["type", "f", "mop_f", "topic"]  # read as dictionaries: few distinct values
ASSIGNMENT_COLUMNS = ["index", "seq", "process", "type", "f", "mop_f", "topic", "partition"]
MOPS, POLLS, TIMEOUTS, RESETS = "mops", "polls", "timeouts", "resets"  # kinds of blob
BLOB_DDL = "kind string, topic string, partition int, row_group int, info_sends long, payload binary"
BLOB_SCHEMA = pa.schema([("kind", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                         ("row_group", pa.int32()), ("info_sends", pa.int64()), ("payload", pa.binary())])
ASSIGNMENT_SCHEMA = pa.schema([("index", pa.int64()), ("seq", pa.int32()), ("process", pa.int64()),
                               ("type", pa.string()), ("f", pa.string()), ("topic", pa.string()),
                               ("partition", pa.int32())])
# the first scan's rows: assign/subscribe ops (ASSIGNMENT_SCHEMA), and the topic-partitions each row group's mops name
ASSIGNMENT, PARTITION = "assignment", "partition"
SCAN_SCHEMA = pa.schema([("kind", pa.string()), *ASSIGNMENT_SCHEMA])
SCAN_DDL = "kind string, index long, seq int, process long, type string, f string, topic string, partition int"
# a partition's resets blob: the assign/subscribe ops that dropped it, and every ok subscribe
RESET_SCHEMA = pa.schema([("process", pa.int64()), ("index", pa.int64()), ("dropped", pa.bool_()),
                          ("subscribe", pa.bool_())])
RESET_DDL = "topic string, partition int, process long, index long, dropped boolean, subscribe boolean"
RESULT_SCHEMA = pa.schema([("check", pa.string()), ("seconds", pa.float64()), ("rows", pa.binary())])
RESULT_DDL = "check string, seconds double, rows binary"
BUILD = "partition-log"  # the result row that times building each PartitionLog (no rows)
JUDGED = "judgement"  # the result row that times the judge of each partition's rows (no rows)
IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")
_MALLOC_TRIM = getattr(ctypes.CDLL(ctypes.util.find_library("c")), "malloc_trim", None)  # glibc only
OP_KEY_SPAN = 1 << 36  # (process, op index) as one int64: process * OP_KEY_SPAN + index

PartitionCheck = Callable[[PartitionLog], pa.Table]
Judge = Callable[[PartitionLog, dict[str, pa.Table]], dict[str, pa.Table]]


def history_files(path: str | Path) -> list[str]:
    """The Parquet files of a history: the file itself, or the parts in a history folder
    (jepsen_import.py writes one per range of a history.edn), in history order."""
    path = Path(path)
    return [str(path)] if not path.is_dir() else sorted(str(f) for f in path.glob("part-*.parquet"))


def row_groups(path: str | Path) -> list[tuple[str, int]]:
    """(file, row group) of every row group of a history, in history order."""
    return [(file, group) for file in history_files(path) for group in range(pq.ParquetFile(file).num_row_groups)]


class RowGroupReader:
    """Reads row groups of a history's files, opening each file once."""

    def __init__(self, read_dictionary: list[str]):
        self.read_dictionary = read_dictionary
        self.files: dict[str, pq.ParquetFile] = {}

    def read(self, file: str, group: int, columns: list[str]) -> pa.Table:
        if file not in self.files:
            self.files[file] = pq.ParquetFile(file, read_dictionary=self.read_dictionary)
        return self.files[file].read_row_group(group, columns=columns)


def read_filtered(path: str | Path, columns: list[str], keep: Callable[[pa.Table], pa.Array]) -> pa.Table | None:
    """The rows keep selects of a history's columns (None for a history without files), read one
    row group at a time: the driver never holds whole columns of a long history."""
    history = RowGroupReader([])
    parts = []
    for file, group in row_groups(path):
        rows = history.read(file, group, columns)
        parts.append(rows.filter(keep(rows)))
    return pa.concat_tables(parts) if parts else None


def to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=IPC_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def read_ipc(payload: bytes) -> pa.Table:
    return pa.ipc.open_stream(payload).read_all()


def release_memory() -> None:
    """Return what a task freed to the system: Python workers are reused (session.py), and one
    that waits for its next task should not hold the last one's partitions while the driver
    runs the cycle search; nor should the check pass hold one topic-partition's freed pages
    while it reads the next. Arrow's pool keeps freed pages until asked; so does glibc's malloc
    for the task's Python objects (the blobs' bytes), in the middle of its heap, until malloc_trim."""
    pa.default_memory_pool().release_unused()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _codes(column: pa.ChunkedArray, codes: dict[str, int]) -> pa.Array:
    found = pc.index_in(column, value_set=pa.array(list(codes)))
    assert found.null_count == 0, f"unexpected values {pc.unique(pc.filter(column, pc.is_null(found)))}"
    return pc.cast(found, pa.int8())


def encode_mops(rows: pa.Table) -> pa.Table:
    """The completed client mops that name a record, in MOP_SCHEMA plus topic and partition."""
    keep = pc.and_(pc.and_(pc.not_equal(rows["type"], "invoke"), pc.is_in(rows["f"], pa.array(CLIENT_FS))),
                   pc.and_(pc.and_(pc.is_valid(rows["mop_f"]), pc.is_valid(rows["topic"])), pc.is_valid(rows["value"])))
    rows = rows.filter(pc.fill_null(keep, False))
    assert list(TYPE_CODES) == ["ok", "fail", "info"] and list(F_CODES) == ["send", "poll", "txn"]
    return pa.table({
        "index": rows["index"], "seq": rows["seq"], "process": rows["process"], "type": _codes(rows["type"], TYPE_CODES),
        "f": _codes(rows["f"], F_CODES), "is_send": pc.equal(rows["mop_f"], "send"), "time_ns": rows["time_ns"],
        "invoke_ns": pc.fill_null(rows["invoke_time_ns"], NO_NS), "value": rows["value"],
        "offset": pc.fill_null(rows["offset"], NO_OFFSET), "rebalanced": rows["rebalanced"],
        "topic": pc.cast(rows["topic"], pa.string()), "partition": rows["partition"],
    })


def _by_partition(rows: pa.Table, schema: pa.Schema = MOP_SCHEMA) -> Iterator[tuple[str, int, pa.Table]]:
    """(topic, partition, its rows in schema) for each topic-partition in rows (stable: in their order)."""
    rows = rows.sort_by([("topic", "ascending"), ("partition", "ascending")])
    topic = pc.dictionary_encode(rows["topic"]).combine_chunks().indices.to_numpy(zero_copy_only=False)
    partition = rows["partition"].to_numpy()
    starts = group_starts(topic, partition)
    for start, end in zip(starts.tolist(), group_ends(starts, rows.num_rows).tolist()):
        group = rows.slice(start, end - start)
        yield group["topic"][0].as_py(), group["partition"][0].as_py(), group.select(schema.names).cast(schema)


class HistoryFrames:
    """One history in Spark: its mops (and assigned polls, and assignment resets) as blobs partitioned
    by topic-partition, cached."""

    def __init__(self, spark: SparkSession, parquet_path: str, shuffle_partitions: int):
        self.spark = spark
        groups = row_groups(parquet_path)
        tasks = spark.range(0, len(groups), numPartitions=max(min(len(groups), shuffle_partitions), 1))

        def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            history = RowGroupReader(["type", "f", "mop_f"])
            for batch in batches:
                for row_group in batch.column("id").to_pylist():
                    rows = history.read(*groups[row_group], ASSIGNMENT_COLUMNS)
                    yield from _scan_rows(rows).to_batches()

        scanned = tasks.mapInArrow(scan, SCAN_DDL).persist(StorageLevel.DISK_ONLY)
        assignments = scanned.where(F.col("kind") == ASSIGNMENT).drop("kind")
        # the ok assigns and subscribes, in the driver: each row group's task needs every process's
        # assignment before its polls (a few columns per op; the only table here that grows with the history)
        current = CurrentAssignment(assignments.where(F.col("type") == "ok").toArrow().cast(ASSIGNMENT_SCHEMA))

        def read_row_groups(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            history = RowGroupReader(STRING_COLUMNS)
            for batch in batches:
                for row_group in batch.column("id").to_pylist():
                    rows = history.read(*groups[row_group], READ_COLUMNS)
                    yield _blob_batch(rows, row_group, current)
            release_memory()

        resets = _resets(assignments, scanned.where(F.col("kind") == PARTITION).select(*TP).distinct())
        self.blobs = (tasks.mapInArrow(read_row_groups, BLOB_DDL)
                      .unionByName(resets.mapInArrow(_reset_blobs, BLOB_DDL))
                      .repartition(shuffle_partitions, *TP)
                      .persist(StorageLevel.DISK_ONLY))  # read once or twice: kept out of the JVM heap
        summary = self.blobs.groupBy("kind").agg(F.sum("info_sends").alias("info_sends")).collect()
        self.info_sends = sum(r["info_sends"] or 0 for r in summary)
        scanned.unpersist()

    def proven_ops(self) -> np.ndarray:
        """Op indices of info ops with a send some ok op read (in the same partition)."""
        if self.info_sends == 0:
            return np.zeros(0, np.int64)

        def proven_here(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for _, _, mops, *_ in _partitions(batches):
                is_send, type_, value = mops["is_send"].to_numpy(), mops["type"].to_numpy(), mops["value"].to_numpy()
                ok_read = sorted_unique(value[(type_ == OK) & ~is_send])
                read = (type_ == INFO) & is_send & member(ok_read, value)
                yield pa.RecordBatch.from_pydict({"index": sorted_unique(mops["index"].to_numpy()[read])})

        proven = self.blobs.where(F.col("kind") == MOPS).mapInArrow(proven_here, "index long").toArrow()
        return sorted_unique(proven.column("index").to_numpy())

    def per_partition(self, checks: dict[str, PartitionCheck], proven_ops: np.ndarray,
                      judge: Judge | None = None) -> DataFrame:
        """Every check on every topic-partition: RESULT_SCHEMA rows, cached on local disk once an
        action computes them (the caller takes the small ones, the cycle search the edges). A judge
        gets each partition's tables and returns the tables kept in their place (judgement.py): a
        check whose table it takes keeps a row of its seconds, with an empty payload."""

        def check_partitions(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for topic, partition, mops, polls, timed_out, resets in _partitions(batches):
                process, index = resets["process"].to_numpy(), resets["index"].to_numpy()
                dropped = resets["dropped"].to_numpy(zero_copy_only=False)
                subscribe = resets["subscribe"].to_numpy(zero_copy_only=False)
                started = time.perf_counter()
                p = PartitionLog(topic, partition, mops, proven_ops, (process[dropped], index[dropped]), polls,
                                 (process[subscribe], index[subscribe]), timed_out)
                seconds, tables = {BUILD: time.perf_counter() - started}, {}
                for name, check in checks.items():
                    started = time.perf_counter()
                    tables[name] = check(p)
                    seconds[name] = time.perf_counter() - started
                if judge is not None:
                    started = time.perf_counter()
                    tables = judge(p, tables)
                    seconds[JUDGED] = time.perf_counter() - started
                results = [(name, took, to_ipc(tables.pop(name)) if name in tables else b"")
                           for name, took in seconds.items()]
                results += [(name, 0.0, to_ipc(table)) for name, table in tables.items()]
                yield pa.RecordBatch.from_arrays([pa.array(c) for c in zip(*results)], schema=RESULT_SCHEMA)
                # one partition's log at a time: dropped before the next is read, its pages given back
                del p, mops, polls, tables, results
                release_memory()

        return self.blobs.mapInArrow(check_partitions, RESULT_DDL).persist(StorageLevel.DISK_ONLY)

    def unpersist(self) -> None:
        self.blobs.unpersist()


def _scan_rows(rows: pa.Table) -> pa.Table:
    """One row group's rows of the first scan (SCAN_SCHEMA): its ok/info assign and subscribe rows,
    and one row for each topic-partition its mops name."""
    assignments = rows.filter(pc.and_(pc.is_in(rows["f"], pa.array(ASSIGNMENT_FS)),
                                      pc.is_in(rows["type"], pa.array(["ok", "info"]))))
    named = rows.filter(pc.fill_null(pc.and_(pc.is_valid(rows["mop_f"]), pc.is_valid(rows["topic"])), False))
    named = named.select(TP).cast(pa.schema([("topic", pa.string()), ("partition", pa.int32())]))
    named = named.group_by(TP).aggregate([])
    empty = {name: pa.nulls(named.num_rows, field.type) for name, field in zip(ASSIGNMENT_SCHEMA.names, ASSIGNMENT_SCHEMA)
             if name not in TP}
    return pa.concat_tables([
        assignments.select(ASSIGNMENT_SCHEMA.names).cast(ASSIGNMENT_SCHEMA).add_column(
            0, "kind", pa.array([ASSIGNMENT] * assignments.num_rows, pa.string())),
        pa.table({"kind": pa.array([PARTITION] * named.num_rows, pa.string()), **empty, **{c: named[c] for c in TP}})
        .select(SCAN_SCHEMA.names).cast(SCAN_SCHEMA)])


def _resets(assignments: DataFrame, partitions: DataFrame) -> DataFrame:
    """For each topic-partition (RESET_DDL rows): the assign/subscribe ops that dropped it (every op that
    does not retain it: an assign that does not name it, a subscribe to other topics) and every ok
    subscribe, each partition's own rows, joined in Spark (the driver never holds them)."""
    ops = assignments.where(F.col("seq") == 0).select(
        "index", "process", ((F.col("f") == "subscribe") & (F.col("type") == "ok")).alias("subscribe"))
    retained = assignments.where(F.col("topic").isNotNull()).select(
        F.col("index").alias("retained_index"), F.col("topic").alias("retained_topic"),
        F.col("partition").alias("retained_partition"))
    pairs = partitions.crossJoin(ops)
    retains = ((pairs["index"] == retained["retained_index"]) & (pairs["topic"] == retained["retained_topic"])
               & (retained["retained_partition"].isNull() | (pairs["partition"] == retained["retained_partition"])))
    dropped = pairs.join(retained, retains, "left_anti").withColumn("dropped", F.lit(True))
    subscribes_kept = pairs.join(retained, retains, "left_semi").where("subscribe").withColumn("dropped", F.lit(False))
    return dropped.unionByName(subscribes_kept).select("topic", "partition", "process", "index", "dropped", "subscribe")


def _reset_blobs(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """RESET_DDL rows as one RESETS blob per topic-partition of each batch."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        parts = list(_by_partition(pa.Table.from_batches([batch]), RESET_SCHEMA))
        yield pa.RecordBatch.from_pydict({
            "kind": [RESETS] * len(parts), "topic": [topic for topic, _, _ in parts],
            "partition": [partition for _, partition, _ in parts], "row_group": [-1] * len(parts),
            "info_sends": [0] * len(parts), "payload": [to_ipc(resets) for _, _, resets in parts]}, schema=BLOB_SCHEMA)


class CurrentAssignment:
    """Which partitions a process had assigned at an op: those of its last ok assign before it
    (none after an ok subscribe, which Jepsen's realtime lag treats as forgetting them all)."""

    def __init__(self, assignments: pa.Table):
        ok = assignments.filter(pc.equal(assignments["type"], "ok"))
        ok = ok.sort_by([("process", "ascending"), ("index", "ascending"), ("seq", "ascending")])
        process, index = ok["process"].to_numpy(), ok["index"].to_numpy()
        assert (index < OP_KEY_SPAN).all() and (process >= 0).all()
        starts = group_starts(process, index)
        self.op_keys = process[starts] * OP_KEY_SPAN + index[starts]
        named = pc.and_(pc.equal(ok["f"], "assign"), pc.is_valid(ok["partition"])).to_numpy(zero_copy_only=False)
        self.topics = pc.unique(ok["topic"].filter(pc.is_valid(ok["topic"]))).to_pylist()
        # the named partitions of each op, as a slice [first, end) of the arrays below
        op_of_row = np.cumsum(np.isin(np.arange(len(index)), starts)) - 1
        self.first = np.searchsorted(op_of_row[named], np.arange(len(starts)), "left")
        self.end = np.searchsorted(op_of_row[named], np.arange(len(starts)), "right")
        topic_code = pc.fill_null(pc.index_in(ok["topic"], pa.array(self.topics, pa.string())), -1)
        self.topic_code = topic_code.to_numpy().astype(np.int64)[named]
        self.partition = pc.fill_null(ok["partition"], -1).to_numpy().astype(np.int64)[named]

    def polls(self, rows: pa.Table) -> Iterator[tuple[str, int, pa.Table]]:
        """(topic, partition, POLL_SCHEMA rows) for the ok polls and txns in rows, by assigned partition."""
        keep = pc.and_(pc.and_(pc.equal(rows["seq"], 0), pc.equal(rows["type"], "ok")),
                       pc.is_in(rows["f"], pa.array(["poll", "txn"])))
        polls = rows.filter(keep)
        if polls.num_rows == 0 or len(self.op_keys) == 0:
            return
        process, index = polls["process"].to_numpy(), polls["index"].to_numpy()
        invoke_ns = pc.fill_null(polls["invoke_time_ns"], NO_NS).to_numpy()
        op = np.searchsorted(self.op_keys, process * OP_KEY_SPAN + index) - 1
        op_safe = np.maximum(op, 0)
        own = (op >= 0) & (self.op_keys[op_safe] // OP_KEY_SPAN == process)
        counts = np.where(own, self.end[op_safe] - self.first[op_safe], 0)
        poll = np.repeat(np.arange(len(op)), counts)
        at = np.repeat(self.first[op_safe] - np.cumsum(counts) + counts, counts) + np.arange(len(poll))
        tp = self.topic_code[at] * (1 << 32) + self.partition[at]
        order = np.lexsort((index[poll], tp))
        tp, poll = tp[order], poll[order]
        starts = group_starts(tp)
        for start, end in zip(starts.tolist(), group_ends(starts, len(tp)).tolist()):
            chosen = poll[start:end]
            yield (self.topics[int(tp[start] >> 32)], int(tp[start] & 0xFFFFFFFF),
                   pa.table({"index": index[chosen], "process": process[chosen], "invoke_ns": invoke_ns[chosen]},
                            schema=POLL_SCHEMA))


def _blob_batch(rows: pa.Table, row_group: int, current: CurrentAssignment) -> pa.RecordBatch:
    """One row group as blobs: its mops per topic-partition, and its ok polls per assigned topic-partition."""
    kinds, topics, partitions, info_sends, payloads = [], [], [], [], []
    for topic, partition, mops in _by_partition(encode_mops(rows)):
        kinds.append(MOPS)
        topics.append(topic)
        partitions.append(partition)
        info_sends.append(int(((mops["type"].to_numpy() == INFO) & mops["is_send"].to_numpy()).sum()))
        payloads.append(to_ipc(mops))
    for kind, found in ((POLLS, current.polls(rows)), (TIMEOUTS, timed_out_sends(rows))):
        for topic, partition, table in found:
            kinds.append(kind)
            topics.append(topic)
            partitions.append(partition)
            info_sends.append(0)
            payloads.append(to_ipc(table))
    return pa.RecordBatch.from_pydict({"kind": kinds, "topic": topics, "partition": partitions,
                                       "row_group": [row_group] * len(kinds), "info_sends": info_sends,
                                       "payload": payloads}, schema=BLOB_SCHEMA)


def timed_out_sends(rows: pa.Table) -> Iterator[tuple[str, int, pa.Table]]:
    """(topic, partition, TIMED_OUT_SCHEMA rows) for the send ops in rows whose completion reported
    records timed out: their first row's extra lists them, "timed_out": [[topic, partition, value], ...]
    (faults/workload.py)."""
    reported = rows.filter(pc.fill_null(pc.and_(
        pc.and_(pc.equal(rows["seq"], 0), pc.and_(pc.equal(rows["f"], "send"), pc.not_equal(rows["type"], "invoke"))),
        pc.match_substring(rows["extra"], "timed_out")), False))
    by_partition: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for index, extra in zip(reported["index"].to_pylist(), reported["extra"].to_pylist()):
        for topic, partition, value in json.loads(extra).get("timed_out", ()):
            by_partition.setdefault((topic, partition), []).append((index, value))
    for (topic, partition), sends in sorted(by_partition.items()):
        yield topic, partition, pa.table(list(zip(*sends)), schema=TIMED_OUT_SCHEMA)


def _partitions(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[str, int, pa.Table, pa.Table, pa.Table, pa.Table]]:
    """(topic, partition, all its mops in history order, its assigned polls, its timed-out sends, its
    resets in history order) from the blobs of one Spark partition; a partition with polls but no
    mops has nothing to check."""
    blobs: dict[tuple[str, int], dict[str, list[tuple[int, bytes]]]] = {}
    for batch in batches:
        for kind, topic, partition, row_group, payload in zip(*(batch.column(c).to_pylist() for c in
                                                                ("kind", "topic", "partition", "row_group", "payload"))):
            blobs.setdefault((topic, partition), {MOPS: [], POLLS: [], TIMEOUTS: [], RESETS: []})[kind].append(
                (row_group, payload))
    for topic, partition in sorted(blobs):
        kinds = blobs.pop((topic, partition))  # a partition's blobs are dropped once it is read
        if kinds[MOPS]:
            polls = [read_ipc(payload) for _, payload in sorted(kinds[POLLS])] or [POLL_SCHEMA.empty_table()]
            timed_out = ([read_ipc(payload) for _, payload in sorted(kinds[TIMEOUTS])]
                         or [TIMED_OUT_SCHEMA.empty_table()])
            resets = [read_ipc(payload) for _, payload in kinds[RESETS]] or [RESET_SCHEMA.empty_table()]
            yield (topic, partition, pa.concat_tables([read_ipc(payload) for _, payload in sorted(kinds[MOPS])]),
                   pa.concat_tables(polls), pa.concat_tables(timed_out), pa.concat_tables(resets).sort_by("index"))
