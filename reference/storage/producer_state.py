"""Idempotent producer state for one partition: who wrote what, by producer id and sequence.

For each producer id the leader keeps the producer epoch and the metadata of its last five
batches (first/last sequence and offset), which is what lets a retried batch be recognised
(IDM-1). `check_append` decides on a new idempotent batch before it is appended:

- a batch equal to one of the last five of the same epoch is a duplicate: it is not appended
  and the producer is told the original offsets with no error (Kafka since 1.0; the 0.11
  broker answered DUPLICATE_SEQUENCE_NUMBER);
- an epoch lower than the known one -> INVALID_PRODUCER_EPOCH (Kafka 2.7+, KIP-588; it was
  PRODUCER_FENCED before);
- a newer epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER;
- the same epoch must continue at last sequence + 1 (wrapping at int32 max), else
  OUT_OF_ORDER_SEQUENCE_NUMBER;
- an unknown producer id is accepted at any sequence: its state may have been removed with
  the records that carried it (retention, DeleteRecords), so since KIP-360 the broker no
  longer answers UNKNOWN_PRODUCER_ID.

The state is a plain object; the log snapshots it to `<offset>.snapshot` files (JSON, the
state after every batch below `offset`) and rebuilds the rest by replaying batches.
"""
from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import NO_PRODUCER_EPOCH, NO_SEQUENCE, RecordBatch

BATCHES_RETAINED_PER_PRODUCER = 5  # ProducerStateEntry.NUM_BATCHES_TO_RETAIN; max.in.flight is capped at 5 for idempotence
SEQUENCE_MAX = (1 << 31) - 1
SNAPSHOT_VERSION = 1


@dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int  # the batch's max timestamp, returned as log_append_time for a duplicate


@dataclass
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_RETAINED_PER_PRODUCER))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, batch: RecordBatch) -> BatchMetadata | None:
        if batch.producer_epoch != self.producer_epoch:
            return None
        for cached in self.batches:
            if cached.first_seq == batch.base_sequence and cached.last_seq == batch.last_sequence:
                return cached
        return None


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == SEQUENCE_MAX)


class ProducerStateManager:
    """Per-partition producer state; the log calls `check_append` then `update` per batch."""

    def __init__(self) -> None:
        self._producers: dict[int, ProducerStateEntry] = {}

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        """Read-only view by producer id (entries must not be changed by callers)."""
        return MappingProxyType(self._producers)

    def check_append(self, batch: RecordBatch) -> BatchMetadata | None:
        """Validate an idempotent batch from a client; return the original batch's metadata if
        it is a duplicate, None if it may be appended; raise KafkaError otherwise."""
        assert batch.producer_id >= 0 and batch.base_sequence >= 0, batch
        entry = self._producers.get(batch.producer_id)
        if entry is None:
            return None
        duplicate = entry.find_duplicate(batch)
        if duplicate is not None:
            return duplicate
        if batch.producer_epoch < entry.producer_epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"producer {batch.producer_id} epoch {batch.producer_epoch} is older than {entry.producer_epoch}")
        if batch.producer_epoch != entry.producer_epoch:
            if batch.base_sequence != 0:
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"producer {batch.producer_id} new epoch {batch.producer_epoch} starts at sequence "
                                 f"{batch.base_sequence}, not 0")
        elif not in_sequence(entry.last_seq, batch.base_sequence):
            raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                             f"producer {batch.producer_id} sent sequence {batch.base_sequence} after {entry.last_seq}")
        return None

    def update(self, batch: RecordBatch) -> None:
        """Record an appended batch (offsets already assigned). Replay uses this too."""
        if batch.producer_id < 0:
            return
        entry = self._producers.setdefault(batch.producer_id, ProducerStateEntry(batch.producer_id))
        if batch.producer_epoch != entry.producer_epoch:
            entry.producer_epoch = batch.producer_epoch
            entry.batches.clear()
        if batch.is_control:
            return
        entry.batches.append(BatchMetadata(batch.base_sequence, batch.last_sequence, batch.base_offset,
                                           batch.last_offset, batch.max_timestamp))

    def to_snapshot(self) -> bytes:
        return json.dumps({
            "version": SNAPSHOT_VERSION,
            "producers": [
                {"producer_id": entry.producer_id, "producer_epoch": entry.producer_epoch,
                 "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp_ms]
                             for b in entry.batches]}
                for entry in self._producers.values()
            ],
        }).encode()

    @classmethod
    def from_snapshot(cls, data: bytes) -> ProducerStateManager:
        """Raises ValueError (or KeyError/TypeError) on a malformed snapshot."""
        document = json.loads(data)
        if document.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"producer snapshot version {document.get('version')!r}")
        manager = cls()
        for producer in document["producers"]:
            entry = ProducerStateEntry(int(producer["producer_id"]), int(producer["producer_epoch"]))
            entry.batches.extend(BatchMetadata(*map(int, b)) for b in producer["batches"])
            manager._producers[entry.producer_id] = entry
        return manager
