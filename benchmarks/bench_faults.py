"""Fault-harness overhead: what recording costs, and how fast the harness can record.

1. The recorder alone: 1 million operations (invoke + completion) from 8 threads, the way
   workload threads record them, streamed to Parquet parts and merged at the end.
2. A run against a one-node reference broker with no faults at an unreachable rate
   (--short-run-s, 60 s): recorded ops/s, and where the CPU went: the clients (librdkafka's
   threads, named "rdk:..."), the harness's Python threads (workload, recorder, run loop)
   and of that the recorder alone, and the broker process.
3. A long run the same way (--long-run-s, 600 s): ops recorded (the target is 1 million in
   10 minutes), and whether the harness kept up: the largest backlog of rows waiting to be
   written (a part is written every second, or early at PART_ROWS_MAX rows), the slowest
   and fastest minute of completions, and the merge at the end.
4. A soak (--soak-runs, 10, of --soak-run-s, 60 s): `kspec faults soak` on a 3-node reference
   cluster with acks=all, each run drawing one to three of partition, kill, pause, power, disk,
   io and clock, each run checked; its summary table (ops, anomalies by guarantee, bytes the
   power cuts dropped, acked values missing from the final reads). Needs root for the mounts.

    python benchmarks/bench_faults.py [--short-run-s 60] [--long-run-s 600] [--concurrency 32]
                                      [--soak-runs 10] [--soak-run-s 60]

CPU figures are user + system seconds. A thread's CPU is read from /proc/self/task at the
last tick of the main phase, so the clients' and workers' threads are all still alive;
the broker's is what the harness's children used, read once the broker has exited.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow.compute as pc

import faults.run
from faults.recorder import PART_ROWS_MAX, Recorder
from faults.run import RunOptions, run
from faults.workload import WorkloadOptions
from spec.history import Poll, Record, Send, read_history

RECORDER_OPS = 1_000_000
RECORDER_THREADS = 8
LONG_RUN_OPS_MIN = 1_000_000
MAX_RATE_HZ = 100_000
CLIENT_THREAD_PREFIX = "rdk:"  # librdkafka names its threads rdk:main, rdk:broker<id>, ...
MINUTE_NS = 60 * 10**9


class TimedRecorder(Recorder):
    """A Recorder that adds up the CPU time its callers spend inside it and the largest backlog of rows."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.recording_cpu_s = 0.0
        self.backlog_rows_max = 0
        self.timing_lock = threading.Lock()

    def _record(self, make_op):
        started = time.thread_time()
        op = super()._record(make_op)
        elapsed = time.thread_time() - started
        with self.timing_lock:
            self.recording_cpu_s += elapsed
            self.backlog_rows_max = max(self.backlog_rows_max, len(self.rows))
        return op


def thread_cpu_s() -> tuple[float, float]:
    """CPU seconds of this process's live threads: (librdkafka's, the rest)."""
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    clients_s = others_s = 0.0
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        cpu_s = (int(fields[11]) + int(fields[12])) / ticks_per_s  # utime, stime
        if name.startswith(CLIENT_THREAD_PREFIX):
            clients_s += cpu_s
        else:
            others_s += cpu_s
    return clients_s, others_s


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
          f"recorded; merge {total_s - recorded_s:.1f} s; history {path.stat().st_size / 1e6:.1f} MB", flush=True)


def completions_per_minute(history_path: Path) -> list[int]:
    """Client completions in each whole minute of the history."""
    table = read_history(history_path).select(["seq", "process", "type", "time_ns"])
    completed = table.filter(pc.and_(pc.and_(pc.equal(table["seq"], 0), pc.greater_equal(table["process"], 0)),
                                     pc.not_equal(table["type"], "invoke")))
    minutes = pc.divide(completed["time_ns"], MINUTE_NS).to_numpy()
    counts = [int((minutes == m).sum()) for m in range(int(minutes.max()) + 1)] if len(minutes) else []
    return counts[:-1] or counts  # the last minute is partial


def against_the_broker(work_dir: Path, name: str, seconds: float, concurrency: int) -> int:
    """One run without faults at an unreachable rate; prints its figures, returns the ops recorded."""
    recorders: list[TimedRecorder] = []
    cpu_at_main_end: list[tuple[float, float]] = []

    def make_recorder(out_dir, *args, **kwargs):
        recorders.append(TimedRecorder(out_dir, *args, **kwargs))
        return recorders[-1]

    def progress(status) -> None:
        if status.phase == "main":
            cpu_at_main_end[:] = [thread_cpu_s()]

    faults.run.Recorder = make_recorder
    out_dir = work_dir / name.replace(" ", "-").replace(",", "")
    children_cpu_started = sum(os.times()[2:4])
    result = run(RunOptions(nodes=1, nemeses=(), time_limit_s=seconds, quiet_s=0, network="auto",
                            workload=WorkloadOptions(concurrency=concurrency, rate_hz=MAX_RATE_HZ)),
                 out_dir, progress)
    broker_cpu_s = sum(os.times()[2:4]) - children_cpu_started
    recorder = recorders[-1]
    clients_cpu_s, python_cpu_s = cpu_at_main_end[0]
    ops = sum(result.completions.values())
    minutes = completions_per_minute(out_dir / "history.parquet")
    print(f"{name}: {ops:,} ops recorded, {result.ops_per_s:,.0f} ops/s in the {seconds:.0f} s main phase "
          f"({result.mode}, {concurrency} workers); CPU s: clients (librdkafka) {clients_cpu_s:.0f}, harness "
          f"Python threads {python_cpu_s:.0f} (recorder {recorder.recording_cpu_s:.1f}), broker and other children "
          f"{broker_cpu_s:.0f}; harness share of the client process "
          f"{100 * python_cpu_s / (python_cpu_s + clients_cpu_s):.0f}%; largest row backlog "
          f"{recorder.backlog_rows_max:,} (a part is at most {PART_ROWS_MAX:,}); completions per whole minute "
          f"{min(minutes):,}-{max(minutes):,}; final reads {'complete' if result.final_reads_complete else 'INCOMPLETE'}",
          flush=True)
    return ops


def soak_runs(work_dir: Path, runs: int, seconds: float) -> None:
    from faults.soak import soak
    base = RunOptions(nodes=3, time_limit_s=seconds, interval_s=10.0,
                      workload=WorkloadOptions(concurrency=4, rate_hz=100, replication_factor=3))
    started = time.monotonic()
    soak(base, runs, True, work_dir / "soak", report=lambda summary: print(
        f"soak run {summary.run} [{','.join(summary.nemeses)}]: {summary.ops} ops, {summary.verdict}", flush=True))
    print(f"soak: {runs} runs of {seconds:.0f} s in {time.monotonic() - started:.0f} s")
    print((work_dir / "soak" / "summary.md").read_text(), flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short-run-s", type=float, default=60.0)
    parser.add_argument("--long-run-s", type=float, default=600.0)
    parser.add_argument("--concurrency", type=int, default=32, help="workload threads")
    parser.add_argument("--soak-runs", type=int, default=10, help="soak runs (0: no soak)")
    parser.add_argument("--soak-run-s", type=float, default=60.0, help="seconds of faults per soak run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as work:
        work_dir = Path(work)
        recorder_alone(work_dir)
        against_the_broker(work_dir, "no faults, max rate", args.short_run_s, args.concurrency)
        if args.long_run_s > 0:
            ops = against_the_broker(work_dir, "long run", args.long_run_s, args.concurrency)
            print(f"long run: {'at least' if ops >= LONG_RUN_OPS_MIN else 'FEWER than'} {LONG_RUN_OPS_MIN:,} ops")
        if args.soak_runs > 0:
            soak_runs(work_dir, args.soak_runs, args.soak_run_s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
