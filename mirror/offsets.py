"""Offset syncs and their translation: the sans-IO heart of MirrorMaker 2's checkpoints.

A remote partition's offsets differ from its source's (records already in the target,
duplicates after a restart, compaction, transaction markers), so the mirror writes offset
syncs, pairs (upstream offset, downstream offset) of one record, and translates a group's
committed source offset with them.

- SyncWriter (MM2's OffsetSyncWriter) decides which copied records get a sync: the first of a
  partition in the mirror's lifetime, one `offset.lag.max` records after the last sync, any
  record whose upstream offset does not follow the previous one (a gap: compaction, markers)
  or whose downstream offset went backwards, and, deferred to each progress commit, the last
  record copied (KAFKA-15906), so an idle partition translates exactly.
- SyncStore (MM2's OffsetSyncStore) keeps the newest syncs of each partition and translates:
  the newest sync with upstream <= the group's offset; equal gives its downstream offset,
  ahead gives downstream + 1 and never more, because the records in between may not be in the
  target yet and extrapolating could skip them (KAFKA-12468). The price is re-reading at most
  `offset.lag.max` records. A group older than every kept sync is not translated.
"""
from __future__ import annotations

from collections import deque

from mirror.records import OffsetSync

SYNCS_KEPT_PER_PARTITION = 64
NO_TRANSLATION = -1


class SyncWriter:
    def __init__(self, offset_lag_max: int) -> None:
        self.offset_lag_max = offset_lag_max
        self.last_sync: dict[tuple[str, int], OffsetSync] = {}
        self.last_copied: dict[tuple[str, int], OffsetSync] = {}

    def copied(self, topic: str, partition: int, upstream: int, downstream: int) -> OffsetSync | None:
        """A record's copy is durable in the target: the sync to send now, if one is due."""
        tp = (topic, partition)
        record = OffsetSync(topic, partition, upstream, downstream)
        previous, synced = self.last_copied.get(tp), self.last_sync.get(tp)
        self.last_copied[tp] = record
        due = (synced is None or previous is None
               or upstream != previous.upstream_offset + 1
               or downstream <= synced.offset
               or downstream - (synced.offset + 1) >= self.offset_lag_max)
        if due:
            self.last_sync[tp] = record
            return record
        return None

    def deferred(self) -> list[OffsetSync]:
        """At a progress commit: the last copied record of every partition whose sync lags behind."""
        due = [record for tp, record in self.last_copied.items() if self.last_sync.get(tp) != record]
        for record in due:
            self.last_sync[(record.topic, record.partition)] = record
        return due


class SyncStore:
    def __init__(self) -> None:
        self.syncs: dict[tuple[str, int], deque[OffsetSync]] = {}

    def add(self, sync: OffsetSync) -> None:
        kept = self.syncs.setdefault((sync.topic, sync.partition), deque(maxlen=SYNCS_KEPT_PER_PARTITION))
        if kept and sync.upstream_offset < kept[-1].upstream_offset:
            kept.clear()  # the upstream was rewound (a restart re-copying): older syncs no longer apply
        kept.append(sync)

    def translate(self, topic: str, partition: int, group_offset: int) -> int:
        """The remote offset a group at `group_offset` in the source continues from, or -1."""
        for sync in reversed(self.syncs.get((topic, partition), ())):
            if sync.upstream_offset == group_offset:
                return sync.offset
            if sync.upstream_offset < group_offset:
                return sync.offset + 1
        return NO_TRANSLATION
