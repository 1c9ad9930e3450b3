"""RecordBatch v2 (magic 2): the layout, the Record tuple and reading a batch's header and records.

Layout of a v2 batch (DefaultRecordBatch in Kafka; research/protocol.md §3.3), big-endian:

    0 base_offset int64          21 attributes int16            51 producer_epoch int16
    8 batch_length int32         23 last_offset_delta int32      53 base_sequence int32
   12 partition_leader_epoch     27 base_timestamp int64         57 records_count int32
   16 magic int8                 35 max_timestamp int64          61 records...
   17 crc uint32                 43 producer_id int64

The CRC is CRC-32C over bytes 21..end, so base_offset and partition_leader_epoch can be
patched by the broker without recomputing it. The broker keeps batches as bytes: it
validates the header and CRC, patches offsets, and appends. Records are decoded only where
something needs them (tests, compaction, control markers).

Reading a log's batches in order, legacy message sets, validation and building: records.py.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c

from reference.protocol.compression import CompressionType, decompress
from reference.protocol.errors import ErrorCode, KafkaError

# Field positions in a v2 batch.
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16  # the same in every format, so a reader looks here first
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORD_BATCH_OVERHEAD = 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the bytes not counted in batch_length

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40  # KIP-534: the base timestamp field holds the delete horizon

TIMESTAMP_TYPE_CREATE_TIME = 0
TIMESTAMP_TYPE_LOG_APPEND_TIME = 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == RECORD_BATCH_OVERHEAD
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT64 = struct.Struct(">q")
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator_epoch


class Record(NamedTuple):
    """One decoded record. `offset` and `timestamp` are absolute."""

    offset: int = 0
    timestamp: int = NO_TIMESTAMP
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


# ---------------------------------------------------------------- varints (zig-zag)


def _read_varint(buf: memoryview | bytes, position: int) -> tuple[int, int]:
    """Decode one zig-zag varint; return (value, next position)."""
    shift = 0
    raw = 0
    while True:
        if shift > 63:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "varint longer than 10 bytes")
        byte = buf[position]
        position += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), position
        shift += 7


def _write_varint(value: int, out: bytearray) -> None:
    raw = (value << 1) ^ (value >> 63)
    raw &= (1 << 64) - 1
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _read_varbytes(buf: memoryview, position: int) -> tuple[bytes | None, int]:
    length, position = _read_varint(buf, position)
    if length < 0:
        return None, position
    end = position + length
    if end > len(buf):
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "record field runs past the batch")
    return bytes(buf[position:end]), end


def _write_varbytes(data: bytes | None, out: bytearray) -> None:
    if data is None:
        _write_varint(-1, out)
    else:
        _write_varint(len(data), out)
        out += data


# ---------------------------------------------------------------- RecordBatch v2


class RecordBatch:
    """A zero-copy view over one v2 batch's bytes; header fields are read on access."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: bytes | bytearray | memoryview) -> None:
        self.buffer = memoryview(buffer)
        assert len(self.buffer) >= RECORD_BATCH_OVERHEAD, len(self.buffer)

    def _int16(self, offset: int) -> int:
        return _INT16.unpack_from(self.buffer, offset)[0]

    def _int32(self, offset: int) -> int:
        return _INT32.unpack_from(self.buffer, offset)[0]

    def _int64(self, offset: int) -> int:
        return _INT64.unpack_from(self.buffer, offset)[0]

    base_offset = property(lambda self: self._int64(BASE_OFFSET_OFFSET))
    batch_length = property(lambda self: self._int32(LENGTH_OFFSET))
    partition_leader_epoch = property(lambda self: self._int32(PARTITION_LEADER_EPOCH_OFFSET))
    magic = property(lambda self: self.buffer[MAGIC_OFFSET])
    crc = property(lambda self: _UINT32.unpack_from(self.buffer, CRC_OFFSET)[0])
    attributes = property(lambda self: self._int16(ATTRIBUTES_OFFSET))
    last_offset_delta = property(lambda self: self._int32(LAST_OFFSET_DELTA_OFFSET))
    base_timestamp = property(lambda self: self._int64(BASE_TIMESTAMP_OFFSET))
    max_timestamp = property(lambda self: self._int64(MAX_TIMESTAMP_OFFSET))
    producer_id = property(lambda self: self._int64(PRODUCER_ID_OFFSET))
    producer_epoch = property(lambda self: self._int16(PRODUCER_EPOCH_OFFSET))
    base_sequence = property(lambda self: self._int32(BASE_SEQUENCE_OFFSET))
    records_count = property(lambda self: self._int32(RECORDS_COUNT_OFFSET))

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return TIMESTAMP_TYPE_LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else TIMESTAMP_TYPE_CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """When compaction may drop this batch's tombstones (KIP-534); None until a cleaner set it."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else None

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def last_sequence(self) -> int:
        """The sequence of the last record; sequences wrap at int32 max (DefaultRecordBatch)."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)

    @property
    def size_bytes(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    def crc_is_valid(self) -> bool:
        return crc32c.crc32c(self.buffer[ATTRIBUTES_OFFSET : self.size_bytes]) == self.crc

    def records(self) -> list[Record]:
        """Decode every record, decompressing first if needed (raises CORRUPT_MESSAGE)."""
        body = self.buffer[RECORD_BATCH_OVERHEAD : self.size_bytes]
        if self.compression != CompressionType.NONE:
            body = memoryview(decompress(self.compression, body))
        base_offset, base_timestamp = self.base_offset, self.base_timestamp
        log_append_time = self.max_timestamp if self.timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME else None
        records = []
        position = 0
        try:
            for _ in range(self.records_count):
                length, position = _read_varint(body, position)
                end = position + length
                position += 1  # record attributes: unused
                timestamp_delta, position = _read_varint(body, position)
                offset_delta, position = _read_varint(body, position)
                key, position = _read_varbytes(body, position)
                value, position = _read_varbytes(body, position)
                header_count, position = _read_varint(body, position)
                headers = []
                for _ in range(header_count):
                    header_key, position = _read_varbytes(body, position)
                    header_value, position = _read_varbytes(body, position)
                    headers.append(((header_key or b"").decode(), header_value))
                if position != end:
                    raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record length {length} disagrees with its fields")
                timestamp = log_append_time if log_append_time is not None else base_timestamp + timestamp_delta
                records.append(Record(base_offset + offset_delta, timestamp, key, value, tuple(headers)))
        except IndexError as e:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "records run past the end of the batch") from e
        if position != len(body):
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{len(body) - position} bytes after the last record")
        return records

    def __repr__(self) -> str:
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"size_bytes={self.size_bytes}, producer_id={self.producer_id}, base_sequence={self.base_sequence})")
