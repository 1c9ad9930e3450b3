"""The history recorder: every operation's invocation and completion, streamed to Parquet.

    recorder = Recorder(out_dir)
    invocation = recorder.invoke(process, "send", mops=(Send(Record("t0", 0, 0, 17)),))
    recorder.complete(invocation, "ok", mops=(Send(Record("t0", 0, 0, 17, offset=4)),))
    recorder.close()           # -> out_dir/history.parquet

Records are spec.history Ops: the recorder gives each its history index (the order it saw
them in) and its time, nanoseconds of time.monotonic_ns() since the recorder started.
Any thread may record. While the run goes, rows are written every flush_interval_s as a
complete Parquet file out_dir/history.parts/part-NNNNNN.parquet, so a crash of the
harness loses at most the last interval: `pyarrow.parquet.read_table(parts_dir)` reads
the parts as one table. close() merges the parts into out_dir/history.parquet (the file
`kspec check` reads) and removes them.
"""
from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from spec.history import HISTORY_SCHEMA, NEMESIS_PROCESS, Op, op_rows, read_history, write_history

HISTORY_FILE = "history.parquet"
PARTS_DIR = "history.parts"
FLUSH_INTERVAL_S = 1.0
PART_ROWS_MAX = 1 << 18  # a part is written early when this many rows are waiting


class Recorder:
    def __init__(self, out_dir: str | Path, flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.out_dir = Path(out_dir)
        self.parts_dir = self.out_dir / PARTS_DIR
        self.parts_dir.mkdir(parents=True, exist_ok=False)
        self.flush_interval_s = flush_interval_s
        self.started_ns = time.monotonic_ns()
        self.lock = threading.Lock()
        self.next_index = 0
        self.rows: list[dict] = []
        self.parts_written = 0
        self.last_flush_s = time.monotonic()
        self.completions: Counter[str] = Counter()  # completion type -> count
        self.closed = False

    def now_ns(self) -> int:
        return time.monotonic_ns() - self.started_ns

    def invoke(self, process: int, f: str, *, mops=(), assignment=(), extra: dict | None = None) -> Op:
        """Record an invocation; the returned Op is what complete() pairs with."""
        return self._record(lambda index, now_ns: Op(index, process, "invoke", f, now_ns, now_ns, tuple(mops),
                                                     tuple(assignment), extra=extra))

    def complete(self, invocation: Op, type: str, *, mops=None, assignment=None, rebalanced=frozenset(),
                 extra: dict | None = None) -> Op:
        """Record invocation's completion (ok, fail or info); mops/assignment default to the invocation's."""
        assert invocation.type == "invoke" and type != "invoke", (invocation.type, type)
        mops = invocation.mops if mops is None else tuple(mops)
        assignment = invocation.assignment if assignment is None else tuple(assignment)
        return self._record(lambda index, now_ns: Op(index, invocation.process, type, invocation.f, now_ns,
                                                     invocation.time_ns, mops, assignment, frozenset(rebalanced),
                                                     extra))

    def _record(self, make_op) -> Op:
        with self.lock:
            assert not self.closed, "recorder is closed"
            op = make_op(self.next_index, self.now_ns())
            self.next_index += 1
            self.rows.extend(op_rows(op))
            if op.type != "invoke" and op.process >= NEMESIS_PROCESS:  # observers (below it) are not workload ops
                self.completions[op.type] += 1
            due = len(self.rows) >= PART_ROWS_MAX or time.monotonic() - self.last_flush_s >= self.flush_interval_s
            part = self._take_part() if due else None
        if part is not None:  # written outside the lock: other threads go on recording meanwhile
            self._write_part(*part)
        return op

    def flush(self) -> None:
        with self.lock:
            part = self._take_part()
        self._write_part(*part)

    def _take_part(self) -> tuple[int, list[dict]]:
        """Under self.lock: the buffered rows and the number of the part they go to."""
        self.last_flush_s = time.monotonic()
        rows, self.rows = self.rows, []
        number = self.parts_written
        self.parts_written += 1 if rows else 0
        return number, rows

    def _write_part(self, number: int, rows: list[dict]) -> None:
        if not rows:
            return
        table = pa.Table.from_pylist(rows, schema=HISTORY_SCHEMA)
        path = self.parts_dir / f"part-{number:06d}.parquet"
        temporary = path.with_suffix(".tmp")
        pq.write_table(table, temporary, compression="zstd")
        temporary.rename(path)  # a reader never sees half a part

    def close(self) -> Path:
        """Write what is buffered, merge the parts into history.parquet, return its path.

        Call it once every thread that records has returned from its last call."""
        with self.lock:
            part = self._take_part()
            self.closed = True
        self._write_part(*part)
        return merge_parts(self.out_dir)


def merge_parts(out_dir: str | Path) -> Path:
    """Merge out_dir's history parts (also those of a crashed run) into out_dir/history.parquet."""
    out_dir = Path(out_dir)
    parts_dir = out_dir / PARTS_DIR
    parts = sorted(parts_dir.glob("part-*.parquet"))
    if parts:
        table = pa.concat_tables([read_history(p) for p in parts])
    else:
        table = HISTORY_SCHEMA.empty_table()
    path = write_history(table, out_dir / HISTORY_FILE)
    shutil.rmtree(parts_dir)
    return path


def acked_missing_from_final_reads(history_path: Path) -> int:
    """How many acknowledged values the final reads did not return: a quick count of acked
    writes lost, which the run can make because it knows the final reader (the last process
    made). The checker's lost-write and unseen see only values no op ever read; a value read
    before a power cut and gone after it shows there as an offset holding two values."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    history = pq.read_table(history_path, columns=["process", "type", "f", "mop_f", "topic", "partition", "value"])
    final_reader = pc.max(history.filter(pc.equal(history["f"], "poll"))["process"]).as_py()  # not a replica read
    polled = history.filter(pc.and_(pc.equal(history["process"], final_reader), pc.equal(history["mop_f"], "poll")))
    acked = history.filter(pc.and_(pc.equal(history["type"], "ok"), pc.equal(history["mop_f"], "send")))
    read = set(zip(*(polled[c].to_pylist() for c in ("topic", "partition", "value"))))
    return sum(1 for row in zip(*(acked[c].to_pylist() for c in ("topic", "partition", "value"))) if row not in read)
