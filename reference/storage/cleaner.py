"""Log compaction (cleanup.policy=compact): keep the latest record of every key at its original offset.

One pass of Kafka's log cleaner over one log (RET-1: offsets never change and are never reused):

1. The dirty section runs from the cleaner checkpoint (the first offset not cleaned yet) to the
   first uncleanable offset: the base of the active segment, of the segment holding the high
   watermark, or of the first segment with records younger than min.compaction.lag.ms. A pass
   runs when the dirty bytes are at least min.cleanable.dirty.ratio of the bytes up to there,
   or when a delete horizon set by an earlier pass has come (tombstones are due).
2. An offset map, key -> latest offset, is built over the dirty section.
3. Every segment below the first uncleanable offset is rewritten, in groups whose sizes add up
   to at most segment.bytes, keeping a record only when it has a key, the map holds no later
   offset for its key, and it is not a tombstone past its batch's delete horizon. A batch with
   nothing removed is copied as it is; otherwise it is rebuilt with its records at their
   original offsets (records.rebuild_batch). A batch left empty is dropped, except the last
   batch of an idempotent producer, which stays as an empty batch so the producer's epoch and
   sequence survive.
4. Tombstones (null values) are kept delete.retention.ms after the pass that first saw them:
   that pass writes the delete horizon into the batch (KIP-534, attribute bit 6), and a later
   pass at or after the horizon drops them.

A cleaned group is written under the `.cleaned` suffix and handed to `Log.replace_segments`,
which swaps it in by renames as Kafka's replaceSegments does (and finishes or discards a swap
cut short when the log is next opened), so a crash leaves each group either as it was or as
cleaned, never half of each.

Transactions are not handled yet: transactional and control batches are copied untouched and
their keys do not enter the offset map (aborted data must not hide committed values), so they
are only compacted once the transaction coordinator can tell aborted from committed.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from reference.protocol.records import NO_TIMESTAMP, RecordBatch, rebuild_batch
from reference.storage.atomic import replace_file
from reference.storage.log import Log
from reference.storage.log_loader import CLEANED_SUFFIX
from reference.storage.segment import RELATIVE_OFFSET_MAX, Batch, LogSegment

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
# Kafka bounds the offset map by log.cleaner.dedupe.buffer.size and cleans a long dirty section
# in several passes; kspec bounds it by keys, checked between segments.
OFFSET_MAP_KEYS_MAX = 1_000_000
NO_DELETE_HORIZON = -1


@dataclass(frozen=True)
class CleanerCheckpoint:
    """What a pass leaves for the next: where the dirty section starts, and the earliest delete
    horizon written into a batch that still holds tombstones (NO_DELETE_HORIZON when none)."""

    first_dirty_offset: int = 0
    delete_horizon_ms: int = NO_DELETE_HORIZON

    @classmethod
    def read(cls, dir_path: str) -> CleanerCheckpoint:
        try:
            with open(os.path.join(dir_path, CHECKPOINT_FILE)) as f:
                document = json.load(f)
            return cls(int(document["first_dirty_offset"]), int(document["delete_horizon_ms"]))
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return cls()

    def write(self, dir_path: str) -> None:
        replace_file(os.path.join(dir_path, CHECKPOINT_FILE), json.dumps(
            {"first_dirty_offset": self.first_dirty_offset, "delete_horizon_ms": self.delete_horizon_ms}).encode())


@dataclass(frozen=True)
class CleanerStats:
    first_dirty_offset: int
    first_uncleanable_offset: int
    segments_read: int
    segments_written: int
    bytes_read: int
    bytes_written: int
    records_read: int
    records_kept: int


def clean(log: Log, now_ms: int, *, high_watermark: int | None = None, force: bool = False) -> CleanerStats | None:
    """One cleaning pass over `log` if it is due (or `force`); None when there was nothing to do.
    Records at or above `high_watermark` (default: the log end) are never cleaned. The three
    steps run here one after the other; a broker runs `build` on a thread of its own instead
    (reference/node/broker.py), so a long pass never holds the event loop."""
    plan = plan_pass(log, now_ms, high_watermark=high_watermark, force=force)
    if plan is None:
        return None
    result = build(plan)
    commit(log, plan, result)  # nothing changed the log since the plan: every group is swapped in
    return _stats(plan, result)


@dataclass
class CleaningPlan:
    """What one pass will clean, decided on the log's own thread from its current state."""

    dir_path: str
    first_dirty: int
    first_uncleanable: int
    dirty: list[LogSegment]
    cleanable: list[LogSegment]
    producer_last_offsets: set[int]
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    index_interval_bytes: int


@dataclass
class CleaningResult:
    """What `build` wrote: each group of old segments with the cleaned segment replacing it."""

    first_uncleanable: int
    replacements: list[tuple[list[LogSegment], LogSegment]]  # those not swapped in yet
    pass_: _CleaningPass
    segments_swapped: int = 0
    groups_swapped: int = 0


def plan_pass(log: Log, now_ms: int, *, high_watermark: int | None = None, force: bool = False) -> CleaningPlan | None:
    """Step 1, cheap, on the log's thread: the dirty section and whether a pass is due."""
    assert log.config.compact, f"{log.dir_path}: cleanup.policy={log.config.cleanup_policy} does not compact"
    checkpoint = CleanerCheckpoint.read(log.dir_path)
    first_dirty = checkpoint.first_dirty_offset
    if not log.log_start_offset <= first_dirty <= log.log_end_offset:
        first_dirty = log.log_start_offset  # the log was truncated or its start moved: clean it all again
    first_uncleanable = _first_uncleanable_offset(log, now_ms, log.log_end_offset if high_watermark is None
                                                  else high_watermark)
    cleanable = [segment for segment in log.segments if segment.base_offset < first_uncleanable]
    assert log.active_segment not in cleanable
    dirty = [segment for segment in cleanable if segment.next_offset > first_dirty]
    dirty_bytes = sum(segment.size_bytes for segment in dirty)
    total_bytes = sum(segment.size_bytes for segment in cleanable)
    tombstones_due = checkpoint.delete_horizon_ms != NO_DELETE_HORIZON and now_ms >= checkpoint.delete_horizon_ms
    # KIP-354: a dirty record older than max.compaction.lag.ms is cleaned whatever the dirty ratio.
    overdue = bool(dirty) and dirty[0].first_batch_timestamp != NO_TIMESTAMP and (
        now_ms - dirty[0].first_batch_timestamp > log.config.max_compaction_lag_ms)
    if not (tombstones_due or dirty and (force or overdue
                                         or dirty_bytes >= log.config.min_cleanable_dirty_ratio * total_bytes)):
        return None
    return CleaningPlan(log.dir_path, first_dirty, first_uncleanable, dirty, cleanable,
                        {entry.last_offset for entry in log.producer_state.producers.values()}, now_ms,
                        log.config.delete_retention_ms, log.config.segment_bytes, log.config.index_interval_bytes)


def build(plan: CleaningPlan) -> CleaningResult:
    """Step 2, the CPU- and I/O-heavy part, safe on another thread: it reads only rolled
    segments (never written again) and writes only new `.cleaned` files."""
    first_uncleanable = plan.first_uncleanable
    offset_map: dict[bytes, int] = {}
    for position, segment in enumerate(plan.dirty):
        if position and len(offset_map) >= OFFSET_MAP_KEYS_MAX:  # the rest waits for the next pass
            first_uncleanable = segment.base_offset
            break
        for _, batch in segment.batches_from(0):
            if batch.last_offset >= plan.first_dirty and _compactable(batch):
                for record in batch.records():
                    if record.key is not None:
                        offset_map[record.key] = record.offset
    cleanable = [segment for segment in plan.cleanable if segment.base_offset < first_uncleanable]
    pass_ = _CleaningPass(offset_map, plan.producer_last_offsets, plan.now_ms, plan.now_ms + plan.delete_retention_ms)
    replacements = [(group, pass_.clean_into(group, plan.index_interval_bytes))
                    for group in _group_segments_by_size(cleanable, plan.segment_bytes)]
    return CleaningResult(first_uncleanable, replacements, pass_)


def commit(log: Log, plan: CleaningPlan, result: CleaningResult, *, groups_max: int | None = None) -> bool:
    """Step 3, on the log's thread: swap up to `groups_max` (default: all) cleaned segments in,
    and once none is left write the checkpoint; True when the pass is over (committed or
    dropped), False when groups remain for another call (each swap renames, deletes and fsyncs
    files: spread over calls, they hold the loop briefly each time). A pass one of whose groups
    changed meanwhile (retention deleted a segment, a truncation cut it) is dropped: the next
    pass starts from the log as it is then."""
    if any(not all(segment in log.segments for segment in group) for group, _ in result.replacements):
        for _, cleaned in result.replacements:
            cleaned.delete_files()
        result.replacements.clear()
        return True
    swapping = result.replacements[:groups_max]
    for group, cleaned in swapping:
        log.replace_segments(group, cleaned)
        result.groups_swapped += 1
        result.segments_swapped += len(group)
    del result.replacements[:len(swapping)]
    if result.replacements:
        return False
    CleanerCheckpoint(result.first_uncleanable, result.pass_.earliest_delete_horizon_ms).write(log.dir_path)
    return True


def _stats(plan: CleaningPlan, result: CleaningResult) -> CleanerStats:
    pass_ = result.pass_
    return CleanerStats(plan.first_dirty, result.first_uncleanable, result.segments_swapped, result.groups_swapped,
                        pass_.bytes_read, pass_.bytes_written, pass_.records_read, pass_.records_kept)


def _first_uncleanable_offset(log: Log, now_ms: int, high_watermark: int) -> int:
    """The base offset of the first segment that must not be cleaned yet."""
    for segment in log.segments:
        holds_high_watermark = segment.next_offset > high_watermark
        too_young = log.config.min_compaction_lag_ms > 0 and segment.max_timestamp != NO_TIMESTAMP and (
            now_ms - segment.max_timestamp < log.config.min_compaction_lag_ms)
        if segment is log.active_segment or holds_high_watermark or too_young:
            return segment.base_offset
    raise AssertionError("the active segment is always uncleanable")


def _compactable(batch: Batch) -> bool:
    """Batches whose records the cleaner may drop or use to drop others (see the module doc)."""
    return isinstance(batch, RecordBatch) and not batch.is_transactional and not batch.is_control


def _group_segments_by_size(segments: list[LogSegment], segment_bytes: int) -> list[list[LogSegment]]:
    """Consecutive segments whose sizes add up to at most segment.bytes and whose offsets fit
    one segment's relative index (Kafka's groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    for segment in segments:
        group = groups[-1] if groups else None
        if (group and sum(s.size_bytes for s in group) + segment.size_bytes <= segment_bytes
                and segment.next_offset - 1 - group[0].base_offset <= RELATIVE_OFFSET_MAX):
            group.append(segment)
        else:
            groups.append([segment])
    return groups


class _CleaningPass:
    """The retention rule of one pass, applied batch by batch, with its counters."""

    def __init__(self, offset_map: dict[bytes, int], producer_last_offsets: set[int], now_ms: int,
                 new_delete_horizon_ms: int) -> None:
        self.offset_map = offset_map
        self.producer_last_offsets = producer_last_offsets
        self.now_ms = now_ms
        self.new_delete_horizon_ms = new_delete_horizon_ms
        self.earliest_delete_horizon_ms = NO_DELETE_HORIZON
        self.bytes_read = self.bytes_written = self.records_read = self.records_kept = 0

    def clean_into(self, group: list[LogSegment], index_interval_bytes: int) -> LogSegment:
        """Write the kept records of `group` into one new segment under the `.cleaned` suffix."""
        cleaned = LogSegment.create(group[0].dir_path, group[0].base_offset, index_interval_bytes=index_interval_bytes,
                                    created_ms=group[-1].created_ms, file_suffix=CLEANED_SUFFIX)
        for segment in group:
            for _, batch in segment.batches_from(0):
                self.bytes_read += batch.size_bytes
                kept = self.filter_batch(batch)
                if kept is not None:
                    cleaned.append(kept)
                    self.bytes_written += kept.size_bytes
        cleaned.time_index_final_entry()
        cleaned.flush(fsync=True)
        cleaned.close()
        return cleaned

    def filter_batch(self, batch: Batch) -> Batch | None:
        """The batch as it is, rebuilt with fewer records, or None when nothing of it stays."""
        if not _compactable(batch):
            return batch
        records = batch.records()
        horizon_ms = batch.delete_horizon_ms
        tombstones_due = horizon_ms is not None and self.now_ms >= horizon_ms
        kept = [record for record in records
                if record.key is not None and self.offset_map.get(record.key, record.offset) <= record.offset
                and not (record.value is None and tombstones_due)]
        self.records_read += len(records)
        self.records_kept += len(kept)
        holds_tombstones = any(record.value is None for record in kept)
        if holds_tombstones and horizon_ms is None:
            horizon_ms = self.new_delete_horizon_ms  # KIP-534: the first pass that sees a tombstone sets it
        if holds_tombstones:
            self.earliest_delete_horizon_ms = min(
                horizon_ms, self.earliest_delete_horizon_ms if self.earliest_delete_horizon_ms >= 0 else horizon_ms)
        if len(kept) == len(records) and horizon_ms == batch.delete_horizon_ms:
            return batch
        if not kept and not (batch.producer_id >= 0 and batch.last_offset in self.producer_last_offsets):
            return None
        return RecordBatch(rebuild_batch(batch, kept, delete_horizon_ms=horizon_ms if holds_tombstones else None))
