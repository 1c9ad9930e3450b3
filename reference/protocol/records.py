"""RecordBatch v2 (magic 2) and legacy message sets (magic 0 and 1): parse, validate, build.

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

Magic 0 and 1 message sets (LegacyRecord) are readable here so old data can be served, but
Produce accepts magic 2 only, as Kafka 4 does.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Iterator, NamedTuple, Sequence

import crc32c

from reference.protocol.compression import CompressionType, compress, decompress
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


# ---------------------------------------------------------------- legacy message sets (magic 0, 1)

_LEGACY_HEADER = struct.Struct(">qiIbb")  # offset, message_size, crc, magic, attributes
LEGACY_MESSAGE_SIZE_MIN = {0: 14, 1: 22}  # crc..value length with null key and value (LegacyRecord)


class LegacyRecordBatch:
    """One magic 0 or 1 message (an uncompressed record, or a wrapper holding a compressed set).

    `offset` is the stored offset: for a magic 1 wrapper it is the absolute offset of the
    last inner record and inner offsets are relative (KIP-31); for magic 0 they are absolute.
    """

    __slots__ = ("buffer",)

    def __init__(self, buffer: bytes | bytearray | memoryview) -> None:
        self.buffer = memoryview(buffer)

    offset = property(lambda self: _INT64.unpack_from(self.buffer, 0)[0])
    message_size = property(lambda self: _INT32.unpack_from(self.buffer, 8)[0])
    crc = property(lambda self: _UINT32.unpack_from(self.buffer, 12)[0])
    magic = property(lambda self: self.buffer[16])
    attributes = property(lambda self: self.buffer[17])
    compression = property(lambda self: self.attributes & COMPRESSION_MASK)
    size_bytes = property(lambda self: LOG_OVERHEAD + self.message_size)
    last_offset = property(lambda self: self.offset)
    next_offset = property(lambda self: self.offset + 1)
    is_control = False
    is_transactional = False
    producer_id = NO_PRODUCER_ID

    @property
    def timestamp_type(self) -> int:
        if self.magic == 1 and self.attributes & TIMESTAMP_TYPE_MASK:
            return TIMESTAMP_TYPE_LOG_APPEND_TIME
        return TIMESTAMP_TYPE_CREATE_TIME

    @property
    def timestamp(self) -> int:
        return _INT64.unpack_from(self.buffer, 18)[0] if self.magic == 1 else NO_TIMESTAMP

    max_timestamp = timestamp

    def crc_is_valid(self) -> bool:
        """CRC-32 (IEEE, zlib.crc32) over magic..end, as LegacyRecord computes it."""
        return zlib.crc32(self.buffer[16 : self.size_bytes]) == self.crc

    def _key_value(self) -> tuple[bytes | None, bytes | None]:
        position = 26 if self.magic == 1 else 18
        fields = []
        for _ in range(2):
            (length,) = _INT32.unpack_from(self.buffer, position)
            position += 4
            if length < 0:
                fields.append(None)
                continue
            if position + length > self.size_bytes:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "legacy message field runs past its end")
            fields.append(bytes(self.buffer[position : position + length]))
            position += length
        return fields[0], fields[1]

    def records(self) -> list[Record]:
        key, value = self._key_value()
        if self.compression == CompressionType.NONE:
            return [Record(self.offset, self.timestamp, key, value, ())]
        inner = list(iter_batches(decompress(self.compression, value or b"")))
        if not inner:
            return []
        shift = self.offset - inner[-1].offset if self.magic == 1 else 0
        wrapper_log_append_time = self.timestamp if self.timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME else None
        return [
            record._replace(offset=record.offset + shift,
                            timestamp=wrapper_log_append_time if wrapper_log_append_time is not None else record.timestamp)
            for batch in inner for record in batch.records()
        ]

    def __repr__(self) -> str:
        return f"LegacyRecordBatch(magic={self.magic}, offset={self.offset}, size_bytes={self.size_bytes})"


# ---------------------------------------------------------------- iteration and validation


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[RecordBatch | LegacyRecordBatch]:
    """Yield the batches at the start of `buf`, stopping at the first one that is incomplete
    or has an impossible length or magic. The valid prefix is sum(b.size_bytes for the
    batches yielded); whatever follows is a truncated or corrupt tail. CRCs are not checked."""
    view = memoryview(buf)
    position = 0
    while len(view) - position >= LOG_OVERHEAD + 5:  # up to the magic byte
        (length,) = _INT32.unpack_from(view, position + LENGTH_OFFSET)
        magic = view[position + MAGIC_OFFSET]
        size = LOG_OVERHEAD + length
        if magic == 2:
            if length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or position + size > len(view):
                return
            yield RecordBatch(view[position : position + size])
        elif magic in LEGACY_MESSAGE_SIZE_MIN:
            if length < LEGACY_MESSAGE_SIZE_MIN[magic] or position + size > len(view):
                return
            yield LegacyRecordBatch(view[position : position + size])
        else:
            return
        position += size


def validate_produce(buf: bytes | bytearray | memoryview, *, max_message_bytes: int) -> list[RecordBatch]:
    """Check a Produce request's records for one partition, as Kafka's broker does before an
    append (ProduceRequest.validateRecords, LogValidator). Returns the batch (Produce v3+
    carries exactly one). Raises KafkaError:
      INVALID_RECORD   no batch, more than one batch, magic other than 2, count or offset
                       range inconsistent, a control batch, an idempotent batch without sequence;
      CORRUPT_MESSAGE  bad length, bytes that do not form whole batches, CRC mismatch;
      MESSAGE_TOO_LARGE  a batch over max.message.bytes."""
    view = memoryview(buf)
    batches = list(iter_batches(view))
    valid_bytes = sum(batch.size_bytes for batch in batches)
    if not batches:
        if len(view) == 0:
            raise KafkaError(ErrorCode.INVALID_RECORD, "produce request has no record batch")
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{len(view)} bytes do not hold a whole record batch")
    if valid_bytes != len(view):
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{len(view) - valid_bytes} bytes after the last whole batch")
    if len(batches) != 1:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"produce request holds {len(batches)} batches, not exactly one")
    batch = batches[0]
    if batch.magic != 2:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"magic {batch.magic}: produce accepts record batches of magic 2 only")
    if batch.size_bytes > max_message_bytes:
        raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                         f"batch of {batch.size_bytes} bytes is over max.message.bytes={max_message_bytes}")
    if not batch.crc_is_valid():
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"batch CRC {batch.crc:#010x} does not match its bytes")
    if batch.compression > CompressionType.ZSTD:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec id {batch.compression}")
    if batch.records_count <= 0 or batch.last_offset_delta + 1 != batch.records_count:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"records_count {batch.records_count} disagrees with "
                         f"last_offset_delta {batch.last_offset_delta}")
    if batch.is_control:
        raise KafkaError(ErrorCode.INVALID_RECORD, "clients may not write control batches")
    if batch.producer_id >= 0 and batch.base_sequence < 0:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"idempotent batch of producer {batch.producer_id} has no sequence")
    return batches


# ---------------------------------------------------------------- writing


def assign_offsets(batch_bytes: bytearray | memoryview, base_offset: int, partition_leader_epoch: int,
                   log_append_time_ms: int | None = None) -> None:
    """Patch a v2 batch in place as the leader appends it: base offset and leader epoch (not
    CRC-covered); with `log_append_time_ms`, set the LogAppendTime attribute bit and
    max_timestamp and recompute the CRC, since those bytes are covered by it."""
    view = memoryview(batch_bytes)
    assert not view.readonly and view[MAGIC_OFFSET] == 2
    _INT64.pack_into(view, BASE_OFFSET_OFFSET, base_offset)
    _INT32.pack_into(view, PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
    if log_append_time_ms is not None:
        (attributes,) = _INT16.unpack_from(view, ATTRIBUTES_OFFSET)
        _INT16.pack_into(view, ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
        _INT64.pack_into(view, MAX_TIMESTAMP_OFFSET, log_append_time_ms)
        _UINT32.pack_into(view, CRC_OFFSET, crc32c.crc32c(view[ATTRIBUTES_OFFSET:]))


def build_batch(records: Sequence[Record], *, base_offset: int = 0, compression: int = CompressionType.NONE,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE, is_transactional: bool = False, is_control: bool = False,
                partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                timestamp_type: int = TIMESTAMP_TYPE_CREATE_TIME) -> bytes:
    """Encode records as one v2 batch, as a producer would. The records take consecutive
    offsets from `base_offset` (their own `offset` field is not read); timestamps are theirs."""
    assert records, "a batch holds at least one record"
    attributes = (compression | (TIMESTAMP_TYPE_MASK if timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME else 0)
                  | (TRANSACTIONAL_MASK if is_transactional else 0) | (CONTROL_MASK if is_control else 0))
    return _encode_batch(records, range(len(records)), base_offset=base_offset, last_offset_delta=len(records) - 1,
                         attributes=attributes, base_timestamp=records[0].timestamp,
                         max_timestamp=max(record.timestamp for record in records), producer_id=producer_id,
                         producer_epoch=producer_epoch, base_sequence=base_sequence,
                         partition_leader_epoch=partition_leader_epoch)


def rebuild_batch(batch: RecordBatch, records: Sequence[Record], *, delete_horizon_ms: int | None = None) -> bytes:
    """A copy of `batch` holding only `records`, each at its ORIGINAL offset, as log compaction
    writes it (Kafka's MemoryRecords.filterTo). The header keeps the base offset and the last
    offset delta, so the batch spans the same offsets and the producer's last sequence survives,
    and keeps producer id, epoch, base sequence, leader epoch, compression and timestamp type;
    record offset deltas may now leave gaps, which v2 allows. With `delete_horizon_ms` the
    delete-horizon attribute is set and the base timestamp field holds the horizon (KIP-534);
    record timestamps stay theirs (their deltas are taken from the horizon). No records gives
    an empty, uncompressed batch that only carries the producer metadata."""
    assert all(batch.base_offset <= record.offset <= batch.last_offset for record in records), batch
    assert all(a.offset < b.offset for a, b in zip(records, records[1:])), "records keep their order"
    attributes = batch.attributes & ~DELETE_HORIZON_MASK & ~(COMPRESSION_MASK if not records else 0)
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
        base_timestamp = delete_horizon_ms
    else:
        base_timestamp = records[0].timestamp if records else batch.base_timestamp
    max_timestamp = batch.max_timestamp
    if records and batch.timestamp_type == TIMESTAMP_TYPE_CREATE_TIME:
        max_timestamp = max(record.timestamp for record in records)
    return _encode_batch(records, [record.offset - batch.base_offset for record in records],
                         base_offset=batch.base_offset, last_offset_delta=batch.last_offset_delta,
                         attributes=attributes, base_timestamp=base_timestamp, max_timestamp=max_timestamp,
                         producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                         base_sequence=batch.base_sequence, partition_leader_epoch=batch.partition_leader_epoch)


def recompress(batch: RecordBatch, records_body: bytes, compression: int, level: int | None = None) -> bytearray:
    """`batch` with its records (`records_body`, already decompressed) compressed with codec
    `compression` at `level` instead, as Kafka's LogValidator writes a produced batch whose codec
    is not the topic's compression.type. The records are kept byte for byte; the header keeps
    base offset, leader epoch, producer id, epoch and base sequence, timestamps, the other
    attributes (timestamp type, transactional, control) and counts; the CRC is computed anew."""
    payload = compress(compression, records_body, level) if compression != CompressionType.NONE else records_body
    out = bytearray(RECORD_BATCH_OVERHEAD + len(payload))
    out[:RECORD_BATCH_OVERHEAD] = batch.buffer[:RECORD_BATCH_OVERHEAD]
    out[RECORD_BATCH_OVERHEAD:] = payload
    _INT32.pack_into(out, LENGTH_OFFSET, len(out) - LOG_OVERHEAD)
    _INT16.pack_into(out, ATTRIBUTES_OFFSET, (batch.attributes & ~COMPRESSION_MASK) | compression)
    _UINT32.pack_into(out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return out


def _encode_batch(records: Sequence[Record], offset_deltas: Sequence[int], *, base_offset: int,
                  last_offset_delta: int, attributes: int, base_timestamp: int, max_timestamp: int,
                  producer_id: int, producer_epoch: int, base_sequence: int, partition_leader_epoch: int) -> bytes:
    """The one encoder of v2 batches: records at the given offset deltas, header as given, CRC-32C."""
    assert len(offset_deltas) == len(records) and all(0 <= d <= last_offset_delta for d in offset_deltas)
    body = bytearray()
    for offset_delta, record in zip(offset_deltas, records):
        encoded = bytearray(b"\x00")  # record attributes
        _write_varint(record.timestamp - base_timestamp, encoded)
        _write_varint(offset_delta, encoded)
        _write_varbytes(record.key, encoded)
        _write_varbytes(record.value, encoded)
        _write_varint(len(record.headers), encoded)
        for header_key, header_value in record.headers:
            _write_varbytes(header_key.encode(), encoded)
            _write_varbytes(header_value, encoded)
        _write_varint(len(encoded), body)
        body += encoded
    compression = attributes & COMPRESSION_MASK
    payload = compress(compression, body) if compression != CompressionType.NONE else bytes(body)
    batch = bytearray(RECORD_BATCH_OVERHEAD + len(payload))
    _HEADER.pack_into(batch, 0, base_offset, len(batch) - LOG_OVERHEAD, partition_leader_epoch, 2, 0, attributes,
                      last_offset_delta, base_timestamp, max_timestamp,
                      producer_id, producer_epoch, base_sequence, len(records))
    batch[RECORD_BATCH_OVERHEAD:] = payload
    _UINT32.pack_into(batch, CRC_OFFSET, crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


@dataclass(frozen=True)
class ControlRecord:
    """A decoded transaction marker (EndTransactionMarker): COMMIT or ABORT."""

    control_type: int
    coordinator_epoch: int

    @classmethod
    def from_record(cls, record: Record) -> ControlRecord:
        assert record.key is not None and record.value is not None
        _version, control_type = _CONTROL_KEY.unpack_from(record.key)
        _version, coordinator_epoch = _CONTROL_VALUE.unpack_from(record.value)
        return cls(control_type, coordinator_epoch)


def build_control_batch(control_type: int, *, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                        timestamp_ms: int, base_offset: int = 0,
                        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """A transaction marker batch: transactional + control, one record with key
    (version 0, type) and value (version 0, coordinator_epoch)."""
    assert control_type in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT), control_type
    record = Record(0, timestamp_ms, _CONTROL_KEY.pack(0, control_type), _CONTROL_VALUE.pack(0, coordinator_epoch))
    return build_batch([record], base_offset=base_offset, producer_id=producer_id, producer_epoch=producer_epoch,
                       is_transactional=True, is_control=True, partition_leader_epoch=partition_leader_epoch)
