"""Import a Jepsen history.edn with Spark: ranges of the file parsed in parallel into a history
folder of Parquet parts (spec/history.py's schema), the same table jepsen.read_edn_rows builds.

1. The file is cut into byte ranges of range_bytes; a range holds the lines that start in it.
   One task per range reads them (jepsen.read_range: one op map a line, or spread over lines),
   writes part-NNNNN.parquet and returns a small summary.
2. A completion whose invocation lies in an earlier range gets that invocation's time: the task
   reads back from its range's start over one-map-a-line op lines (jepsen.invocations_before);
   what that leaves open, the driver chains from the summaries in file order
   (jepsen.invocations_across_ranges) and a second job patches invoke_time_ns in those parts. The driver holds only summaries: a few entries
   per process and range, never rows.
3. When a form crosses a range boundary (a file that is not one map a line) or a record has
   no :index (its index is its position), the file is read again as one range: the same code,
   streaming, in one task.

The parts are written to a hidden folder beside the destination and renamed into place only
when every range was read: a bad line leaves nothing behind. `_source.json` in the folder
names the file, its size and modification time; a later import of the same file reuses it.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from spark_validation.frames import release_memory
from spark_validation.jepsen import (RangeSummary, first_problem, invocations_across_ranges, read_range,
                                     read_whole_again, set_invocations)
from spec.history import write_history

RANGE_BYTES = 16 << 20  # a task's share of the file: about 70,000-120,000 Jepsen op lines
SOURCE_FILE = "_source.json"  # starts with "_": Parquet dataset readers skip it
SUMMARY_DDL = "range int, summary string"


def part_name(range_index: int) -> str:
    return f"part-{range_index:05d}.parquet"


def import_edn(spark: SparkSession, edn_path: Path, history_dir: Path, range_bytes: int = RANGE_BYTES,
               vectorised: bool = True) -> Path:
    """history_dir holding edn_path as Parquet parts (reused when it already holds this file).
    vectorised: as jepsen.read_range (False only to compare the two readers)."""
    source = _source(edn_path)
    if _imported(history_dir) == source:
        return history_dir
    made_parent = not history_dir.parent.exists()
    history_dir.parent.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix=f".{history_dir.name}-", dir=history_dir.parent))
    try:
        size = source["bytes"]
        ranges = max(-(-size // range_bytes), 1)
        summaries = _read_ranges(spark, edn_path, work_dir, ranges, range_bytes, vectorised)
        if read_whole_again(summaries):
            for part in work_dir.glob("part-*.parquet"):
                part.unlink()
            summaries = _read_ranges(spark, edn_path, work_dir, 1, size + 1, vectorised)
        problem = first_problem(edn_path, summaries)
        if problem:
            raise problem
        _patch_invocations(spark, work_dir, invocations_across_ranges(summaries))
        (work_dir / SOURCE_FILE).write_text(json.dumps(source) + "\n")
        if history_dir.exists():
            shutil.rmtree(history_dir)
        work_dir.rename(history_dir)
    except BaseException:
        shutil.rmtree(work_dir, ignore_errors=True)
        if made_parent and not any(history_dir.parent.iterdir()):
            history_dir.parent.rmdir()
        raise
    return history_dir


def _source(edn_path: Path) -> dict:
    stat = edn_path.stat()
    return {"edn": str(edn_path.resolve()), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _imported(history_dir: Path) -> dict | None:
    try:
        return json.loads((history_dir / SOURCE_FILE).read_text())
    except (OSError, ValueError):
        return None


def _read_ranges(spark: SparkSession, edn_path: Path, work_dir: Path, ranges: int, range_bytes: int,
                 vectorised: bool) -> list[RangeSummary]:
    path, out = str(edn_path.resolve()), str(work_dir.resolve())  # executors may run in another folder

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for k in batch.column("id").to_pylist():
                rows, summary = read_range(Path(path), k * range_bytes, (k + 1) * range_bytes, vectorised)
                if summary.error is None and rows.num_rows:
                    write_history(rows, Path(out) / part_name(k))
                yield pa.RecordBatch.from_pydict({"range": pa.array([k], pa.int32()), "summary": [summary.to_json()]})
        release_memory()

    found = spark.range(0, ranges, numPartitions=ranges).mapInArrow(read, SUMMARY_DDL).toArrow()
    by_range = dict(zip(found.column("range").to_pylist(), found.column("summary").to_pylist()))
    return [RangeSummary.from_json(by_range[k]) for k in range(ranges)]


def _patch_invocations(spark: SparkSession, work_dir: Path, fixes: list[list[tuple[int, int, int]]]) -> None:
    """Set invoke_time_ns of the completions paired across ranges, in the parts that hold them."""
    patches = [(k, fix) for k, fix in enumerate(fixes) if fix]
    if not patches:
        return
    out = str(work_dir.resolve())

    def patch(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for position in batch.column("id").to_pylist():
                k, fix = patches[position]
                part = Path(out) / part_name(k)
                table = set_invocations(pq.read_table(part), fix)
                patched = part.with_suffix(".patched")
                write_history(table, patched)
                os.replace(patched, part)
                yield pa.RecordBatch.from_pydict({"range": pa.array([k], pa.int32())})

    spark.range(0, len(patches), numPartitions=len(patches)).mapInArrow(patch, "range int").collect()

