"""Storage throughput: Log.append_as_leader with 1 MB and 16 KB batches, then sequential reads;
then the open of a log after a crash, with its recovery point and without one.

Run: .venv/bin/python benchmarks/bench_storage.py [--total-mb N]
Batches are built once (random, incompressible values) and appended repeatedly; each append
validates the header and CRC-32C, assigns offsets, writes and indexes. Nothing is fsynced
(Kafka's default), so this measures the page cache, not the disk.

Recovery: a log of --total-mb in 64 MB segments is dropped without close() once the rolled
segments' background fsyncs are done (a crash), then opened twice: as it is, where only the
segments past the recovery point are rescanned, and with its recovery-point file removed, as an
open rescanned every segment before there was one. The ratio is the second time over the first.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time

from reference.protocol.records import Record, build_batch, iter_batches
from reference.storage import Log, LogConfig
from reference.storage.log import RECOVERY_POINT_FILE

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


def bench_recovery(total_bytes: int) -> None:
    data = make_batch(1 << 20, 64)
    config = LogConfig(max_message_bytes=2 * len(data), segment_bytes=64 << 20)
    dir_path = tempfile.mkdtemp(prefix="kspec-bench-")
    try:
        path = os.path.join(dir_path, "bench-0")
        log = Log(path, config, now_ms=0)
        for i in range(max(1, total_bytes // len(data))):
            log.append_as_leader(data, leader_epoch=0, now_ms=i)
        log.flush(now_ms=0)
        for flushed in list(log._rolled_flushes):
            flushed.result()
        log.flush(now_ms=0)  # takes note of the completed fsyncs: the recovery point is on disk
        segments, end_offset = len(log.segments), log.log_end_offset
        times = {}
        for label in ("recovery point", "full rescan"):
            for segment in log.segments:
                segment.close()  # a crash: no close(), so no clean-shutdown marker
            if label == "full rescan":
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(path, RECOVERY_POINT_FILE))
            start = time.perf_counter()
            log = Log(path, config, now_ms=0)
            times[label] = time.perf_counter() - start
            assert log.log_end_offset == end_offset, (log.log_end_offset, end_offset)
        print(f"recovery after a crash ({total_bytes >> 20} MB, {segments} segments): open with the recovery point "
              f"{times['recovery point']:.3f} s, rescanning every segment {times['full rescan']:.3f} s "
              f"(ratio {times['full rescan'] / times['recovery point']:.1f})")
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
    bench_recovery(total_bytes)


if __name__ == "__main__":
    main()
