"""Helpers for the storage tests: real directories, batches built as a producer would."""
from __future__ import annotations

import pytest

from reference.protocol.records import Record, iter_batches, build_batch
from reference.storage import Log, LogConfig


def make_batch(count: int = 1, *, timestamp_ms: int = 1_000, value_bytes: int = 10, producer_id: int = -1,
               producer_epoch: int = -1, base_sequence: int = -1, compression: int = 0, tag: int = 0) -> bytes:
    records = [Record(0, timestamp_ms + i, b"k%d" % (tag + i), bytes([65 + (tag + i) % 26]) * value_bytes)
               for i in range(count)]
    return build_batch(records, producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence, compression=compression)


def read_all(log: Log, from_offset: int | None = None) -> list:
    """Every record from `from_offset` (default: log start) to the log end, by repeated reads."""
    offset = log.log_start_offset if from_offset is None else from_offset
    records = []
    while offset < log.log_end_offset:
        info = log.read(offset, 64 * 1024)
        batches = list(iter_batches(info.records))
        assert batches and sum(b.size_bytes for b in batches) == len(info.records)
        for batch in batches:
            assert batch.crc_is_valid()
            records.extend(r for r in batch.records() if r.offset >= offset)
        offset = batches[-1].next_offset
    return records


@pytest.fixture
def log_dir(tmp_path):
    return str(tmp_path / "topic-0")


@pytest.fixture
def open_log(log_dir):
    """open_log(config=None, now_ms=0) opens (or reopens) the Log in log_dir."""
    opened = []

    def _open(config: LogConfig | None = None, now_ms: int = 0) -> Log:
        log = Log(log_dir, config or LogConfig(), now_ms=now_ms)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        for segment in log.segments:
            segment.close()
