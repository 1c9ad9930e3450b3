"""Which of a log's segments retention removes, and the first record at or after a time
(ListOffsets): both read the segments' timestamps (Kafka's UnifiedLog
deleteRetentionMsBreachedSegments, deleteRetentionSizeBreachedSegments, fetchOffsetByTimestamp)."""
from __future__ import annotations

from reference.storage.config import LogConfig
from reference.storage.segment import LogSegment


def segments_past_retention(segments: list[LogSegment], config: LogConfig, now_ms: int, high_watermark: int) -> int:
    """How many of the oldest segments are past retention.ms (by their largest timestamp) or
    over retention.bytes: never the active one and never one holding an offset at or above the
    high watermark, since what no consumer could read yet is not retention's to remove (RET-1)."""
    if "delete" not in config.cleanup_policy:
        return 0
    inactive = segments[:-1]
    # A segment is eligible only when everything in it is committed: its successor starts at or below the HW.
    committed = 0
    while committed < len(inactive) and segments[committed + 1].base_offset <= high_watermark:
        committed += 1
    inactive = inactive[:committed]
    count = 0
    if config.retention_ms >= 0:
        while count < len(inactive) and now_ms - inactive[count].max_timestamp > config.retention_ms:
            count += 1
    if config.retention_bytes >= 0:
        excess_bytes = sum(segment.size_bytes for segment in segments) - config.retention_bytes
        by_size = 0
        while by_size < len(inactive) and excess_bytes - inactive[by_size].size_bytes >= 0:
            excess_bytes -= inactive[by_size].size_bytes
            by_size += 1
        count = max(count, by_size)
    return count


def first_record_at_or_after(segments: list[LogSegment], log_start_offset: int,
                             timestamp_ms: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at or after the log start offset whose timestamp
    is >= `timestamp_ms`, found through each segment's time index; None if there is none."""
    for segment in segments:
        if segment.max_timestamp < timestamp_ms:
            continue
        start = max(segment.time_index.lookup_before(timestamp_ms), log_start_offset)
        found = segment.find_batch(start)
        if found is None:
            continue
        for _, batch in segment.batches_from(found[0]):
            if batch.max_timestamp < timestamp_ms:
                continue
            for record in batch.records():
                if record.offset >= log_start_offset and record.timestamp >= timestamp_ms:
                    return record.offset, record.timestamp
    return None
