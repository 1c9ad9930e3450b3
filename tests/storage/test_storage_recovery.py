"""Recovery on open: torn tails, corrupt bytes, lost index files, clean-shutdown markers.

A crash is simulated by dropping the Log without close(): no marker is written, so the next
open scans every segment."""
from __future__ import annotations

import logging
import os

import pytest

from .conftest import make_batch, read_all
from reference.storage import LogConfig
from reference.storage.log import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE
from reference.storage.segment import LogSegment

CONFIG = LogConfig(segment_bytes=4_000, index_interval_bytes=200)


def crash(log) -> None:
    """Release file handles without flushing anything of our own or writing the marker."""
    for segment in log.segments:
        segment.close()


def fill(log, batches: int) -> list[int]:
    """Append batches of 3 records; return the base offsets."""
    return [log.append_as_leader(make_batch(3, tag=i), leader_epoch=1, now_ms=0).first_offset for i in range(batches)]


@pytest.mark.guarantee("DUR-2")
def test_torn_tail_is_cut_at_the_last_whole_batch(open_log, caplog):
    log = open_log(CONFIG)
    bases = fill(log, 50)
    active = log.active_segment
    last_position, last = max(active.batches_from(0), key=lambda found: found[0])
    last_batch = bytes(last.buffer)
    crash(log)
    for cut in (last_position + 1, last_position + 30):  # cut the last batch mid-way
        with open(active.log_path, "ab") as f:
            f.truncate(last_position)
            f.write(last_batch[:cut - last_position])
        with caplog.at_level(logging.WARNING):
            reopened = open_log(CONFIG)
        assert reopened.log_end_offset == bases[-1]
        assert os.path.getsize(active.log_path) == last_position
        assert [r.offset for r in read_all(reopened)] == list(range(bases[-1]))
        assert "cut" in caplog.text
        crash(reopened)
    reopened = open_log(CONFIG)
    assert reopened.append_as_leader(make_batch(1), 1, now_ms=0).first_offset == bases[-1]


def test_a_corrupt_byte_in_the_last_batch_loses_only_that_batch(open_log):
    log = open_log(CONFIG)
    bases = fill(log, 50)
    active = log.active_segment
    positions = [position for position, _ in active.batches_from(0)]
    crash(log)
    with open(active.log_path, "r+b") as f:
        f.seek(positions[-1] + 70)  # inside the records, covered by the CRC
        byte = f.read(1)
        f.seek(positions[-1] + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    reopened = open_log(CONFIG)
    assert reopened.log_end_offset == bases[-1]
    assert [r.offset for r in read_all(reopened)] == list(range(bases[-1]))


def test_a_corrupt_batch_in_the_middle_cuts_everything_after_it(open_log):
    log = open_log(LogConfig(segment_bytes=1 << 20))
    bases = fill(log, 20)
    active = log.active_segment
    positions = [position for position, _ in active.batches_from(0)]
    crash(log)
    with open(active.log_path, "r+b") as f:
        f.seek(positions[10] + 30)  # base timestamp of batch 10
        f.write(b"\xff\xff")
    reopened = open_log()
    assert reopened.log_end_offset == bases[10]
    assert os.path.getsize(active.log_path) == positions[10]


def test_a_rolled_segment_is_rescanned_after_a_crash_too_and_the_log_ends_at_its_cut(open_log, caplog):
    """A rolled segment is fsynced in the background, so a crash may leave it torn as well.
    As in Kafka's recovery, the log then ends at the cut: the later segments are deleted, so
    no gap of offsets is left behind (a follower refetches what follows from its leader)."""
    log = open_log(CONFIG)
    fill(log, 100)
    first = log.segments[0]
    later_paths = [segment.log_path for segment in log.segments[1:]]
    assert len(later_paths) > 1
    last_position, _ = max(first.batches_from(0), key=lambda found: found[0])
    crash(log)
    with open(os.path.join(log.dir_path, RECOVERY_POINT_FILE), "w") as f:
        f.write("0")  # the crash came before the flusher's fsyncs
    with open(first.log_path, "r+b") as f:
        f.seek(last_position + 30)  # the last batch of the first segment: base timestamp
        f.write(b"\xff\xff")
    with caplog.at_level(logging.WARNING):
        reopened = open_log(CONFIG)
    assert "cut" in caplog.text and f"{len(later_paths)} later segment(s) deleted" in caplog.text
    assert os.path.getsize(first.log_path) == last_position
    assert len(reopened.segments) == 1 and not any(os.path.exists(path) for path in later_paths)
    cut_offset = reopened.log_end_offset
    assert [r.offset for r in read_all(reopened)] == list(range(cut_offset)), "no gap"
    assert reopened.append_as_leader(make_batch(1), 1, now_ms=0).first_offset == cut_offset


def wait_for_rolled_flushes(log) -> int:
    """Let the background fsyncs of rolled segments finish and the log take note; the recovery point."""
    for flushed in list(log._rolled_flushes):
        flushed.result()
    log.flush(now_ms=0)
    with open(os.path.join(log.dir_path, RECOVERY_POINT_FILE)) as f:
        return int(f.read())


def rescanned_segments(monkeypatch) -> list[int]:
    """The base offsets of the segments recovery scans from now on."""
    scanned = []
    recover = LogSegment.recover

    def recording(segment):
        scanned.append(segment.base_offset)
        return recover(segment)

    monkeypatch.setattr(LogSegment, "recover", recording)
    return scanned


def test_after_a_crash_only_the_segments_past_the_recovery_point_are_rescanned(open_log, monkeypatch):
    """Rolled segments whose fsync completed are on disk: a restart after a crash rescans from
    the recovery point on, not the whole log."""
    log = open_log(CONFIG)
    bases = fill(log, 100)
    assert len(log.segments) > 3
    recovery_point = wait_for_rolled_flushes(log)
    assert recovery_point == log.active_segment.base_offset, "every rolled segment is on disk"
    crash(log)
    scanned = rescanned_segments(monkeypatch)
    reopened = open_log(CONFIG)
    assert scanned == [recovery_point], "the active segment only"
    assert [r.offset for r in read_all(reopened)] == list(range(bases[-1] + 3))


def test_a_truncation_lowers_the_recovery_point_before_anything_is_appended_again(open_log, monkeypatch):
    """A follower truncating into a flushed segment makes it active again: what is appended
    there next is not on disk, so after a crash it must be rescanned."""
    log = open_log(CONFIG)
    fill(log, 100)
    wait_for_rolled_flushes(log)
    second = log.segments[1]
    log.truncate_to(second.base_offset + 3)
    with open(os.path.join(log.dir_path, RECOVERY_POINT_FILE)) as f:
        assert int(f.read()) == second.base_offset
    # The rolls that follow report no completed fsync, as when the crash comes before them.
    monkeypatch.setattr("reference.storage.log.fsync_files", lambda paths, end_offset: -1)
    bases = fill(log, 40)
    assert len(log.segments) > 2
    crash(log)
    scanned = rescanned_segments(monkeypatch)
    reopened = open_log(CONFIG)
    assert scanned[0] == second.base_offset and len(scanned) == len(reopened.segments) - 1
    assert [r.offset for r in read_all(reopened)] == list(range(bases[-1] + 3))


def test_missing_index_files_are_rebuilt_identically(open_log, log_dir):
    log = open_log(CONFIG)
    fill(log, 200)
    log.close()
    index_files = sorted(name for name in os.listdir(log_dir) if name.endswith((".index", ".timeindex")))
    original = {name: open(os.path.join(log_dir, name), "rb").read() for name in index_files}
    for name in index_files:
        os.remove(os.path.join(log_dir, name))
    reopened = open_log(CONFIG)
    reopened.close()
    assert {name: open(os.path.join(log_dir, name), "rb").read() for name in index_files} == original
    assert len(original) > 4 and any(original.values())


def test_a_malformed_index_file_is_rebuilt(open_log, log_dir):
    log = open_log(CONFIG)
    fill(log, 100)
    first = log.segments[0]
    log.close()
    with open(first.offset_index.path, "ab") as f:
        f.write(b"\x00\x00\x00")  # not a whole entry
    reopened = open_log(CONFIG)
    assert reopened.segments[0].offset_index.keys == first.offset_index.keys
    assert [r.offset for r in read_all(reopened)] == list(range(300))


def test_clean_shutdown_marker_is_consumed_on_open(open_log, log_dir):
    log = open_log(CONFIG)
    fill(log, 10)
    log.close()
    assert os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE))
    reopened = open_log(CONFIG)
    assert not os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE))
    assert (reopened.log_end_offset, len(read_all(reopened))) == (30, 30)


def test_reopen_keeps_timestamps_for_retention_and_lookups(open_log):
    log = open_log(CONFIG)
    for i in range(100):
        log.append_as_leader(make_batch(2, timestamp_ms=i * 10), leader_epoch=0, now_ms=0)
    expected = [(s.base_offset, s.max_timestamp) for s in log.segments]
    log.close()
    reopened = open_log(CONFIG)
    assert [(s.base_offset, s.max_timestamp) for s in reopened.segments] == expected
    assert reopened.offset_for_timestamp(505) == (102, 510)
