"""Record batches: reading a log's batches in order (v2, and the legacy message sets of magic 0
and 1), validating a produced batch, and building, rebuilding and recompressing batches.

The v2 layout and the reading of one batch are in record_batch.py; every name there is
importable from here too. Magic 0 and 1 message sets (LegacyRecord) are readable here so old
data can be served, but Produce accepts magic 2 only, as Kafka 4 does.
"""
from __future__ import annotations

from dataclasses import dataclass
import struct
import zlib
from typing import Iterator, Sequence

import crc32c

from reference.protocol.compression import CompressionType, compress, decompress
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.record_batch import (  # noqa: F401 (the batch format, imported from here too)
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORDS_COUNT_OFFSET,
    RECORD_BATCH_OVERHEAD,
    Record,
    RecordBatch,
    TIMESTAMP_TYPE_CREATE_TIME,
    TIMESTAMP_TYPE_LOG_APPEND_TIME,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    _CONTROL_KEY,
    _CONTROL_VALUE,
    _HEADER,
    _INT16,
    _INT32,
    _INT64,
    _UINT32,
    _write_varbytes,
    _write_varint,
)


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


def recompress(batch: RecordBatch, records_body: bytes | memoryview, compression: int, level: int | None = None) -> bytearray:
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
