"""The log of one partition: a directory of segments, appended by the leader, read by fetches.

Layout (Kafka's): <data_dir>/<topic>-<partition>/
    00000000000000000000.log / .index / .timeindex   one segment per base offset
    00000000000000001234.snapshot                   producer state before offset 1234
    log-start-offset                                the log start offset, when above the first segment
    recovery-point                                  below it, every segment is on disk (see Recovery)
    .kafka_cleanshutdown                            written by close(), consumed by the next open

Time is always passed in (`now_ms`); nothing here reads a clock.
Durability: like Kafka, nothing is fsynced on append by default. Kafka relies on the page
cache and on replication (DUR-1 needs acks=all with a surviving ISR member, not fsync).
flush.messages and flush.ms, when set, fsync the active segment on append once that many
records or that much time has accumulated. A rolled segment is fsynced after it is rolled, by
one background flusher thread (as Kafka schedules the flush of a rolled segment instead of
making the append that rolled wait: a 1 GiB segment takes the disk here 0.3-0.6 s), and
close() waits for those flushes before it writes the clean-shutdown marker.

Opening a log (recovery after a crash, swaps cut short, producer state): log_loader.py.
"""
from __future__ import annotations

import bisect
import enum
import logging
import os
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator

from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import NO_TIMESTAMP, RecordBatch, assign_offsets
from reference.protocol.validator import ValidatedBatch
from reference.storage.atomic import fsync_directory, replace_file
from reference.storage.config import LogConfig
from reference.storage.log_loader import (
    CLEAN_SHUTDOWN_FILE, CLEANED_SUFFIX, LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE, SNAPSHOT_SUFFIX, SWAP_SUFFIX,
    complete_or_discard_swaps, load_producer_state, load_segments, read_offset_file, snapshot_offsets,
)
from reference.storage.log_validator import check_fetched_batches, check_marker, validate_produced_batch
from reference.storage.producer_state import ProducerStateManager
from reference.storage.retention import first_record_at_or_after, segments_past_retention
from reference.storage.segment import RELATIVE_OFFSET_MAX, Batch, LogSegment, segment_file_name

log = logging.getLogger(__name__)

ROLLED_SEGMENT_FLUSHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kspec-log-flusher")


class AppendOrigin(enum.Enum):
    """Who appends as leader (Kafka's AppendOrigin). A client's batch is a Produce request's
    and may not be a control batch; the transaction coordinator's is a transaction marker,
    which is one (KIP-98)."""

    CLIENT = "client"
    COORDINATOR = "coordinator"


@dataclass(frozen=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    record_count: int


@dataclass(frozen=True)
class LogReadInfo:
    records: bytes  # whole batches, exactly as stored
    first_batch_offset: int  # base offset of the first batch returned; -1 when records is empty
    log_start_offset: int
    log_end_offset: int


class Log:
    """A partition's segment log. Public interface used by the broker:
    append_as_leader, append_as_follower, read, log_start_offset, log_end_offset, offset_for_timestamp,
    max_timestamp_offset, delete_records_before, truncate_to, enforce_retention,
    replace_segments (the cleaner's swap), flush, close, delete, and the read-only `producer_state`."""

    def __init__(self, dir_path: str, config: LogConfig, *, now_ms: int) -> None:
        self.dir_path = dir_path
        self.config = config
        self.segments: list[LogSegment] = []
        self.producer_state = ProducerStateManager()
        self._unflushed_records = 0
        self._changed_since_flush = False  # appended or truncated: the next flush has work to do
        self._last_flush_ms = now_ms
        self._rolled_flushes: list[Future] = []  # fsyncs of rolled segments, in roll order; each gives its end
        self._recovery_point = 0
        os.makedirs(dir_path, exist_ok=True)
        self._load(now_ms)

    # ------------------------------------------------------------ offsets

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record will get."""
        return self.active_segment.next_offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self.segments)

    # ------------------------------------------------------------ opening

    def _advance_recovery_point(self) -> None:
        """Move the recovery point to the end of the newest rolled segment whose fsync has
        completed (the flusher runs them in roll order) and keep it on disk."""
        done = 0
        while done < len(self._rolled_flushes) and self._rolled_flushes[done].done():
            done += 1
        if done:
            end_offsets = [flushed.result() for flushed in self._rolled_flushes[:done]]  # a failed fsync raises
            end_offset = end_offsets[-1]
            del self._rolled_flushes[:done]
            if end_offset > self._recovery_point:
                self._set_recovery_point(end_offset)

    def _set_recovery_point(self, offset: int) -> None:
        self._recovery_point = offset
        self._write_atomically(RECOVERY_POINT_FILE, str(offset).encode())

    def _recovery_point_after_truncation(self) -> None:
        """Before anything is appended where the truncation cut, the recovery point must lie at or
        below the segment that is active now, or records appended there and not yet on disk would
        sit below it after a crash. The fsyncs of rolled segments still running are waited for
        and forgotten: the end offsets they would report may have been truncated away."""
        for flushed in self._rolled_flushes:
            flushed.result()
        self._rolled_flushes.clear()
        if self._recovery_point > self.active_segment.base_offset:
            self._set_recovery_point(self.active_segment.base_offset)

    def _load(self, now_ms: int) -> None:
        complete_or_discard_swaps(self.dir_path, self.config)  # a compaction cut short
        clean_marker = os.path.join(self.dir_path, CLEAN_SHUTDOWN_FILE)
        clean_shutdown = os.path.exists(clean_marker)
        recovery_point = read_offset_file(self.dir_path, RECOVERY_POINT_FILE)
        self.segments = load_segments(self.dir_path, self.config, now_ms, recovery_point, clean_shutdown)
        self._log_start_offset = max(self.segments[0].base_offset,
                                     read_offset_file(self.dir_path, LOG_START_OFFSET_FILE))
        self._recovery_point = min(recovery_point, self.active_segment.base_offset)
        self._load_producer_state()
        if clean_shutdown:
            os.remove(clean_marker)  # a crash from here on must trigger recovery

    def _load_producer_state(self) -> None:
        self.producer_state = load_producer_state(self.dir_path, self.segments[0].base_offset, self.log_end_offset,
                                                  self._batches_from)

    def _write_atomically(self, name: str, data: bytes) -> None:
        replace_file(os.path.join(self.dir_path, name), data)

    def _take_snapshot(self) -> None:
        self._write_atomically(segment_file_name(self.log_end_offset, SNAPSHOT_SUFFIX), self.producer_state.to_snapshot())

    # ------------------------------------------------------------ appending

    def append_as_leader(self, records: bytes | memoryview | ValidatedBatch, leader_epoch: int, now_ms: int,
                         origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        """Validate a Produce request's records (unless validated ahead under today's rules) or a
        coordinator's marker (log_validator.py), check producer state, assign offsets and append;
        KafkaError if refused. A duplicate idempotent batch keeps its original offsets."""
        if origin is AppendOrigin.COORDINATOR:
            batch = check_marker(records, self.producer_state)
        else:
            batch = validate_produced_batch(records, self.config, now_ms)
        if batch.producer_id >= 0 and not batch.is_control:
            duplicate = self.producer_state.check_append(batch)
            if duplicate is not None:
                return LogAppendInfo(duplicate.first_offset, duplicate.last_offset,
                                     duplicate.timestamp_ms if self.config.log_append_time else -1,
                                     self._log_start_offset, batch.records_count)
        log_append_time_ms = now_ms if self.config.log_append_time else None
        # Offsets and the leader epoch go into the received batch in place (the bytes a Produce
        # frame arrived in are the handler's); read-only bytes from elsewhere are copied first.
        buffer = bytearray(batch.buffer) if batch.buffer.readonly else batch.buffer
        assign_offsets(buffer, self.log_end_offset, leader_epoch, log_append_time_ms)
        appended = RecordBatch(buffer)
        self._maybe_roll(appended, now_ms)
        self.active_segment.append(appended)
        self.producer_state.update(appended)
        self._unflushed_records += appended.records_count
        self._changed_since_flush = True
        if (self._unflushed_records >= self.config.flush_messages
                or now_ms - self._last_flush_ms >= self.config.flush_ms):
            self.flush(now_ms)
        return LogAppendInfo(appended.base_offset, appended.last_offset,
                             now_ms if log_append_time_ms is not None else -1,
                             self._log_start_offset, appended.records_count)

    def append_as_follower(self, records: bytes | memoryview, now_ms: int) -> LogAppendInfo:
        """Append batches fetched from the partition leader as they are: the leader's offsets
        and partition leader epochs are kept. Offsets must only increase, from the log end
        offset on, and every CRC must be valid (KafkaError CORRUPT_MESSAGE otherwise); gaps are
        fine, since a compacted leader keeps its records' original offsets. Nothing is
        deduplicated: the leader already decided what the log holds."""
        first_offset = self.log_end_offset
        batches = check_fetched_batches(records, first_offset)  # all checked before any is appended
        for batch in batches:
            self._maybe_roll(batch, now_ms)
            self.active_segment.append(batch)
            if batch.producer_id >= 0:
                self.producer_state.update(batch)
            self._unflushed_records += batch.records_count
        self._changed_since_flush = True
        if self._unflushed_records >= self.config.flush_messages or now_ms - self._last_flush_ms >= self.config.flush_ms:
            self.flush(now_ms)
        return LogAppendInfo(first_offset, self.log_end_offset - 1, -1, self._log_start_offset,
                             sum(batch.records_count for batch in batches))

    def _maybe_roll(self, batch: RecordBatch, now_ms: int) -> None:
        """Start a new segment when this batch would overflow segment.bytes, the active
        segment is older than segment.ms (max.compaction.lag.ms for a compacted log), or its
        offsets would not fit a relative index."""
        active = self.active_segment
        if active.size_bytes == 0:
            return
        rolling_timestamp = active.first_batch_timestamp if active.first_batch_timestamp != NO_TIMESTAMP else active.created_ms
        if (active.size_bytes + batch.size_bytes > self.config.segment_bytes
                or now_ms - rolling_timestamp > self.config.max_segment_ms
                or batch.last_offset - active.base_offset > RELATIVE_OFFSET_MAX):
            self.roll(now_ms)

    def roll(self, now_ms: int) -> LogSegment:
        """Close the active segment (fsynced) and start a new one at the log end offset."""
        old = self.active_segment
        if old.size_bytes == 0:
            return old
        old.time_index_final_entry()
        old.flush(fsync=False)
        old.close()
        self._advance_recovery_point()
        self._rolled_flushes.append(ROLLED_SEGMENT_FLUSHER.submit(
            fsync_files, [old.log_path, old.offset_index.path, old.time_index.path], old.next_offset))
        self._take_snapshot()
        segment = LogSegment.create(self.dir_path, self.log_end_offset,
                                    index_interval_bytes=self.config.index_interval_bytes, created_ms=now_ms)
        segment.next_offset = old.next_offset
        self.segments.append(segment)
        return segment

    # ------------------------------------------------------------ reading

    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1)

    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> LogReadInfo:
        """Whole batches from the one holding `fetch_offset`, up to `max_bytes` (but at least
        one batch when `min_one_batch`, KIP-74), never a batch with an offset >= `max_offset`
        (the high watermark for consumers, VIS-1). A batch may start before `fetch_offset`;
        the client skips those records. Reads within one segment, as Kafka does."""
        if not self._log_start_offset <= fetch_offset <= self.log_end_offset:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {fetch_offset} is outside "
                             f"[{self._log_start_offset}, {self.log_end_offset}]")
        limit = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        empty = LogReadInfo(b"", -1, self._log_start_offset, self.log_end_offset)
        for segment in self.segments[self._segment_index_for(fetch_offset):]:
            found = segment.find_batch(fetch_offset)
            if found is None:
                continue
            start, first = found
            end = start
            for position, batch in segment.batches_from(start, headers_only=True):
                if batch.last_offset >= limit:
                    break
                if position + batch.size_bytes - start > max_bytes and not (min_one_batch and position == start):
                    break
                end = position + batch.size_bytes
            if end == start:
                return empty
            first_offset = first.base_offset if isinstance(first, RecordBatch) else first.offset
            return LogReadInfo(segment.read_bytes(start, end - start), first_offset,
                               self._log_start_offset, self.log_end_offset)
        return empty

    def _batches_from(self, offset: int) -> Iterator[Batch]:
        """Every batch whose last offset is >= `offset`, across segments."""
        for segment in self.segments[self._segment_index_for(offset):]:
            found = segment.find_batch(offset)
            if found is None:
                continue
            for _, batch in segment.batches_from(found[0]):
                yield batch

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after the log start offset whose
        timestamp is >= `timestamp_ms` (ListOffsets by time); None if there is none."""
        return first_record_at_or_after(self.segments, self._log_start_offset, timestamp_ms)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding the largest timestamp (ListOffsets
        MAX_TIMESTAMP, KIP-734); None for an empty log."""
        max_timestamp = max(segment.max_timestamp for segment in self.segments)
        return None if max_timestamp == NO_TIMESTAMP else self.offset_for_timestamp(max_timestamp)

    # ------------------------------------------------------------ deleting

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to `offset` (at most the log end
        offset) and delete the segments wholly below it. Returns the new log start offset."""
        if not 0 <= offset <= self.log_end_offset:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"cannot delete records before {offset}: "
                             f"log end offset is {self.log_end_offset}")
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self._write_atomically(LOG_START_OFFSET_FILE, str(offset).encode())
            self._delete_segments(sum(1 for later in self.segments[1:] if later.base_offset <= offset))
        return self._log_start_offset

    def enforce_retention(self, now_ms: int, *, high_watermark: int) -> int:
        """Delete the oldest segments past retention.ms (by their largest timestamp) or over
        retention.bytes, never the active one and never one holding an offset at or above the
        high watermark: what no consumer could read yet is not retention's to remove (RET-1).
        Returns the number of segments deleted."""
        count = segments_past_retention(self.segments, self.config, now_ms, high_watermark)
        self._delete_segments(count)
        if count:
            log.info("%s: %d segment(s) deleted past retention.ms=%d or retention.bytes=%d; log start offset %d",
                     self.dir_path, count, self.config.retention_ms, self.config.retention_bytes,
                     self._log_start_offset)
        return count

    def _delete_segments(self, count: int) -> None:
        """Delete the `count` oldest segments (never the active one) at once; Kafka would rename
        them *.deleted and remove them after file.delete.delay.ms."""
        assert 0 <= count < len(self.segments)
        if count == 0:
            return
        for segment in self.segments[:count]:
            segment.delete_files()
        del self.segments[:count]
        if self.segments[0].base_offset > self._log_start_offset:
            self._log_start_offset = self.segments[0].base_offset
            self._write_atomically(LOG_START_OFFSET_FILE, str(self._log_start_offset).encode())
        snapshots = snapshot_offsets(self.dir_path)
        for offset in snapshots[:-1]:  # keep the newest: it holds producers whose batches are gone
            if offset < self.segments[0].base_offset:
                os.remove(os.path.join(self.dir_path, segment_file_name(offset, SNAPSHOT_SUFFIX)))

    def replace_segments(self, old: list[LogSegment], cleaned: LogSegment) -> None:
        """Swap `cleaned` (written under CLEANED_SUFFIX, same base offset) in for the consecutive
        segments `old`, in the directory and in the segment list, as Kafka's replaceSegments
        does: renamed to `.swap` (the commit point: from here the next open completes the swap),
        the old segments deleted, then renamed to its final name."""
        assert cleaned.base_offset == old[0].base_offset and cleaned.file_suffix == CLEANED_SUFFIX
        cleaned.change_file_suffix(SWAP_SUFFIX)
        for segment in old:
            segment.delete_files()
        cleaned.change_file_suffix("")
        fsync_directory(self.dir_path)
        first = self.segments.index(old[0])
        assert self.segments[first : first + len(old)] == old
        self.segments[first : first + len(old)] = [cleaned]

    def truncate_to(self, offset: int) -> None:
        """Remove every batch with an offset >= `offset` (a follower diverging from its leader).
        The cut falls at a batch boundary; producer state is reloaded for the new end."""
        if offset >= self.log_end_offset:
            return
        assert offset >= self._log_start_offset, (offset, self._log_start_offset)
        keep = self._segment_index_for(offset)
        if self.segments[keep].base_offset >= offset and keep > 0:
            keep -= 1
        for segment in self.segments[keep + 1:]:
            segment.delete_files()
        del self.segments[keep + 1:]
        self.active_segment.truncate_to(offset)
        self._changed_since_flush = True
        self._recovery_point_after_truncation()
        if self.log_end_offset < self._log_start_offset:
            # the batch holding `offset` began below the log start: nothing readable is left.
            self.truncate_fully_and_start_at(self._log_start_offset)
            return
        for snapshot_offset in snapshot_offsets(self.dir_path):
            if snapshot_offset > self.log_end_offset:
                os.remove(os.path.join(self.dir_path, segment_file_name(snapshot_offset, SNAPSHOT_SUFFIX)))
        self._load_producer_state()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at `offset`, with no producer state: a follower
        whose log ends below its leader's log start can never fetch what lies between, so it
        starts over where the leader's log begins (Kafka's truncateFullyAndStartAt)."""
        assert offset >= 0, offset
        created_ms = self.active_segment.created_ms
        for segment in self.segments:
            segment.delete_files()
        for snapshot_offset in snapshot_offsets(self.dir_path):
            os.remove(os.path.join(self.dir_path, segment_file_name(snapshot_offset, SNAPSHOT_SUFFIX)))
        self.segments = [LogSegment.create(self.dir_path, offset, index_interval_bytes=self.config.index_interval_bytes,
                                           created_ms=created_ms)]
        self._log_start_offset = offset
        self._write_atomically(LOG_START_OFFSET_FILE, str(offset).encode())
        self._changed_since_flush = True
        self._recovery_point_after_truncation()
        self._load_producer_state()

    # ------------------------------------------------------------ lifecycle

    def flush(self, now_ms: int) -> None:
        """fsync the active segment and its indexes, unless nothing was appended or truncated
        since the last flush (a Raft node persists before every send, mostly with nothing new)."""
        if self._changed_since_flush:
            self.active_segment.flush(fsync=True)
            self._changed_since_flush = False
        self._unflushed_records = 0
        self._last_flush_ms = now_ms
        self._advance_recovery_point()

    def close(self) -> None:
        """Flush, snapshot producer state and write the clean-shutdown marker."""
        active = self.active_segment
        active.time_index_final_entry()
        active.flush(fsync=True)
        for flushed in self._rolled_flushes:
            flushed.result()  # the clean-shutdown marker vouches for every segment
        self._advance_recovery_point()
        for segment in self.segments:
            segment.close()
        self._take_snapshot()
        self._write_atomically(CLEAN_SHUTDOWN_FILE, b"")

    def delete(self) -> None:
        """Remove the partition's directory and everything in it."""
        for segment in self.segments:
            segment.close()
        shutil.rmtree(self.dir_path)


def fsync_files(paths: list[str], end_offset: int) -> int:
    """fsync each file that still exists (retention or compaction may have deleted it since);
    returns end_offset, the offset below which the files' records now are on disk."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return end_offset
