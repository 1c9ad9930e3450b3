"""Broker CPU seconds per GB produced, for several source trees in turn: a before-and-after
comparison in one session (the figure hardly depends on what else the machine does, unlike a rate).

Each turn starts a `kspec broker` from each tree (PYTHONPATH=TREE), creates a 4-partition topic,
and has a confluent-kafka producer send 256 MB of 100-byte and 1 GB of 1 KiB records to it
(acks=1, linger.ms=5, batch.size 1 MB, as bench_broker.py); it prints the median and every
turn's figure per tree. Make a tree of an older commit with `git archive COMMIT | tar -x -C DIR`.

    python benchmarks/produce_cpu.py TREE[,TREE...] [--turns 3]
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

SIZES = ((100, 256 << 20), (1024, 1 << 30))  # (record bytes, bytes produced per turn)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def cpu_per_gb(tree: str, record_bytes: int, total_bytes: int) -> float:
    with tempfile.TemporaryDirectory(prefix="kspec-cpu-") as data_dir:
        broker = subprocess.Popen([sys.executable, "-m", "kspec.cli", "broker", "--listen", "127.0.0.1:0",
                                   "--data-dir", data_dir], stdout=subprocess.PIPE, text=True, cwd=tree,
                                  env={**os.environ, "PYTHONPATH": tree})
        try:
            bootstrap = broker.stdout.readline().split("bootstrap=", 1)[1].split()[0]
            admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
            admin.create_topics([NewTopic("cpu", 4, 1)])["cpu"].result(30)
            producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 1_000_000,
                                 "queue.buffering.max.kbytes": 1_048_576, "queue.buffering.max.messages": 2_000_000})
            value, count = os.urandom(record_bytes), total_bytes // record_bytes
            started_s = cpu_seconds(broker.pid)
            for _ in range(count):
                while True:
                    try:
                        producer.produce("cpu", value)
                        break
                    except BufferError:
                        producer.poll(0.01)
            assert producer.flush(600) == 0, "every record delivered"
            return (cpu_seconds(broker.pid) - started_s) / (count * record_bytes / 1e9)
        finally:
            broker.send_signal(signal.SIGTERM)
            broker.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", help="source trees, comma-separated")
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    trees = args.trees.split(",")
    for record_bytes, total_bytes in SIZES:
        figures: dict[str, list[float]] = {tree: [] for tree in trees}
        for _ in range(args.turns):
            for tree in trees:
                figures[tree].append(cpu_per_gb(tree, record_bytes, total_bytes))
        for tree, runs in figures.items():
            print(f"{record_bytes:5d} B records, {tree}: broker CPU s/GB produced, median "
                  f"{statistics.median(runs):.2f} (turns: {', '.join(f'{run:.2f}' for run in runs)})", flush=True)


if __name__ == "__main__":
    main()
