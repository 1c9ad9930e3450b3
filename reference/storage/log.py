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

Recovery: an open without the clean-shutdown marker rescans every segment from the recovery
point on: every batch's CRC and offsets are checked, the file is cut at the first torn or
corrupt batch, its indexes are rebuilt and every later segment is deleted: the log ends at the
cut. The recovery point (file `recovery-point`, Kafka keeps one per log directory in
recovery-point-offset-checkpoint) is the end of the newest rolled segment whose fsync has
completed, all older ones having completed before it: what lies below it reached the disk, so
a restart after a crash rescans only the segments after it, not a whole 100 GB log. A segment
whose index files are missing or malformed is rebuilt in any case. Producer state is loaded from the latest
snapshot and rebuilt from there by replaying batches (IDM-1). Before any of this, a swap of
cleaned segments (replace_segments, the cleaner's) cut short is finished or discarded.
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
from reference.protocol.records import NO_TIMESTAMP, RecordBatch, assign_offsets, iter_batches, recompress
from reference.protocol.validator import ValidatedBatch, ValidationRules, validate_batch
from reference.storage.config import LogConfig
from reference.storage.atomic import fsync_directory, replace_file
from reference.storage.producer_state import ProducerStateManager
from reference.storage.segment import RELATIVE_OFFSET_MAX, Batch, LogSegment, segment_file_name

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOG_START_OFFSET_FILE = "log-start-offset"
RECOVERY_POINT_FILE = "recovery-point"
SNAPSHOT_SUFFIX = ".snapshot"
CLEANED_SUFFIX = ".cleaned"  # a replacement segment being written (by the cleaner)
SWAP_SUFFIX = ".swap"  # a replacement segment committed, its old segments not yet all deleted
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

    def _load(self, now_ms: int) -> None:
        self._complete_or_discard_swaps()  # a compaction cut short
        clean_marker = os.path.join(self.dir_path, CLEAN_SHUTDOWN_FILE)
        clean_shutdown = os.path.exists(clean_marker)
        base_offsets = sorted(int(name[:-4]) for name in os.listdir(self.dir_path) if name.endswith(".log"))
        recovery_point = self._read_offset_file(RECOVERY_POINT_FILE)
        for position, base_offset in enumerate(base_offsets):
            segment = LogSegment(self.dir_path, base_offset, index_interval_bytes=self.config.index_interval_bytes,
                                 created_ms=now_ms)
            below_recovery_point = position + 1 < len(base_offsets) and base_offsets[position + 1] <= recovery_point
            on_disk = clean_shutdown or below_recovery_point
            cut_bytes = 0 if segment.load() and on_disk else segment.recover()
            self.segments.append(segment)
            if cut_bytes:
                later = base_offsets[position + 1:]
                log.warning("%s: cut %d bytes of torn or corrupt batches at position %d of %s, log end offset %d; "
                            "%d later segment(s) deleted", self.dir_path, cut_bytes, segment.size_bytes,
                            segment.log_path, segment.next_offset, len(later))
                self._delete_later_segments(later)
                break
        if not self.segments:
            self.segments.append(LogSegment.create(self.dir_path, 0, index_interval_bytes=self.config.index_interval_bytes,
                                                   created_ms=now_ms))
        self._log_start_offset = max(self.segments[0].base_offset, self._read_offset_file(LOG_START_OFFSET_FILE))
        self._recovery_point = min(recovery_point, self.active_segment.base_offset)
        self._load_producer_state()
        if clean_shutdown:
            os.remove(clean_marker)  # a crash from here on must trigger recovery

    def _complete_or_discard_swaps(self) -> None:
        """Before the segments are opened: drop `.cleaned` files (a swap that had not committed)
        and finish every committed `.log.swap`: delete the old segments it replaces (base offsets
        from its own up to its next offset), then give it its final name. Its indexes are
        deleted and rebuilt."""
        names = os.listdir(self.dir_path)
        for name in names:
            if name.endswith(CLEANED_SUFFIX) or (name.endswith(SWAP_SUFFIX) and not name.endswith(".log" + SWAP_SUFFIX)):
                os.remove(os.path.join(self.dir_path, name))
        swap_bases = sorted(int(name.split(".")[0]) for name in names if name.endswith(".log" + SWAP_SUFFIX))
        for base_offset in swap_bases:
            swapped = LogSegment(self.dir_path, base_offset, index_interval_bytes=self.config.index_interval_bytes,
                                 created_ms=0, file_suffix=SWAP_SUFFIX)
            next_offset = base_offset + 1
            for _, batch in swapped.batches_from(0):
                next_offset = max(next_offset, batch.next_offset)
            for name in os.listdir(self.dir_path):
                stem, _, extension = name.partition(".")
                if extension in ("log", "index", "timeindex") and stem.isdigit() and base_offset <= int(stem) < next_offset:
                    os.remove(os.path.join(self.dir_path, name))
            os.replace(swapped.log_path, os.path.join(self.dir_path, f"{base_offset:020d}.log"))
        if swap_bases:
            fsync_directory(self.dir_path)

    def _delete_later_segments(self, base_offsets: list[int]) -> None:
        """After a cut, the log ends there, as Kafka's recovery ends it: the segments after the
        cut one would leave a gap of offsets, and with it records no replica can be asked for."""
        for base_offset in base_offsets:
            LogSegment(self.dir_path, base_offset, index_interval_bytes=self.config.index_interval_bytes,
                       created_ms=0).delete_files()

    def _read_offset_file(self, name: str) -> int:
        """An offset kept in a file of its own; 0 when there is none (or it is unreadable)."""
        try:
            with open(os.path.join(self.dir_path, name)) as f:
                return int(f.read().strip())
        except (FileNotFoundError, ValueError):
            return 0

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

    def _write_atomically(self, name: str, data: bytes) -> None:
        replace_file(os.path.join(self.dir_path, name), data)

    def _snapshot_offsets(self) -> list[int]:
        return sorted(int(name[: -len(SNAPSHOT_SUFFIX)]) for name in os.listdir(self.dir_path)
                      if name.endswith(SNAPSHOT_SUFFIX))

    def _load_producer_state(self) -> None:
        """Latest snapshot at or below the log end offset, then replay the batches after it.
        Replay starts at the first segment, not the log start offset: batches below the log
        start that are still on disk still tell which sequences a producer has written."""
        self.producer_state = ProducerStateManager()
        replay_from = self.segments[0].base_offset
        for offset in reversed(self._snapshot_offsets()):
            path = os.path.join(self.dir_path, segment_file_name(offset, SNAPSHOT_SUFFIX))
            if offset > self.log_end_offset:
                os.remove(path)
                continue
            try:
                with open(path, "rb") as f:
                    self.producer_state = ProducerStateManager.from_snapshot(f.read())
            except (ValueError, KeyError, TypeError) as e:
                log.warning("%s: ignoring unreadable producer snapshot %s: %s", self.dir_path, path, e)
                os.remove(path)
                continue
            replay_from = max(offset, self.segments[0].base_offset)
            break
        for batch in self._batches_from(replay_from):
            if batch.producer_id >= 0 and batch.base_offset >= replay_from:
                self.producer_state.update(batch)

    def _take_snapshot(self) -> None:
        self._write_atomically(segment_file_name(self.log_end_offset, SNAPSHOT_SUFFIX), self.producer_state.to_snapshot())

    # ------------------------------------------------------------ appending

    @property
    def validation_rules(self) -> ValidationRules:
        """What this log's topic configs ask of a produced batch (read on each append: configs change)."""
        config = self.config
        return ValidationRules(config.max_message_bytes, config.compact, config.log_append_time,
                               config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms)

    def append_as_leader(self, records: bytes | memoryview | ValidatedBatch, leader_epoch: int, now_ms: int,
                         origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        """Validate a Produce request's records (or a coordinator's transaction marker) for
        this partition, check producer state, assign offsets and append. Raises KafkaError (see
        records.validate_produce, protocol/validator.py and producer_state). Records validated
        ahead (a ValidatedBatch, under the rules this log still has) are not walked again. A
        duplicate idempotent batch is not appended; its original offsets are returned."""
        if origin is AppendOrigin.COORDINATOR:
            batch = self._check_marker(records)
        else:
            rules = self.validation_rules
            if not (isinstance(records, ValidatedBatch) and records.rules == rules):
                records = validate_batch(records.records if isinstance(records, ValidatedBatch) else records,
                                         rules, now_ms)
            batch, records_body = records.batch_and_body()
            target = self.config.target_compression
            if target is not None and target != batch.compression:
                batch = self._recompressed(batch, records_body, target)
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

    def _recompressed(self, batch: RecordBatch, records_body: bytes, target: int) -> RecordBatch:
        """The batch in the topic's compression.type codec, as Kafka's LogValidator rebuilds
        it; the rebuilt batch must still fit max.message.bytes (MESSAGE_TOO_LARGE)."""
        rebuilt = RecordBatch(recompress(batch, records_body, target, self.config.compression_level))
        if rebuilt.size_bytes > self.config.max_message_bytes:
            raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE, f"the batch recompressed as compression.type="
                             f"{self.config.compression_type} is {rebuilt.size_bytes} bytes, over "
                             f"max.message.bytes={self.config.max_message_bytes}")
        return rebuilt

    def _check_marker(self, records: bytes | memoryview) -> RecordBatch:
        """A transaction marker: one transactional control batch with one record, CRC valid,
        from a producer epoch no older than the one this partition knows (INVALID_PRODUCER_EPOCH)."""
        batches = list(iter_batches(records))
        assert len(batches) == 1 and sum(b.size_bytes for b in batches) == len(records), "one marker batch"
        (batch,) = batches
        assert isinstance(batch, RecordBatch) and batch.crc_is_valid(), "a v2 marker batch with a valid CRC"
        assert batch.is_control and batch.is_transactional and batch.records_count == 1, "a control batch"
        known = self.producer_state.producers.get(batch.producer_id)
        if known is not None and batch.producer_epoch < known.producer_epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH, f"marker of producer {batch.producer_id} epoch "
                             f"{batch.producer_epoch} is older than epoch {known.producer_epoch}")
        return batch

    def append_as_follower(self, records: bytes | memoryview, now_ms: int) -> LogAppendInfo:
        """Append batches fetched from the partition leader as they are: the leader's offsets
        and partition leader epochs are kept. Offsets must only increase, from the log end
        offset on, and every CRC must be valid (KafkaError CORRUPT_MESSAGE otherwise); gaps are
        fine, since a compacted leader keeps its records' original offsets. Nothing is
        deduplicated: the leader already decided what the log holds."""
        batches = list(iter_batches(records))
        if sum(batch.size_bytes for batch in batches) != len(records):
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "fetched records do not form whole batches")
        first_offset = next_offset = self.log_end_offset
        for batch in batches:  # all checked before any is appended
            if not isinstance(batch, RecordBatch) or not batch.crc_is_valid():
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "a fetched batch is not a v2 batch with a valid CRC")
            if batch.base_offset < next_offset:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"fetched batch starts at {batch.base_offset}, "
                                 f"below offset {next_offset}")
            next_offset = batch.next_offset
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
        for segment in self.segments:
            if segment.max_timestamp < timestamp_ms:
                continue
            start = max(segment.time_index.lookup_before(timestamp_ms), self._log_start_offset)
            found = segment.find_batch(start)
            if found is None:
                continue
            for _, batch in segment.batches_from(found[0]):
                if batch.max_timestamp < timestamp_ms:
                    continue
                for record in batch.records():
                    if record.offset >= self._log_start_offset and record.timestamp >= timestamp_ms:
                        return record.offset, record.timestamp
        return None

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
        if "delete" not in self.config.cleanup_policy:
            return 0
        inactive = self.segments[:-1]
        # A segment is eligible only when everything in it is committed: its successor starts at or below the HW.
        committed = 0
        while committed < len(inactive) and self.segments[committed + 1].base_offset <= high_watermark:
            committed += 1
        inactive = inactive[:committed]
        count = 0
        if self.config.retention_ms >= 0:
            while count < len(inactive) and now_ms - inactive[count].max_timestamp > self.config.retention_ms:
                count += 1
        if self.config.retention_bytes >= 0:
            excess_bytes = self.size_bytes - self.config.retention_bytes
            by_size = 0
            while by_size < len(inactive) and excess_bytes - inactive[by_size].size_bytes >= 0:
                excess_bytes -= inactive[by_size].size_bytes
                by_size += 1
            count = max(count, by_size)
        self._delete_segments(count)
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
        snapshots = self._snapshot_offsets()
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
        for snapshot_offset in self._snapshot_offsets():
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
        for snapshot_offset in self._snapshot_offsets():
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
