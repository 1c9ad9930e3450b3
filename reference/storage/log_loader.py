"""Opening a partition's log directory (Kafka's LogLoader): finish or discard a swap of
cleaned segments cut short, load the segments, recovering those a crash may have torn, and
load the producer state.

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

import logging
import os
from typing import Callable, Iterator

from reference.storage.atomic import fsync_directory
from reference.storage.config import LogConfig
from reference.storage.producer_state import ProducerStateManager
from reference.storage.segment import Batch, LogSegment, segment_file_name

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOG_START_OFFSET_FILE = "log-start-offset"
RECOVERY_POINT_FILE = "recovery-point"
SNAPSHOT_SUFFIX = ".snapshot"
CLEANED_SUFFIX = ".cleaned"  # a replacement segment being written (by the cleaner)
SWAP_SUFFIX = ".swap"  # a replacement segment committed, its old segments not yet all deleted

log = logging.getLogger("reference.storage.log")


def read_offset_file(dir_path: str, name: str) -> int:
    """An offset kept in a file of its own; 0 when there is none (or it is unreadable)."""
    try:
        with open(os.path.join(dir_path, name)) as f:
            return int(f.read().strip())
    except (FileNotFoundError, ValueError):
        return 0


def complete_or_discard_swaps(dir_path: str, config: LogConfig) -> None:
    """Before the segments are opened: drop `.cleaned` files (a swap that had not committed)
    and finish every committed `.log.swap`: delete the old segments it replaces (base offsets
    from its own up to its next offset), then give it its final name. Its indexes are
    deleted and rebuilt."""
    names = os.listdir(dir_path)
    for name in names:
        if name.endswith(CLEANED_SUFFIX) or (name.endswith(SWAP_SUFFIX) and not name.endswith(".log" + SWAP_SUFFIX)):
            os.remove(os.path.join(dir_path, name))
    swap_bases = sorted(int(name.split(".")[0]) for name in names if name.endswith(".log" + SWAP_SUFFIX))
    for base_offset in swap_bases:
        swapped = LogSegment(dir_path, base_offset, index_interval_bytes=config.index_interval_bytes,
                             created_ms=0, file_suffix=SWAP_SUFFIX)
        next_offset = base_offset + 1
        for _, batch in swapped.batches_from(0):
            next_offset = max(next_offset, batch.next_offset)
        for name in os.listdir(dir_path):
            stem, _, extension = name.partition(".")
            if extension in ("log", "index", "timeindex") and stem.isdigit() and base_offset <= int(stem) < next_offset:
                os.remove(os.path.join(dir_path, name))
        os.replace(swapped.log_path, os.path.join(dir_path, f"{base_offset:020d}.log"))
    if swap_bases:
        fsync_directory(dir_path)


def load_segments(dir_path: str, config: LogConfig, now_ms: int, recovery_point: int,
                  clean_shutdown: bool) -> list[LogSegment]:
    """The directory's segments in offset order (one empty segment for a new log). Without a
    clean shutdown, those from the recovery point on are rescanned; at the first cut the log
    ends, as Kafka's recovery ends it: the segments after the cut one would leave a gap of
    offsets, and with it records no replica can be asked for, so they are deleted."""
    segments = []
    base_offsets = sorted(int(name[:-4]) for name in os.listdir(dir_path) if name.endswith(".log"))
    for position, base_offset in enumerate(base_offsets):
        segment = LogSegment(dir_path, base_offset, index_interval_bytes=config.index_interval_bytes,
                             created_ms=now_ms)
        below_recovery_point = position + 1 < len(base_offsets) and base_offsets[position + 1] <= recovery_point
        on_disk = clean_shutdown or below_recovery_point
        cut_bytes = 0 if segment.load() and on_disk else segment.recover()
        segments.append(segment)
        if cut_bytes:
            later = base_offsets[position + 1:]
            log.warning("%s: cut %d bytes of torn or corrupt batches at position %d of %s, log end offset %d; "
                        "%d later segment(s) deleted", dir_path, cut_bytes, segment.size_bytes,
                        segment.log_path, segment.next_offset, len(later))
            for later_base_offset in later:
                LogSegment(dir_path, later_base_offset, index_interval_bytes=config.index_interval_bytes,
                           created_ms=0).delete_files()
            break
    if not segments:
        segments.append(LogSegment.create(dir_path, 0, index_interval_bytes=config.index_interval_bytes,
                                          created_ms=now_ms))
    return segments


def snapshot_offsets(dir_path: str) -> list[int]:
    return sorted(int(name[: -len(SNAPSHOT_SUFFIX)]) for name in os.listdir(dir_path)
                  if name.endswith(SNAPSHOT_SUFFIX))


def load_producer_state(dir_path: str, first_segment_offset: int, log_end_offset: int,
                        batches_from: Callable[[int], Iterator[Batch]]) -> ProducerStateManager:
    """Latest snapshot at or below the log end offset, then replay the batches after it.
    Replay starts at the first segment, not the log start offset: batches below the log
    start that are still on disk still tell which sequences a producer has written."""
    producer_state = ProducerStateManager()
    replay_from = first_segment_offset
    for offset in reversed(snapshot_offsets(dir_path)):
        path = os.path.join(dir_path, segment_file_name(offset, SNAPSHOT_SUFFIX))
        if offset > log_end_offset:
            os.remove(path)
            continue
        try:
            with open(path, "rb") as f:
                producer_state = ProducerStateManager.from_snapshot(f.read())
        except (ValueError, KeyError, TypeError) as e:
            log.warning("%s: ignoring unreadable producer snapshot %s: %s", dir_path, path, e)
            os.remove(path)
            continue
        replay_from = max(offset, first_segment_offset)
        break
    for batch in batches_from(replay_from):
        if batch.producer_id >= 0 and batch.base_offset >= replay_from:
            producer_state.update(batch)
    return producer_state
