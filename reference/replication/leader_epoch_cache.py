"""The leader-epoch cache of one partition replica: which leader epoch began at which offset.

Every batch a leader appends carries its leader epoch (KIP-101), so a log is a sequence of
epoch runs; the cache keeps the first offset of each run, e.g. [(0, 0), (2, 120), (5, 300)].
A leader answers OffsetForLeaderEpoch from it, and a follower uses it to find the longest
prefix it shares with the leader (KIP-279). The entries are checkpointed, as Kafka does, in
`leader-epoch-checkpoint` in the partition's directory: a version line (0), a count line,
then one "epoch start_offset" line per entry. No clock, no sockets; the file is optional.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from reference.storage.atomic import replace_file

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCache:
    def __init__(self, checkpoint_path: str | None = None) -> None:
        self.checkpoint_path = checkpoint_path
        self.entries: list[EpochEntry] = self._read_checkpoint() if checkpoint_path else []
        self._check()

    @classmethod
    def in_dir(cls, partition_dir: str) -> LeaderEpochCache:
        return cls(os.path.join(partition_dir, LEADER_EPOCH_CHECKPOINT_FILE))

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` begins at `start_offset`; a known latest epoch is a no-op."""
        if epoch == self.latest_epoch:
            return
        assert epoch > self.latest_epoch, (epoch, self.entries)
        assert not self.entries or start_offset >= self.entries[-1].start_offset, (start_offset, self.entries)
        if self.entries and self.entries[-1].start_offset == start_offset:
            self.entries.pop()  # an epoch with no records of its own is superseded
        self.entries.append(EpochEntry(epoch, start_offset))
        self._flush()

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch: the largest epoch <= `requested_epoch`
        this log has, and the offset where it ends (the start of the next larger epoch, or the
        log end offset for the latest one). The epoch in the answer is what lets a follower
        detect that the leader never had its epoch (KIP-279). A requested epoch below every
        entry ends at the first entry's start; one above every entry is undefined."""
        if requested_epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        higher = next((entry for entry in self.entries if entry.epoch > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = [entry for entry in self.entries if entry.epoch <= requested_epoch]
        return (floor[-1].epoch if floor else requested_epoch), higher.start_offset

    def epoch_start_offset(self, epoch: int) -> int | None:
        return next((entry.start_offset for entry in self.entries if entry.epoch == epoch), None)

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to `end_offset`: forget the epochs that began at or after it."""
        kept = [entry for entry in self.entries if entry.start_offset < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._flush()

    def _check(self) -> None:
        for earlier, later in zip(self.entries, self.entries[1:]):
            assert earlier.epoch < later.epoch and earlier.start_offset <= later.start_offset, self.entries

    def _flush(self) -> None:
        self._check()
        if self.checkpoint_path is None:
            return
        lines = [str(CHECKPOINT_VERSION), str(len(self.entries))]
        lines += [f"{entry.epoch} {entry.start_offset}" for entry in self.entries]
        replace_file(self.checkpoint_path, ("\n".join(lines) + "\n").encode("ascii"))

    def _read_checkpoint(self) -> list[EpochEntry]:
        assert self.checkpoint_path is not None
        try:
            with open(self.checkpoint_path, encoding="ascii") as f:
                lines = f.read().split("\n")
        except FileNotFoundError:
            return []
        version, count = int(lines[0]), int(lines[1])
        if version != CHECKPOINT_VERSION:
            raise ValueError(f"{self.checkpoint_path}: unknown checkpoint version {version}")
        entries = []
        for line in lines[2:2 + count]:
            epoch, start_offset = line.split()
            entries.append(EpochEntry(int(epoch), int(start_offset)))
        return entries
