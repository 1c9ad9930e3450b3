"""IDM-1 and a client's epoch bumps: a duplicate whose copies carry different producer epochs.

An idempotent producer's retries are deduplicated by (producer id, producer epoch, sequence)
(KIP-98; KIP-360 for the epoch bump). librdkafka bumps its idempotent producer's epoch after an
OUT_OF_ORDER_SEQUENCE_NUMBER on later in-flight requests or after message timeouts, and
sends the records it still holds again with sequences that restart at 0 in the new epoch
(librdkafka issue 4953). A record stored in the old epoch and sent again in the new one is
a new record to every broker: no broker can deduplicate across producer epochs, so the
duplicate is the client's. A broker's own duplicate shows two copies with the SAME producer id,
epoch and sequence.

So each `duplicate` row (a value stored at two or more offsets of a partition) is judged by the
reference's segment files, when the run left them (node-*/<topic>-<partition>/*.log beside the
history or up to two folders above it; a foreign broker leaves none):

- duplicate-after-epoch-bump (IDM-1, allowed): every copy was written by one producer id, each
  in a different producer epoch. The row names each copy's offset, producer id, epoch and
  sequence.
- any other duplicate (same epoch, or no segment files) stays a `duplicate` (IDM-1, violation).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

ANOMALY = "duplicate-after-epoch-bump"
# a v2 record batch header (Kafka's DefaultRecordBatch), up to and including recordsCount
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
LOG_OVERHEAD_BYTES = 12    # baseOffset and batchLength, not counted in batchLength
FOLDERS_UP_MAX = 2         # a lanes run keeps its history at RUN/lanes/<lane>/, the nodes at RUN/


@dataclass(frozen=True)
class Writer:
    """Who wrote one stored record: the batch's producer id and epoch, and the record's sequence."""
    offset: int
    producer_id: int
    producer_epoch: int
    sequence: int


def read_batches(path: Path) -> list[tuple[int, int, int, int, int]]:
    """(base offset, last offset, producer id, producer epoch, base sequence) of each v2 batch of
    one segment file, in file order; a truncated tail ends the walk. Only the headers are read:
    a segment's records stay on disk."""
    size_bytes = path.stat().st_size
    batches, position = [], 0
    with path.open("rb") as segment:
        while position + BATCH_HEADER.size <= size_bytes:
            segment.seek(position)
            (base_offset, batch_length, _leader_epoch, magic, _crc, _attributes, last_offset_delta, _first_ts,
             _max_ts, producer_id, producer_epoch, base_sequence, _count) = BATCH_HEADER.unpack(
                segment.read(BATCH_HEADER.size))
            end = position + LOG_OVERHEAD_BYTES + batch_length
            if magic != 2 or batch_length < BATCH_HEADER.size - LOG_OVERHEAD_BYTES or end > size_bytes:
                break
            batches.append((base_offset, base_offset + last_offset_delta, producer_id, producer_epoch, base_sequence))
            position = end
    return batches


def segment_dirs(history_path: Path, topic: str, partition: int) -> list[Path]:
    """The reference nodes' folders of one partition, found beside the history or above it."""
    folder = history_path.parent
    for _ in range(FOLDERS_UP_MAX + 1):
        found = sorted(d for d in folder.glob(f"node-*/{topic}-{partition}") if d.is_dir())
        if found:
            return found
        folder = folder.parent
    return []


def writers(history_path: Path, topic: str, partition: int, offsets: list[int]) -> list[Writer] | None:
    """The writer of each offset, read from the first replica whose segments hold them all; None
    when no replica does (no segment files: a foreign broker)."""
    return _writers_in(_replica_batches(history_path, topic, partition), offsets)


def _replica_batches(history_path: Path, topic: str, partition: int) -> list[list[tuple[int, int, int, int, int]]]:
    """The batch headers of each replica of one partition (read_batches), in segment order."""
    return [[b for segment in sorted(directory.glob("*.log")) for b in read_batches(segment)]
            for directory in segment_dirs(history_path, topic, partition)]


def _writers_in(replicas: list[list[tuple[int, int, int, int, int]]], offsets: list[int]) -> list[Writer] | None:
    for batches in replicas:
        found = []
        for offset in offsets:
            batch = next((b for b in batches if b[0] <= offset <= b[1]), None)
            if batch is None:
                break
            base_offset, _, producer_id, producer_epoch, base_sequence = batch
            found.append(Writer(offset, producer_id, producer_epoch, base_sequence + offset - base_offset))
        else:
            return found
    return None


def explain(duplicates: list[dict], history_path: Path) -> set[tuple[str, int, int]]:
    """Turn each duplicate whose copies one producer wrote in different epochs into
    duplicate-after-epoch-bump (allowed); the (topic, partition, value) of each row changed. Each
    partition's segments are read once, however many of its values are duplicated."""
    bumped = set()
    replicas: dict[tuple[str, int], list] = {}
    for r in duplicates:
        where = (r["topic"], r["partition"])
        if where not in replicas:
            replicas[where] = _replica_batches(history_path, *where)
        copies = _writers_in(replicas[where], list(r["offsets"]))
        if not copies or len({c.producer_id for c in copies}) != 1 or copies[0].producer_id < 0 \
                or len({c.producer_epoch for c in copies}) != len(copies):
            continue
        named = "; ".join(f"offset {c.offset}: producer id {c.producer_id}, epoch {c.producer_epoch}, "
                          f"sequence {c.sequence}" for c in copies)
        r.update(anomaly=ANOMALY, violation=False,
                 detail=f"{r['detail']}: {named} (the client bumped its producer epoch and sent the record again, "
                        f"librdkafka issue 4953; no broker can deduplicate across producer epochs)")
        bumped.add((r["topic"], r["partition"], r["values"][0]))
    return bumped
