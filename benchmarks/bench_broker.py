"""Single-node throughput: confluent-kafka against `kspec broker`, and librdkafka's mock cluster as a peer.

Prints, for 1 KiB and 100-byte records (acks=1, linger.ms=5, batch.size 1 MB), the median
(p50) of several repetitions with their range in MB/s, since a shared 2-core machine is noisy:

- produce: a confluent-kafka Producer sending to kspec;
- consume: a confluent-kafka Consumer reading it back with the lightest loop the client
  allows (`consume()` in batches of 10k, one C call each, counting messages without
  touching their values), so the figure is as little as possible the Python loop's. It is
  timed from the first message: librdkafka spends about half a second before its first
  Fetch (coordinator and offset lookups), which would otherwise dominate a 256 MB read.
  fetch.queue.backoff.ms is 10: at librdkafka's default a full client queue stops fetching
  for a whole second, and the figure swung between runs with when that happened;
- fetch: a raw Fetch loop (kspec's own codec, one request in flight, records counted from
  the batch headers, nothing decoded): what the broker can serve when the client costs
  almost nothing. librdkafka parses every record, and on 2 cores it shares the CPU with
  the broker, so consume and fetch differ by the client's cost;
- mock produce: the same producer against librdkafka's mock cluster in the same run (its
  consume drops old data, so produce only), and kspec's produce as a ratio to it.

The broker's CPU seconds per GB produced, consumed and fetched are printed too: unlike the
rates they hardly depend on what else the machine is doing.

Then it writes a multi-GB log of 1 KiB records, reads it all back, and prints the broker's
peak RSS (VmHWM) with its current anonymous and file-backed parts (RssAnon, RssFile).

    python benchmarks/bench_broker.py [--mb 256] [--repeats 3] [--log-gb 2]
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conformance.mock_cluster import MockCluster
from reference.protocol.api_keys import ApiKey
from reference.protocol.framing import FRAME_SIZE_BYTES
from reference.protocol.messages import decode_response, encode_request
from reference.protocol.primitives import INT32
from reference.protocol.records import LENGTH_OFFSET, LOG_OVERHEAD, RECORDS_COUNT_OFFSET

PARTITIONS = 4
CONSUME_BATCH = 10_000  # messages asked of Consumer.consume per call: well below what its queue holds
FETCH_VERSION = 12  # the last Fetch version that names topics (v13+ use topic ids)
FETCH_MAX_BYTES = 52_428_800  # the consumers' fetch.max.bytes
PARTITION_FETCH_MAX_BYTES = 10_485_760  # and max.partition.fetch.bytes
FETCH_QUEUE_BACKOFF_MS = 10  # librdkafka's default (1000) stops fetching for a second whenever its queue is full
TIME_LIMIT_S = 600  # per produce, consume or fetch


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
    if producer.flush(TIME_LIMIT_S):
        raise RuntimeError(f"{topic}: records still unsent after {TIME_LIMIT_S} s")
    return time.perf_counter() - started, count


def consume(bootstrap: str, topic: str, count: int) -> tuple[float, int]:
    """(seconds, records) for a confluent-kafka Consumer reading `count` records from the
    beginning, timed from the first message it returns (so without the client's start-up)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.max.bytes": FETCH_MAX_BYTES, "max.partition.fetch.bytes": PARTITION_FETCH_MAX_BYTES,
                         "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen = timed = 0
    started = deadline = time.perf_counter() + TIME_LIMIT_S
    while seen < count and time.perf_counter() < deadline:
        # consume() returns only once it has num_messages or the timeout passed: never ask for
        # more than remain (the tail would wait out the timeout) or than the client queues
        messages = consumer.consume(min(CONSUME_BATCH, count - seen), timeout=1.0)
        failed = [m.error() for m in messages if m.error()]
        if failed:
            raise RuntimeError(f"{topic}: consume failed: {failed[0]}")
        if messages and not seen:
            started = time.perf_counter()
        else:
            timed += len(messages)
        seen += len(messages)
    elapsed = time.perf_counter() - started
    consumer.close()
    if seen < count:
        raise RuntimeError(f"{topic}: consumed {seen} of {count} records in {TIME_LIMIT_S} s")
    return elapsed, timed


def fetch(bootstrap: str, topic: str, count: int) -> float:
    """Seconds for a raw Fetch loop to read `count` records from offset 0 of every partition."""
    host, port = bootstrap.rsplit(":", 1)
    offsets = dict.fromkeys(range(PARTITIONS), 0)
    seen = 0
    with socket.create_connection((host, int(port))) as connection:
        started = time.perf_counter()
        for correlation_id in range(1, 1 << 31):
            if seen >= count or time.perf_counter() - started > TIME_LIMIT_S:
                break
            request = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": FETCH_MAX_BYTES,
                       "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                       "topics": [{"topic": topic, "partitions": [
                           {"partition": p, "fetch_offset": offset, "partition_max_bytes": PARTITION_FETCH_MAX_BYTES}
                           for p, offset in offsets.items()]}]}
            connection.sendall(encode_request(ApiKey.FETCH, FETCH_VERSION, correlation_id, "bench", request))
            _, response = decode_response(ApiKey.FETCH, FETCH_VERSION, _read_frame(connection))
            for partition in response.responses[0].partitions:
                if partition.error_code:
                    raise RuntimeError(f"{topic}-{partition.partition_index}: fetch error {partition.error_code}")
                records, position = partition.records, 0
                while position < len(records):  # whole batches: count from the headers, decode nothing
                    seen += INT32.unpack_from(records, position + RECORDS_COUNT_OFFSET)[0]
                    offsets[partition.partition_index] = _next_offset(records, position)
                    position += LOG_OVERHEAD + INT32.unpack_from(records, position + LENGTH_OFFSET)[0]
        elapsed = time.perf_counter() - started
    if seen < count:
        raise RuntimeError(f"{topic}: fetched {seen} of {count} records in {TIME_LIMIT_S} s")
    return elapsed


def _next_offset(records: memoryview, position: int) -> int:
    base_offset = int.from_bytes(records[position:position + 8], "big")
    last_offset_delta = int.from_bytes(records[position + 23:position + 27], "big")
    return base_offset + last_offset_delta + 1


def _read_frame(connection: socket.socket) -> memoryview:
    (size,) = INT32.unpack(_read_exactly(connection, FRAME_SIZE_BYTES))
    return _read_exactly(connection, size)


def _read_exactly(connection: socket.socket, size: int) -> memoryview:
    buffer = memoryview(bytearray(size))
    received = 0
    while received < size:
        n = connection.recv_into(buffer[received:])
        if n == 0:
            raise ConnectionError("broker closed the connection")
        received += n
    return buffer


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _add_cpu(runs: list[float], pid: int, since_s: float, data_bytes: int) -> float:
    """Append the CPU seconds per GB used since `since_s`; return the CPU time now."""
    now_s = cpu_seconds(pid)
    runs.append((now_s - since_s) / (data_bytes / 1e9))
    return now_s


def rss_mb(pid: int) -> dict[str, float]:
    """VmHWM (peak), RssAnon and RssFile of a process, in MB."""
    figures = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name = line.split(":", 1)[0]
            if name in ("VmHWM", "RssAnon", "RssFile"):
                figures[name] = int(line.split()[1]) / 1024
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256, help="MB of 1 KiB records per repetition (100 B: a quarter)")
    parser.add_argument("--repeats", type=int, default=3, help="repetitions; the median is reported")
    parser.add_argument("--log-gb", type=float, default=2.0, help="size of the log served for the RSS figure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kspec-bench-") as data_dir:
        broker, bootstrap = start_broker(data_dir)
        try:
            with MockCluster(1) as mock:
                for record_bytes in (1024, 100):
                    size = args.mb * 1024 * 1024 // (1 if record_bytes == 1024 else 4)
                    rates = {"produce": [], "consume": [], "fetch": [], "mock produce": []}  # records/s
                    cpu = {"produce": [], "consume": [], "fetch": []}  # broker CPU seconds per GB
                    for repeat in range(args.repeats):
                        topic = f"bench-{record_bytes}-{repeat}"
                        create_topic(bootstrap, topic)
                        cpu_s = cpu_seconds(broker.pid)
                        seconds, count = produce(bootstrap, topic, record_bytes, size)
                        rates["produce"].append(count / seconds)
                        cpu_s = _add_cpu(cpu["produce"], broker.pid, cpu_s, count * record_bytes)
                        seconds, timed = consume(bootstrap, topic, count)
                        rates["consume"].append(timed / seconds)
                        cpu_s = _add_cpu(cpu["consume"], broker.pid, cpu_s, count * record_bytes)
                        rates["fetch"].append(count / fetch(bootstrap, topic, count))
                        _add_cpu(cpu["fetch"], broker.pid, cpu_s, count * record_bytes)
                        seconds, count = produce(mock.bootstrap, topic, record_bytes, size)
                        rates["mock produce"].append(count / seconds)
                    p50 = {name: statistics.median(runs) for name, runs in rates.items()}
                    figures = " | ".join(f"{name} {p50[name] * record_bytes / 1e6:.1f} MB/s "
                                         f"({min(runs) * record_bytes / 1e6:.0f}-{max(runs) * record_bytes / 1e6:.0f}) "
                                         f"{p50[name]:.0f} rec/s" for name, runs in rates.items())
                    print(f"{record_bytes:5d} B records, {size >> 20} MB, p50 of {args.repeats}: {figures} | "
                          f"kspec/mock produce ratio {p50['produce'] / p50['mock produce']:.2f}", flush=True)
                    print(f"{record_bytes:5d} B records, broker CPU seconds per GB, p50: " + " | ".join(
                        f"{name} {statistics.median(runs):.2f}" for name, runs in cpu.items()), flush=True)
            served = 0
            topic = "bench-rss"
            create_topic(bootstrap, topic)
            while served < args.log_gb * 1e9:
                _, count = produce(bootstrap, topic, 1024, 256 * 1024 * 1024)
                served += count * 1024
            after_produce = rss_mb(broker.pid)
            seconds, timed = consume(bootstrap, topic, int(served // 1024))
            after_consume = rss_mb(broker.pid)
            print(f"consume of the whole {served / 1e9:.1f} GB log: {timed * 1024 / 1e6 / seconds:.1f} MB/s", flush=True)
            print(f"broker RSS after writing the log: peak {after_produce['VmHWM']:.0f} MB (now anon "
                  f"{after_produce['RssAnon']:.0f}, file {after_produce['RssFile']:.0f}); after reading it "
                  f"back: peak {after_consume['VmHWM']:.0f} MB (now anon {after_consume['RssAnon']:.0f}, "
                  f"file {after_consume['RssFile']:.0f})", flush=True)
        finally:
            broker.terminate()
            broker.wait(30)


if __name__ == "__main__":
    main()
