"""The segment log: appends, reads, rolls, indexes, timestamps, retention, DeleteRecords."""
from __future__ import annotations

import os

import pytest

from .conftest import make_batch, read_all
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import TIMESTAMP_TYPE_LOG_APPEND_TIME, RecordBatch, iter_batches
from reference.storage import LogConfig
from reference.storage.log import ROLLED_SEGMENT_FLUSHER

SMALL_SEGMENTS = LogConfig(segment_bytes=2_000, index_interval_bytes=300)


@pytest.mark.guarantee("ORD-1")
def test_offsets_are_contiguous_across_many_segment_rolls(open_log):
    log = open_log(SMALL_SEGMENTS)
    expected_first = 0
    for i in range(300):
        count = 1 + i % 4
        info = log.append_as_leader(make_batch(count, tag=i), leader_epoch=3, now_ms=10)
        assert (info.first_offset, info.last_offset, info.record_count) == (expected_first, expected_first + count - 1, count)
        expected_first += count
    assert log.log_end_offset == expected_first
    assert len(log.segments) > 10
    assert all(s.size_bytes <= SMALL_SEGMENTS.segment_bytes for s in log.segments)
    assert [s.base_offset for s in log.segments[1:]] == [s.next_offset for s in log.segments[:-1]]
    records = read_all(log)
    assert [r.offset for r in records] == list(range(expected_first))


def test_a_writable_batch_gets_its_offsets_in_place_and_read_only_bytes_are_copied(open_log):
    log = open_log()
    log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=1_000)
    received = bytearray(make_batch(3))  # as a Produce frame arrives: writable, the handler's
    log.append_as_leader(memoryview(received), leader_epoch=4, now_ms=1_000)
    patched = RecordBatch(received)
    assert (patched.base_offset, patched.partition_leader_epoch) == (2, 4) and patched.crc_is_valid()
    produced = make_batch(1)
    log.append_as_leader(produced, leader_epoch=4, now_ms=1_000)
    assert RecordBatch(produced).base_offset == 0, "bytes are never written to"
    assert [batch.base_offset for batch in iter_batches(log.read(0, 1 << 20).records)] == [0, 2, 5]


def test_every_offset_reads_from_the_batch_holding_it(open_log):
    log = open_log(SMALL_SEGMENTS)
    for i in range(60):
        log.append_as_leader(make_batch(3, tag=i), leader_epoch=0, now_ms=0)
    for offset in range(log.log_end_offset):
        info = log.read(offset, 1)
        (batch,) = iter_batches(info.records)
        assert batch.base_offset <= offset <= batch.last_offset == info.first_batch_offset + 2
        assert batch.partition_leader_epoch == 0


def test_offset_index_is_sparse_and_lookups_agree_with_a_scan(open_log):
    log = open_log(LogConfig(segment_bytes=100_000, index_interval_bytes=500))
    for i in range(200):
        log.append_as_leader(make_batch(2, tag=i), leader_epoch=0, now_ms=0)
    segment = log.active_segment
    assert 5 < len(segment.offset_index.keys) < 200
    scanned = {batch.base_offset: position for position, batch in segment.batches_from(0)}
    for relative, position in zip(segment.offset_index.keys, segment.offset_index.values):
        assert scanned[segment.base_offset + relative] == position
    log.flush(now_ms=0)
    assert os.path.getsize(segment.offset_index.path) == 8 * len(segment.offset_index.keys)


def test_read_respects_max_bytes_min_one_batch_and_max_offset(open_log):
    log = open_log()
    for i in range(10):
        log.append_as_leader(make_batch(1, value_bytes=1000, tag=i), leader_epoch=0, now_ms=0)
    size = RecordBatch(make_batch(1, value_bytes=1000)).size_bytes
    assert len(list(iter_batches(log.read(0, 3 * size).records))) == 3
    assert len(list(iter_batches(log.read(0, 3 * size - 1).records))) == 2
    # KIP-74: one whole batch even if larger than max_bytes, unless the caller says otherwise
    assert len(log.read(4, 10).records) == size
    assert log.read(4, 10, min_one_batch=False).records == b""
    # the high watermark cap (VIS-1): nothing at or above max_offset
    capped = list(iter_batches(log.read(0, 1 << 20, max_offset=6).records))
    assert [b.base_offset for b in capped] == [0, 1, 2, 3, 4, 5]
    assert log.read(6, 1 << 20, max_offset=6).records == b""
    # the log end offset is a valid, empty position; beyond it is out of range
    assert log.read(10, 1 << 20).records == b"" and log.read(10, 1 << 20).first_batch_offset == -1
    with pytest.raises(KafkaError) as error:
        log.read(11, 1 << 20)
    assert error.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_read_never_crosses_a_segment(open_log):
    log = open_log(SMALL_SEGMENTS)
    for i in range(40):
        log.append_as_leader(make_batch(2, tag=i), leader_epoch=0, now_ms=0)
    first = log.segments[0]
    batches = list(iter_batches(log.read(0, 1 << 20).records))
    assert batches[-1].next_offset == first.next_offset


def test_segment_ms_rolls_by_the_first_batch_timestamp(open_log):
    log = open_log(LogConfig(segment_ms=1_000))
    log.append_as_leader(make_batch(1, timestamp_ms=5_000), leader_epoch=0, now_ms=5_000)
    log.append_as_leader(make_batch(1, timestamp_ms=5_900), leader_epoch=0, now_ms=5_900)
    assert len(log.segments) == 1
    log.append_as_leader(make_batch(1, timestamp_ms=6_100), leader_epoch=0, now_ms=6_100)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_create_time_reports_no_log_append_time(open_log):
    assert open_log().append_as_leader(make_batch(1), 0, now_ms=5).log_append_time_ms == -1


def test_log_append_time_overrides_timestamps(open_log):
    log = open_log(LogConfig.from_properties({"message.timestamp.type": "LogAppendTime"}))
    info = log.append_as_leader(make_batch(3, timestamp_ms=1), leader_epoch=0, now_ms=777)
    assert info.log_append_time_ms == 777
    (batch,) = iter_batches(log.read(0, 1 << 20).records)
    assert batch.timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME and batch.crc_is_valid()
    assert [r.timestamp for r in batch.records()] == [777] * 3


def test_offset_for_timestamp_and_max_timestamp(open_log):
    log = open_log(SMALL_SEGMENTS)
    assert log.max_timestamp_offset() is None and log.offset_for_timestamp(0) is None
    # timestamps 0, 10, 20, ... with one out-of-order batch holding the maximum
    for i in range(100):
        log.append_as_leader(make_batch(2, timestamp_ms=i * 10), leader_epoch=0, now_ms=0)
    log.append_as_leader(make_batch(1, timestamp_ms=50_000), leader_epoch=0, now_ms=0)
    log.append_as_leader(make_batch(1, timestamp_ms=5), leader_epoch=0, now_ms=0)
    assert log.offset_for_timestamp(0) == (0, 0)
    assert log.offset_for_timestamp(1) == (1, 1)
    assert log.offset_for_timestamp(2) == (2, 10)
    assert log.offset_for_timestamp(555) == (112, 560)
    assert log.offset_for_timestamp(991) == (199, 991)
    assert log.offset_for_timestamp(992) == (200, 50_000)
    assert log.offset_for_timestamp(50_001) is None
    assert log.max_timestamp_offset() == (200, 50_000)


@pytest.mark.guarantee("RET-1")
def test_retention_by_time_deletes_old_segments_but_never_the_active_one(open_log):
    log = open_log(LogConfig(segment_bytes=2_000, retention_ms=1_000))
    for i in range(100):
        log.append_as_leader(make_batch(2, timestamp_ms=i * 100), leader_epoch=0, now_ms=i * 100)
    segments_before = len(log.segments)
    assert log.enforce_retention(now_ms=0, high_watermark=log.log_end_offset) == 0
    deleted = log.enforce_retention(now_ms=5_000, high_watermark=log.log_end_offset)
    assert 0 < deleted < segments_before
    assert all(5_000 - s.max_timestamp <= 1_000 for s in log.segments[:-1])
    assert log.log_start_offset == log.segments[0].base_offset
    assert [r.offset for r in read_all(log)] == list(range(log.log_start_offset, log.log_end_offset))
    remaining = len(log.segments)
    assert log.enforce_retention(now_ms=10**9, high_watermark=log.log_end_offset) == remaining - 1
    assert len(log.segments) == 1 and log.log_end_offset == 200
    info = log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=10**9)
    assert info.first_offset == 200 and info.log_start_offset == log.log_start_offset


@pytest.mark.guarantee("RET-1")
def test_retention_by_bytes(open_log):
    log = open_log(LogConfig(segment_bytes=2_000, retention_bytes=5_000, retention_ms=-1))
    for i in range(100):
        log.append_as_leader(make_batch(2, tag=i), leader_epoch=0, now_ms=0)
    assert log.enforce_retention(now_ms=10**12, high_watermark=log.log_end_offset) > 0
    assert log.size_bytes <= 5_000 + 2_000 and log.size_bytes > 5_000 - 2_000
    assert log.enforce_retention(now_ms=10**12, high_watermark=log.log_end_offset) == 0


def test_compact_only_policy_deletes_nothing(open_log):
    log = open_log(LogConfig(segment_bytes=2_000, retention_ms=0, cleanup_policy="compact"))
    for i in range(50):
        log.append_as_leader(make_batch(2, tag=i), leader_epoch=0, now_ms=0)
    assert log.enforce_retention(now_ms=10**12, high_watermark=log.log_end_offset) == 0


def test_delete_records_moves_log_start_and_survives_reopen(open_log):
    log = open_log(SMALL_SEGMENTS)
    for i in range(100):
        log.append_as_leader(make_batch(2, tag=i), leader_epoch=0, now_ms=0)
    segment_count = len(log.segments)
    target = log.segments[5].base_offset + 1
    assert log.delete_records_before(target) == target
    assert len(log.segments) == segment_count - 5
    assert log.delete_records_before(3) == target  # never moves backwards
    with pytest.raises(KafkaError) as error:
        log.read(target - 1, 100)
    assert error.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert read_all(log)[0].offset == target
    with pytest.raises(KafkaError):
        log.delete_records_before(log.log_end_offset + 1)
    log.close()
    reopened = open_log(SMALL_SEGMENTS)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (target, 200)
    assert reopened.delete_records_before(200) == 200 and reopened.read(200, 10).records == b""


def test_truncate_to_cuts_at_a_batch_boundary(open_log):
    log = open_log(SMALL_SEGMENTS)
    for i in range(100):
        log.append_as_leader(make_batch(2, tag=i), leader_epoch=0, now_ms=0)
    log.truncate_to(151)
    assert log.log_end_offset == 150
    assert [r.offset for r in read_all(log)] == list(range(150))
    log.truncate_to(log.segments[3].base_offset)
    assert log.log_end_offset == log.active_segment.next_offset
    assert log.append_as_leader(make_batch(1), 0, now_ms=0).first_offset == log.log_end_offset - 1
    assert [r.offset for r in read_all(log)] == list(range(log.log_end_offset))


def test_delete_removes_the_directory(open_log, log_dir):
    log = open_log()
    log.append_as_leader(make_batch(1), 0, now_ms=0)
    log.delete()
    assert not os.path.exists(log_dir)


def test_config_properties_round_trip_and_validation():
    config = LogConfig.from_properties({"segment.bytes": "1048576", "retention.ms": "-1", "cleanup.policy": "compact,delete"})
    assert (config.segment_bytes, config.retention_ms) == (1 << 20, -1)
    assert LogConfig.from_properties(config.to_properties()) == config
    for key, value in [("segment.bytes", "10"), ("retention.ms", "-2"), ("segment.bytes", "1MB"),
                       ("message.timestamp.type", "WallClock"), ("cleanup.policy", "forever"), ("no.such.key", "1")]:
        with pytest.raises(KafkaError) as error:
            LogConfig.from_properties({key: value})
        assert error.value.code == ErrorCode.INVALID_CONFIG and key in str(error.value)


def test_file_handles_stay_bounded_as_segments_grow(open_log, log_dir):
    def open_fds() -> int:
        """This process's open files inside the log's directory (other tests' leftover client
        threads may open and close sockets meanwhile, so the whole fd table is not counted)."""
        return sum(1 for fd in os.listdir("/proc/self/fd")
                   if _fd_target(fd).startswith(str(log_dir) + os.sep))

    before = open_fds()
    log = open_log(LogConfig(segment_bytes=500, index_interval_bytes=100))
    for i in range(300):
        log.append_as_leader(make_batch(2, tag=i), leader_epoch=0, now_ms=0)
        log.read(max(0, log.log_end_offset - 50), 1 << 16)
    assert len(log.segments) > 50
    ROLLED_SEGMENT_FLUSHER.submit(lambda: None).result()  # one worker: every rolled segment's fsync is done
    assert open_fds() - before <= 3  # the active segment's log, offset index and time index


def _fd_target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # closed since it was listed
        return ""
