"""Finding batches by their headers: what reads and lookups scan instead of whole batches."""
from __future__ import annotations

from .conftest import make_batch
from reference.protocol.records import RECORD_BATCH_OVERHEAD, iter_batches
from reference.storage import LogConfig

FIELDS = ("base_offset", "last_offset", "size_bytes", "max_timestamp", "producer_id", "base_sequence")


def test_a_header_scan_finds_every_batch_a_full_scan_finds_without_reading_records(open_log):
    log = open_log(LogConfig(index_interval_bytes=4096))
    sequence = 0
    for i in range(40):
        count, value_bytes = 1 + i % 5, 100_000 if i % 7 == 0 else 10
        log.append_as_leader(make_batch(count, value_bytes=value_bytes, timestamp_ms=1_000 + i, tag=i,
                                        producer_id=9, producer_epoch=0, base_sequence=sequence),
                             leader_epoch=2, now_ms=0)
        sequence += count
    segment = log.active_segment
    full = list(segment.batches_from(0))
    headers = list(segment.batches_from(0, headers_only=True))
    assert len(full) == len(headers) == 40
    for (position, batch), (header_position, header) in zip(full, headers):
        assert position == header_position
        assert all(getattr(batch, name) == getattr(header, name) for name in FIELDS), (batch, header)
        assert len(header.buffer) == RECORD_BATCH_OVERHEAD  # the records were never read
    assert headers[-1][0] + headers[-1][1].size_bytes == segment.size_bytes


def test_a_read_returns_a_large_batch_exactly_as_appended(open_log):
    log = open_log()
    small = make_batch(3, tag=1)
    large = make_batch(1000, value_bytes=1000, tag=2)
    log.append_as_leader(small, leader_epoch=0, now_ms=0)
    log.append_as_leader(large, leader_epoch=0, now_ms=0)
    read = log.read(5, max_bytes=1)  # below the batch's size: one whole batch all the same (KIP-74)
    (batch,) = iter_batches(read.records)
    assert (read.first_batch_offset, batch.records_count, batch.size_bytes) == (3, 1000, len(large))
    assert batch.crc_is_valid() and bytes(batch.buffer[RECORD_BATCH_OVERHEAD:]) == large[RECORD_BATCH_OVERHEAD:]
    both = log.read(0, max_bytes=len(small) + len(large))
    assert [b.base_offset for b in iter_batches(both.records)] == [0, 3]
    (first,) = iter_batches(log.read(0, max_bytes=len(small) + len(large) - 1).records)  # the second does not fit
    assert (first.base_offset, first.size_bytes) == (0, len(small))
