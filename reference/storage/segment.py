"""One log segment: `%020d.log` named by its base offset, with its two indexes.

The segment appends whole batches with os.write, reads byte ranges with os.pread (fetches
are served as slices of this file, never decoded), and can scan itself to rebuild its
indexes or to find where a torn or corrupt tail begins. Only the active segment keeps file
handles open; older ones open their log file for the length of a read.
"""
from __future__ import annotations

import errno
import os
from typing import Iterator

from reference.protocol.records import (
    LOG_OVERHEAD, MAGIC_OFFSET, NO_TIMESTAMP, RECORD_BATCH_OVERHEAD, LegacyRecordBatch, RecordBatch, iter_batches,
)
from reference.storage.index import OffsetIndex, TimeIndex

BATCH_PREFIX_BYTES = LOG_OVERHEAD + 5  # up to the magic byte: enough to size any batch
CURRENT_MAGIC = 2
RELATIVE_OFFSET_MAX = (1 << 31) - 1  # index entries hold offsets relative to the base as int32

Batch = RecordBatch | LegacyRecordBatch


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    def __init__(self, dir_path: str, base_offset: int, *, index_interval_bytes: int, created_ms: int,
                 file_suffix: str = "") -> None:
        """`file_suffix` ("" or the cleaner's ".cleaned"/".swap") follows each file's extension."""
        self.dir_path = dir_path
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.file_suffix = file_suffix
        self.log_path = os.path.join(dir_path, segment_file_name(base_offset, ".log" + file_suffix))
        self.offset_index = OffsetIndex(os.path.join(dir_path, segment_file_name(base_offset, ".index" + file_suffix)),
                                        base_offset)
        self.time_index = TimeIndex(os.path.join(dir_path, segment_file_name(base_offset, ".timeindex" + file_suffix)),
                                    base_offset)
        self.size_bytes = 0
        self.next_offset = base_offset  # one past the last offset stored here
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self.first_batch_timestamp = NO_TIMESTAMP  # segment.ms counts from here (Kafka's rollingBasedTimestamp)
        self.bytes_since_last_index_entry = 0
        self._append_fd: int | None = None

    # ------------------------------------------------------------ opening

    @classmethod
    def create(cls, dir_path: str, base_offset: int, *, index_interval_bytes: int, created_ms: int,
               file_suffix: str = "") -> LogSegment:
        segment = cls(dir_path, base_offset, index_interval_bytes=index_interval_bytes, created_ms=created_ms,
                      file_suffix=file_suffix)
        with open(segment.log_path, "xb"):
            pass
        segment.offset_index.reset()
        segment.time_index.reset()
        return segment

    def load(self) -> bool:
        """Open after a clean shutdown: sizes from the file, entries from the index files.
        Returns False when an index is missing or does not fit the log (rebuild with `recover`)."""
        self.size_bytes = os.path.getsize(self.log_path)
        if not (self.offset_index.load() and self.time_index.load()):
            return False
        if self.offset_index.values and self.offset_index.values[-1] >= self.size_bytes:
            return False
        last_entry = self.time_index.last_entry
        if last_entry is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last_entry
        _, last_indexed_position = self.offset_index.lookup(self.base_offset + RELATIVE_OFFSET_MAX)
        self.next_offset = self.base_offset
        for _, batch in self.batches_from(last_indexed_position, headers_only=True):
            self.next_offset = batch.next_offset
        self.bytes_since_last_index_entry = self.size_bytes - last_indexed_position
        first = next(self.batches_from(0, headers_only=True), None)
        self.first_batch_timestamp = first[1].max_timestamp if first else NO_TIMESTAMP
        return True

    def recover(self) -> int:
        """Scan every batch, check its CRC and offsets, rebuild both indexes, and cut the file
        at the first batch that is incomplete or invalid. Returns the bytes cut."""
        self.offset_index.reset()
        self.time_index.reset()
        file_bytes = os.path.getsize(self.log_path)
        self.size_bytes = 0
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, -1
        self.first_batch_timestamp = NO_TIMESTAMP
        self.bytes_since_last_index_entry = 0
        valid_bytes = 0
        for position, batch in self.batches_from(0):
            if not batch.crc_is_valid() or batch.last_offset < self.next_offset:
                break
            self._index_batch(batch, position)
            valid_bytes = position + batch.size_bytes
        assert self.size_bytes == valid_bytes, (self.size_bytes, valid_bytes)
        cut_bytes = file_bytes - valid_bytes
        if cut_bytes:
            os.truncate(self.log_path, valid_bytes)
        self.time_index_final_entry()
        self.offset_index.flush()
        self.time_index.flush()
        return cut_bytes

    # ------------------------------------------------------------ appending

    def append(self, batch: RecordBatch) -> None:
        """Write one batch (offsets assigned) at the end and index it."""
        assert batch.base_offset >= self.next_offset, (batch.base_offset, self.next_offset)
        assert batch.last_offset - self.base_offset <= RELATIVE_OFFSET_MAX
        if self._append_fd is None:
            self._append_fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND)
        position = self.size_bytes
        try:
            written = os.write(self._append_fd, batch.buffer)
            if written != batch.size_bytes:  # a full disk can take part of a batch
                raise OSError(errno.ENOSPC, f"{self.log_path}: wrote {written} of {batch.size_bytes} bytes")
        except OSError:
            # A failed write leaves no torn batch behind: the next append, once the disk is
            # mended, starts where the last whole batch ended, where the index says it does.
            os.ftruncate(self._append_fd, position)
            raise
        self._index_batch(batch, position)

    def _index_batch(self, batch: Batch, position: int) -> None:
        if self.first_batch_timestamp == NO_TIMESTAMP:
            self.first_batch_timestamp = batch.max_timestamp
        if batch.max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = batch.max_timestamp, batch.last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(batch.base_offset if isinstance(batch, RecordBatch) else batch.offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += batch.size_bytes
        self.size_bytes = position + batch.size_bytes
        self.next_offset = batch.next_offset

    def time_index_final_entry(self) -> None:
        """Make the time index's last entry the segment's max timestamp (on roll and close), so a
        clean load knows it without a scan."""
        if self.offset_of_max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    # ------------------------------------------------------------ reading

    def read_bytes(self, position: int, size: int) -> bytes:
        assert 0 <= position and position + size <= self.size_bytes, (position, size, self.size_bytes)
        fd = os.open(self.log_path, os.O_RDONLY)
        try:
            data = os.pread(fd, size, position)
        finally:
            os.close(fd)
        assert len(data) == size, (len(data), size)
        return data

    def batches_from(self, position: int, *, headers_only: bool = False) -> Iterator[tuple[int, Batch]]:
        """(position, batch) for each whole batch from `position` to the end of the file.
        With `headers_only`, a v2 batch is a view over its 61-byte header alone (offsets, size,
        timestamps, producer fields; no CRC check, no records): what finding and slicing
        batches needs, without reading a 1 MB batch to learn where it ends. Legacy messages
        are small and always read whole."""
        fd = os.open(self.log_path, os.O_RDONLY)
        try:
            end = os.fstat(fd).st_size
            while end - position >= BATCH_PREFIX_BYTES:
                header = os.pread(fd, RECORD_BATCH_OVERHEAD, position)
                length = int.from_bytes(header[8:12], "big", signed=True)
                size_bytes = LOG_OVERHEAD + length
                if length < 0 or position + size_bytes > end:
                    return
                if headers_only and header[MAGIC_OFFSET] == CURRENT_MAGIC and size_bytes >= RECORD_BATCH_OVERHEAD:
                    batch = RecordBatch(header)
                else:
                    whole = header if size_bytes <= len(header) else os.pread(fd, size_bytes, position)
                    batch = next(iter_batches(whole[:size_bytes]), None)
                if batch is None:
                    return
                yield position, batch
                position += size_bytes
        finally:
            os.close(fd)

    def find_batch(self, offset: int) -> tuple[int, Batch] | None:
        """(position, header) of the first batch whose last offset is >= `offset`."""
        _, position = self.offset_index.lookup(offset)
        for position, batch in self.batches_from(position, headers_only=True):
            if batch.last_offset >= offset:
                return position, batch
        return None

    # ------------------------------------------------------------ changing

    def truncate_to(self, offset: int) -> None:
        """Drop every batch whose last offset is >= `offset` (the cut is at a batch start)."""
        found = self.find_batch(offset)
        if found is None:
            return
        self.close()
        os.truncate(self.log_path, found[0])
        self.recover()

    def flush(self, fsync: bool) -> None:
        if self._append_fd is not None and fsync:
            os.fsync(self._append_fd)
        self.offset_index.flush(fsync)
        self.time_index.flush(fsync)

    def close(self) -> None:
        if self._append_fd is not None:
            os.close(self._append_fd)
            self._append_fd = None
        self.offset_index.close()
        self.time_index.close()

    def change_file_suffix(self, file_suffix: str) -> None:
        """Rename the three files (closed first): indexes before the log, so a `.log` under the
        new suffix means its indexes were renamed too (Kafka's changeFileSuffixes)."""
        self.close()
        old_paths = (self.offset_index.path, self.time_index.path, self.log_path)
        self.file_suffix = file_suffix
        self.offset_index.path, self.time_index.path, self.log_path = (
            os.path.join(self.dir_path, segment_file_name(self.base_offset, extension + file_suffix))
            for extension in (".index", ".timeindex", ".log"))
        for old_path, new_path in zip(old_paths, (self.offset_index.path, self.time_index.path, self.log_path)):
            os.replace(old_path, new_path)

    def delete_files(self) -> None:
        self.close()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, next_offset={self.next_offset}, size_bytes={self.size_bytes})"
