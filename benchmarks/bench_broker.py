"""Single-node throughput: confluent-kafka against `kspec broker`, and librdkafka's mock cluster as a peer.

Prints produce and consume rates for 1 KiB and 100-byte records (acks=1, linger.ms=5,
batch.size 1 MB), the mock cluster's produce rate measured in the same run with the same
producer (its consume drops old data, so produce only), kspec's figure as a ratio to it,
and the broker's peak RSS (VmHWM) after serving a multi-GB log.

    python benchmarks/bench_broker.py [--log-gb 2]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conformance.mock_cluster import MockCluster

PARTITIONS = 4


def start_broker(data_dir: str) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-m", "kspec.cli", "broker", "--listen", "127.0.0.1:0",
                                "--data-dir", data_dir], stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    if "bootstrap=" not in line:
        raise RuntimeError(f"broker did not start: {line!r}")
    return process, line.split("bootstrap=", 1)[1].split()[0]


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the futures
    futures = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
    for future in futures.values():
        future.result(30)


def produce(bootstrap: str, topic: str, record_bytes: int, total_bytes: int) -> tuple[float, int]:
    """Returns (seconds, records) for producing total_bytes of record_bytes-sized values."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 1_000_000,
                         "queue.buffering.max.kbytes": 1_048_576, "queue.buffering.max.messages": 2_000_000})
    value = os.urandom(record_bytes)
    count = total_bytes // record_bytes
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(300)
    return time.perf_counter() - started, count


def consume(bootstrap: str, topic: str, count: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen = 0
    started = time.perf_counter()
    while seen < count and time.perf_counter() - started < 600:
        seen += sum(1 for m in consumer.consume(100_000, timeout=1.0) if not m.error())
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-gb", type=float, default=2.0, help="size of the log served for the RSS figure")
    parser.add_argument("--mb", type=int, default=512, help="MB produced per throughput figure")
    args = parser.parse_args()
    total = args.mb * 1024 * 1024
    with tempfile.TemporaryDirectory(prefix="kspec-bench-") as data_dir:
        broker, bootstrap = start_broker(data_dir)
        try:
            with MockCluster(1) as mock:
                for record_bytes in (1024, 100):
                    size = total if record_bytes == 1024 else total // 4
                    topic = f"bench-{record_bytes}"
                    create_topic(bootstrap, topic)
                    seconds, count = produce(bootstrap, topic, record_bytes, size)
                    consume_s = consume(bootstrap, topic, count)
                    mock_s, _ = produce(mock.bootstrap, topic, record_bytes, size)
                    mb = count * record_bytes / 1e6
                    print(f"{record_bytes:5d} B records x {count}: kspec produce {mb / seconds:7.1f} MB/s "
                          f"{count / seconds:9.0f} rec/s | consume {mb / consume_s:7.1f} MB/s "
                          f"{count / consume_s:9.0f} rec/s | mock produce {mb / mock_s:7.1f} MB/s | "
                          f"kspec/mock produce ratio {mock_s / seconds:.2f}", flush=True)
            served = 0
            topic = "bench-rss"
            create_topic(bootstrap, topic)
            while served < args.log_gb * 1e9:
                _, count = produce(bootstrap, topic, 1024, 256 * 1024 * 1024)
                served += count * 1024
            consume(bootstrap, topic, int(served // 1024))
            print(f"peak broker RSS after writing and serving a {served / 1e9:.1f} GB log: "
                  f"{peak_rss_mb(broker.pid):.0f} MB", flush=True)
        finally:
            broker.terminate()
            broker.wait(30)


if __name__ == "__main__":
    main()
