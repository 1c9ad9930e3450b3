"""The sparse offset index (`.index`) and time index (`.timeindex`) of one log segment.

Both keep their entries in memory (they are sparse: one entry per index.interval.bytes of
log) and append each entry to their file, in Kafka's on-disk layout:
  .index       relative offset int32, file position int32
  .timeindex   timestamp int64, relative offset int32
Offsets are stored relative to the segment's base offset, so a segment spans at most
2^31 - 1 offsets. Kafka preallocates and memory-maps these files; here they grow by appends.
"""
from __future__ import annotations

import bisect
import os
import struct

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


class _Index:
    """Entries (key, value) with strictly increasing keys, mirrored to an append-only file."""

    entry: struct.Struct

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.keys: list[int] = []
        self.values: list[int] = []
        self._file = None

    def load(self) -> bool:
        """Read the file; False if it is missing or malformed (the caller rebuilds)."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return False
        if len(data) % self.entry.size:
            return False
        entries = list(self.entry.iter_unpack(data))
        keys = [entry[0] for entry in entries]
        if any(a >= b for a, b in zip(keys, keys[1:])):
            return False
        self.keys = keys
        self.values = [entry[1] for entry in entries]
        return True

    def _append(self, key: int, value: int) -> None:
        assert not self.keys or key > self.keys[-1], (key, self.keys[-1])
        if self._file is None:
            self._file = open(self.path, "ab")
        self._file.write(self.entry.pack(key, value))
        self.keys.append(key)
        self.values.append(value)

    def reset(self) -> None:
        """Drop every entry and empty the file (before a rebuild)."""
        self.close()
        self.keys, self.values = [], []
        with open(self.path, "wb"):
            pass

    def truncate_entries(self, count: int) -> None:
        """Keep the first `count` entries and rewrite the file."""
        self.close()
        self.keys, self.values = self.keys[:count], self.values[:count]
        with open(self.path, "wb") as f:
            f.write(b"".join(self.entry.pack(k, v) for k, v in zip(self.keys, self.values)))

    def flush(self, fsync: bool = False) -> None:
        if self._file is not None:
            self._file.flush()
            if fsync:
                os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class OffsetIndex(_Index):
    """Relative offset -> byte position of the batch that starts there."""

    entry = OFFSET_ENTRY

    def append(self, offset: int, position: int) -> None:
        assert not self.values or position > self.values[-1]
        self._append(offset - self.base_offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below `offset`; (base_offset, 0) if none."""
        i = bisect.bisect_right(self.keys, offset - self.base_offset) - 1
        return (self.base_offset, 0) if i < 0 else (self.base_offset + self.keys[i], self.values[i])

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        self.truncate_entries(bisect.bisect_left(self.keys, offset - self.base_offset))


class TimeIndex(_Index):
    """Max timestamp so far -> the offset holding it; timestamps strictly increase."""

    entry = TIME_ENTRY

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if not self.keys or timestamp > self.keys[-1]:
            self._append(timestamp, offset - self.base_offset)

    def lookup_before(self, timestamp: int) -> int:
        """Offset of the last entry with a timestamp below `timestamp`: every record up to
        that entry has a smaller timestamp, so a search can start there. base_offset if none."""
        i = bisect.bisect_left(self.keys, timestamp) - 1
        return self.base_offset if i < 0 else self.base_offset + self.values[i]

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the largest timestamp indexed."""
        return (self.keys[-1], self.base_offset + self.values[-1]) if self.keys else None

    def truncate_to(self, offset: int) -> None:
        self.truncate_entries(sum(1 for v in self.values if self.base_offset + v < offset))
