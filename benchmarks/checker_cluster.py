"""`kspec check` on a Spark standalone cluster on this machine (bench_checker.py --cluster-ops N ...).

A Master and two Workers from the installed PySpark, bound to 127.0.0.1 (tests/checker/standalone.py),
check an N-op Parquet history written by bench_checker's streaming generator (before the lock, kept
in --work). While `kspec check --master spark://...` runs, the resident memory of every process is
sampled every SAMPLE_S: the driver (kspec check's Python and the JVM it starts), the master, each
worker, and the executors each worker starts (their JVM and Python workers). Printed: wall time,
the check's own seconds per stage, the peak of each and of all together, and each one's CPU seconds.
The measured part holds BENCH_LOCK, as every figure on this shared machine does.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.checker.standalone import StandaloneCluster

WORKERS = 2
WORKER_CORES = 1
# The heaps: driver 2 GB (session.py), each executor 2 GB, master and workers Spark's 1 GB default: at most
# 9 GB of JVM heap. The executors' Python workers (one per core) hold one topic-partition or one chunk of
# the cycle search at a time. Together this leaves most of the machine's 23 GB to the others working on it.
EXECUTOR_MEMORY = "2g"
WORKER_MEMORY = "2560m"  # what a worker may give its executor: the executor's heap and its overhead
SAMPLE_S = 0.5
BENCH_LOCK = Path("/tmp/kspec-bench.lock")
HERE = Path(__file__).resolve().parent.parent



def process_table() -> tuple[dict[int, tuple[int, str, list[str]]], dict[int, list[int]]]:
    """Every process in /proc: pid -> (parent pid, command, the fields of its stat after the
    command), and parent pid -> its children's pids."""
    stats: dict[int, tuple[int, str, list[str]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            head, tail = stat.read_text().rsplit(")", 1)
            fields = tail.split()
            stats[int(stat.parent.name)] = (int(fields[1]), head.split("(", 1)[1], fields)
        except (OSError, ValueError, IndexError):
            continue
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    return stats, children

class ClusterMemory(threading.Thread):
    """Peak RSS (MB) and last-seen CPU seconds by role, over the process trees of named roots."""

    def __init__(self, roots: dict[str, int]):
        super().__init__(daemon=True)
        self.roots = roots
        self.running = True
        self.peak_mb: dict[str, float] = {}
        self.total_peak_mb = 0.0
        self.cpu: dict[int, tuple[str, float]] = {}  # pid -> (role, CPU seconds when last seen)
        self.tick_s = os.sysconf("SC_CLK_TCK")
        self.page_mb = os.sysconf("SC_PAGE_SIZE") / (1 << 20)

    def run(self) -> None:
        while self.running:
            self.sample()
            time.sleep(SAMPLE_S)

    @staticmethod
    def _role(root: str, depth_command: tuple[int, str]) -> str:
        depth, command = depth_command
        if root == "driver":
            return "driver Python" if depth == 0 else "driver JVM" if command == "java" else "driver other"
        if root == "master" or depth == 0:
            return root
        return root.replace("worker", "executor") + (" JVM" if command == "java" else " Python")

    def sample(self) -> None:
        stats, children = process_table()
        now: dict[str, float] = {}
        for root, root_pid in self.roots.items():
            stack = [(root_pid, 0)]
            while stack:
                pid, depth = stack.pop()
                if pid not in stats:
                    continue
                stack.extend((c, depth + 1) for c in children.get(pid, []))
                _, command, fields = stats[pid]
                role = self._role(root, (depth, command))
                now[role] = now.get(role, 0.0) + int(fields[21]) * self.page_mb  # rss, in pages
                self.cpu[pid] = (role, (int(fields[11]) + int(fields[12])) / self.tick_s)  # utime + stime
        for role, mb in now.items():
            self.peak_mb[role] = max(self.peak_mb.get(role, 0.0), mb)
        self.total_peak_mb = max(self.total_peak_mb, sum(now.values()))

    def cpu_s(self) -> dict[str, float]:
        by_role: dict[str, float] = {}
        for role, seconds in self.cpu.values():
            by_role[role] = by_role.get(role, 0.0) + seconds
        return by_role


def bench_cluster_check(history: Path, work: Path) -> dict:
    """One `kspec check --master spark://...` of history on a fresh two-worker cluster, under BENCH_LOCK."""
    out = work / f"{history.stem}-check"
    shutil.rmtree(out, ignore_errors=True)
    with open(BENCH_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        load_before = _load()
        cluster_dir = work / "cluster"
        shutil.rmtree(cluster_dir, ignore_errors=True)
        with StandaloneCluster(cluster_dir, workers=WORKERS, worker_cores=WORKER_CORES, worker_memory=WORKER_MEMORY,
                               python_path=str(HERE)) as cluster:
            roots = {"master": cluster.processes[0].pid,
                     **{f"worker-{n}": p.pid for n, p in enumerate(cluster.processes[1:])}}
            env = {**os.environ, "PYTHONPATH": str(HERE),
                   "PYSPARK_SUBMIT_ARGS": f"--driver-memory 2g --executor-memory {EXECUTOR_MEMORY} pyspark-shell"}
            command = [sys.executable, "-m", "kspec.cli", "check", str(history), "--master", cluster.master_url,
                       "--out", str(out)]
            started = time.monotonic()
            child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=HERE,
                                     env=env)
            memory = ClusterMemory({**roots, "driver": child.pid})
            memory.start()
            stdout, _ = child.communicate()
            seconds = time.monotonic() - started
            memory.running = False
            memory.join()
        load_after = _load()
    verdict = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").exists() else {}
    return {"seconds": seconds, "exit": child.returncode, "verdict": verdict, "stdout": stdout,
            "peak_mb": memory.peak_mb, "total_peak_mb": memory.total_peak_mb, "cpu_s": memory.cpu_s(),
            "load_before": load_before, "load_after": load_after, "master": cluster.master_url}


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def report(n_ops: int, history: Path, result: dict) -> None:
    verdict = result["verdict"]
    print(f"\n{n_ops:,} ops ({history.stat().st_size / 1e9:.1f} GB Parquet) on a standalone cluster "
          f"({WORKERS} workers x {WORKER_CORES} core, executors {EXECUTOR_MEMORY}): {result['seconds']:.0f} s end to "
          f"end, exit {result['exit']}, load average {result['load_before']} before, {result['load_after']} after",
          flush=True)
    if verdict:
        stages = ", ".join(f"{k} {v:.1f}" for k, v in verdict["seconds"].items())
        print(f"  verdict: valid={verdict['valid']}, {verdict['ops']:,} ops, anomalies {verdict['anomalies']}, "
              f"unlisted {verdict.get('unlisted', {})}\n  seconds: {stages}")
    else:
        print(f"  no verdict; kspec check printed: {result['stdout'][-2000:]}")
    roles = sorted(result["peak_mb"])
    print("  peak RSS (MB) / CPU s: " + ", ".join(f"{r} {result['peak_mb'][r]:.0f} / {result['cpu_s'].get(r, 0):.0f}"
                                                 for r in roles))
    print(f"  peak of all together: {result['total_peak_mb']:.0f} MB", flush=True)
