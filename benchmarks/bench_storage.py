"""Storage throughput: Log.append_as_leader with 1 MB and 16 KB batches, then sequential reads.

Run: .venv/bin/python benchmarks/bench_storage.py [--total-mb N]
Batches are built once (random, incompressible values) and appended repeatedly; each append
validates the header and CRC-32C, assigns offsets, writes and indexes. Nothing is fsynced
(Kafka's default), so this measures the page cache, not the disk.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from reference.protocol.records import Record, build_batch, iter_batches
from reference.storage import Log, LogConfig

READ_MAX_BYTES = 1 << 20  # a consumer's fetch.max.bytes-sized read


def make_batch(batch_bytes: int, records_per_batch: int) -> bytes:
    value_bytes = batch_bytes // records_per_batch
    records = [Record(0, 1_700_000_000_000, None, os.urandom(value_bytes)) for _ in range(records_per_batch)]
    return build_batch(records)


def bench(label: str, batch_bytes: int, records_per_batch: int, total_bytes: int) -> None:
    data = make_batch(batch_bytes, records_per_batch)
    batch_count = max(1, total_bytes // len(data))
    config = LogConfig(max_message_bytes=2 * len(data), segment_bytes=256 << 20)
    dir_path = tempfile.mkdtemp(prefix="kspec-bench-")
    try:
        log = Log(os.path.join(dir_path, "bench-0"), config, now_ms=0)
        start = time.perf_counter()
        for i in range(batch_count):
            log.append_as_leader(data, leader_epoch=0, now_ms=i)
        append_s = time.perf_counter() - start
        written_mb = batch_count * len(data) / 1e6

        start = time.perf_counter()
        offset, read_bytes = log.log_start_offset, 0
        while offset < log.log_end_offset:
            info = log.read(offset, READ_MAX_BYTES)
            read_bytes += len(info.records)
            offset = _next_offset(info.records)
        read_s = time.perf_counter() - start
        assert read_bytes == batch_count * len(data), (read_bytes, batch_count * len(data))
        print(f"{label:>6} batches: append {written_mb / append_s:8.1f} MB/s {batch_count / append_s:9.0f} batches/s"
              f" | read {read_bytes / 1e6 / read_s:8.1f} MB/s  ({batch_count} batches, {written_mb:.0f} MB,"
              f" {len(log.segments)} segments)")
        log.close()
    finally:
        shutil.rmtree(dir_path)


def _next_offset(records: bytes) -> int:
    """The offset after the last batch in a read (walks the batch headers only)."""
    last = None
    for last in iter_batches(records):
        pass
    assert last is not None
    return last.next_offset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-mb", type=int, default=256, help="bytes appended per batch size (MB)")
    args = parser.parse_args()
    total_bytes = args.total_mb << 20
    bench("1 MB", 1 << 20, 64, total_bytes)
    bench("16 KB", 16 << 10, 16, total_bytes)


if __name__ == "__main__":
    main()
