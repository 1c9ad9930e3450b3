"""Fault-harness overhead: what recording costs, and how fast the harness can record.

1. The recorder alone: 1 million operations (invoke + completion) from 8 threads, the way
   workload processes record them, streamed to Parquet parts and merged at the end.
2. A run against the reference broker with no faults at an unreachable rate: recorded
   ops/s, the share of the workers' op time spent inside the recorder, and the CPU
   seconds of the harness process (clients and recorder; the broker is another process).
3. A long run (600 s unless a duration is given as the first argument) at the highest
   rate the broker sustains: ops recorded, and whether the recorder kept up (rows
   waiting to be written never above one part, merge time at the end).

    python benchmarks/bench_faults.py [LONG_RUN_S]
"""
from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

import faults.run
from faults.recorder import PART_ROWS_MAX, Recorder
from faults.run import RunOptions, run
from faults.workload import WorkloadOptions
from spec.history import Poll, Record, Send

RECORDER_OPS = 1_000_000
RECORDER_THREADS = 8
SHORT_RUN_S = 60
LONG_RUN_S = 600
MAX_RATE_HZ = 100_000
CONCURRENCY = 16


class TimedRecorder(Recorder):
    """A Recorder that adds up the wall time spent inside it and the largest backlog of rows."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.recording_s = 0.0
        self.backlog_rows_max = 0
        self.timing_lock = threading.Lock()

    def _record(self, make_op):
        started = time.perf_counter()
        op = super()._record(make_op)
        elapsed = time.perf_counter() - started
        with self.timing_lock:
            self.recording_s += elapsed
            self.backlog_rows_max = max(self.backlog_rows_max, len(self.rows))
        return op


def recorder_alone(work_dir: Path) -> None:
    recorder = Recorder(work_dir / "recorder-alone")
    per_thread = RECORDER_OPS // RECORDER_THREADS

    def record(process: int) -> None:
        for n in range(per_thread):
            if n % 2:
                send = (Send(Record("t0", 0, 0, process * per_thread + n)),)
                invocation = recorder.invoke(process, "send", mops=send)
                recorder.complete(invocation, "ok", mops=(Send(Record("t0", 0, 0, process * per_thread + n, n)),))
            else:
                invocation = recorder.invoke(process, "poll", mops=(Poll(),))
                recorder.complete(invocation, "ok", mops=(Poll((Record("t0", 0, 0, n, n),)),))

    started = time.monotonic()
    threads = [threading.Thread(target=record, args=(p,)) for p in range(RECORDER_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    recorded_s = time.monotonic() - started
    path = recorder.close()
    total_s = time.monotonic() - started
    print(f"recorder alone: {RECORDER_OPS:,} ops in {recorded_s:.1f} s = {RECORDER_OPS / recorded_s:,.0f} ops/s "
          f"recorded; merge {total_s - recorded_s:.1f} s; history {path.stat().st_size / 1e6:.1f} MB")


def against_the_broker(work_dir: Path, name: str, seconds: float) -> None:
    recorders: list[TimedRecorder] = []

    def make_recorder(out_dir, *args, **kwargs):
        recorders.append(TimedRecorder(out_dir, *args, **kwargs))
        return recorders[-1]

    faults.run.Recorder = make_recorder
    out_dir = work_dir / name
    cpu_started = time.process_time()
    result = run(RunOptions(nodes=1, nemeses=(), time_limit_s=seconds, quiet_s=0, network="auto",
                            workload=WorkloadOptions(concurrency=CONCURRENCY, rate_hz=MAX_RATE_HZ)), out_dir)
    harness_cpu_s = time.process_time() - cpu_started
    recorder = recorders[-1]
    ops = sum(result.completions.values())
    op_time_s = seconds * CONCURRENCY  # every worker is busy with an op all the time at this rate
    print(f"{name}: {ops:,} ops in {seconds:.0f} s = {result.ops_per_s:,.0f} ops/s ({result.mode}); "
          f"recorder {recorder.recording_s:.2f} s = {100 * recorder.recording_s / op_time_s:.2f}% of the "
          f"workers' op time; harness CPU {harness_cpu_s:.0f} s; largest row backlog "
          f"{recorder.backlog_rows_max:,} (a part is {PART_ROWS_MAX:,}); final reads "
          f"{'complete' if result.final_reads_complete else 'INCOMPLETE'}; "
          f"{'at least' if ops >= RECORDER_OPS else 'FEWER than'} {RECORDER_OPS:,} ops")


def main(argv: list[str]) -> int:
    long_run_s = float(argv[0]) if argv else LONG_RUN_S
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as work:
        work_dir = Path(work)
        recorder_alone(work_dir)
        against_the_broker(work_dir, "no faults, max rate", SHORT_RUN_S)
        against_the_broker(work_dir, "long run", long_run_s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
