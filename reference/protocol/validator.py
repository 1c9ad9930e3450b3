"""LogValidator: every record of a produced batch is walked before anything is stored.

`records.validate_produce` checks what the batch header says (one v2 batch, its CRC, its
size, its codec, records_count against last_offset_delta). This module then walks the
records themselves, as Kafka's LogValidator does (validateMessagesAndAssignOffsets):
- a compressed batch is decompressed with a bound: more than max.message.bytes of records
  is MESSAGE_TOO_LARGE, and decompression stops there, so a small batch cannot make the
  broker allocate gigabytes;
- the bytes must form exactly records_count records (varints of at most 10 bytes, lengths
  that agree with the fields, no bytes after the last record), else CORRUPT_MESSAGE;
- a header key may not be null (INVALID_RECORD), as DefaultRecord.readFrom refuses;
- per record, with its index in the batch (KIP-467 `record_errors`): an offset delta that
  is not its index (INVALID_RECORD); a null key on a compacted topic (INVALID_RECORD); with
  message.timestamp.type=CreateTime, a timestamp more than message.timestamp.before.max.ms
  before or message.timestamp.after.max.ms after the broker's clock (INVALID_TIMESTAMP;
  KIP-937 split message.timestamp.difference.max.ms into the two).
Any error refuses the whole batch: nothing of it is stored. The records, decompressed, are
returned, so a batch the topic's compression.type wants in another codec is recompressed
from them without a second decompression (records.recompress). A producer that gets per-record
errors fails exactly those records and may send the others again (KIP-467).

The walk reads each record's varints and skips its key, value and headers without copying
them; one- and two-byte varints (nearly all lengths and deltas) are decoded inline. Even so it
costs about 0.6 us a record in Python, 6 CPU-seconds per GB of 100-byte records, three times
the rest of the produce path; so the same walk in C (_record_walk.c, built by setup.py) runs
first and answers the common case, "every record is fine", in a few nanoseconds a record. Only
when it says otherwise (or is not built) does the walk below run, to name what is wrong.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import cramjam

from reference.protocol.compression import XERIAL_HEADER, XERIAL_MAGIC, CompressionType
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.record_batch import (
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_CREATE_TIME,
    RecordBatch,
    _read_varint,
)
from reference.protocol.records import validate_produce

try:
    from reference.protocol._record_walk import records_clean
except ImportError:  # not compiled (no C compiler at install): the Python walk decides alone
    records_clean = None

_INT32 = struct.Struct(">i")
RECORD_ERRORS_IN_MESSAGE_MAX = 3  # as Kafka, the error message quotes the first three record errors
DECOMPRESS_RATIO_GUESS = 8  # the first buffer for lz4 and zstd: this many times the compressed size
DECOMPRESS_BUFFER_BYTES_MIN = 64 * 1024
_ZIGZAG = [(byte >> 1) ^ -(byte & 1) for byte in range(0x80)]  # a one-byte varint's value
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


@dataclass(frozen=True)
class ValidationRules:
    """What a partition's topic configs ask of a produced batch."""

    max_message_bytes: int  # max.message.bytes: the batch, and its records once decompressed
    compacted: bool  # cleanup.policy includes compact: every record needs a key
    log_append_time: bool  # message.timestamp.type=LogAppendTime: record timestamps are not checked
    timestamp_before_max_ms: int  # message.timestamp.before.max.ms
    timestamp_after_max_ms: int  # message.timestamp.after.max.ms


class RecordValidationError(KafkaError):
    """A batch refused for errors in some of its records: `record_errors` holds
    (batch_index, message) pairs, the Produce response's record_errors (KIP-467)."""

    def __init__(self, code: ErrorCode, record_errors: list[tuple[int, str]]) -> None:
        shown = "; ".join(f"record {index}: {message}" for index, message in record_errors[:RECORD_ERRORS_IN_MESSAGE_MAX])
        super().__init__(code, f"{len(record_errors)} record(s) refused, the first: {shown}")
        self.record_errors = record_errors


@dataclass(frozen=True)
class ValidatedBatch:
    """A Produce request's records for one partition, checked under `rules` (validate_produce
    and validate_records) ahead of the append, e.g. in a worker thread: the log appends it
    without a second walk while its rules are still these. `outcome` is the batch with its
    records decompressed, or the error the append must raise."""

    records: bytes | memoryview
    rules: ValidationRules
    outcome: tuple[RecordBatch, bytes | memoryview] | KafkaError

    def batch_and_body(self) -> tuple[RecordBatch, bytes | memoryview]:
        if isinstance(self.outcome, KafkaError):
            raise self.outcome
        return self.outcome


def validate_batch(records: bytes | memoryview, rules: ValidationRules, now_ms: int) -> ValidatedBatch:
    """Everything a produced batch must pass before it is stored; errors are kept in the result."""
    try:
        (batch,) = validate_produce(records, max_message_bytes=rules.max_message_bytes)
        return ValidatedBatch(records, rules, (batch, validate_records(batch, rules, now_ms)))
    except KafkaError as e:
        return ValidatedBatch(records, rules, e)


def validate_records(batch: RecordBatch, rules: ValidationRules, now_ms: int) -> bytes | memoryview:
    """Walk every record of `batch` (already checked by validate_produce); raise KafkaError
    (RecordValidationError where Kafka names the records) if the batch may not be stored.
    Returns the records' bytes, decompressed."""
    body = batch.buffer[RECORD_BATCH_OVERHEAD : batch.size_bytes]
    if batch.compression != CompressionType.NONE:
        body = decompress_bounded(batch.compression, body, rules.max_message_bytes)
    check_timestamps = not rules.log_append_time and batch.timestamp_type == TIMESTAMP_TYPE_CREATE_TIME
    earliest_ms = now_ms - rules.timestamp_before_max_ms
    latest_ms = now_ms + rules.timestamp_after_max_ms
    base_timestamp = batch.base_timestamp
    earliest_delta, latest_delta = earliest_ms - base_timestamp, latest_ms - base_timestamp
    compacted = rules.compacted
    # The C walk's deltas are 64-bit; clamped bounds keep its answer (its deltas stay within +-2^62).
    if records_clean is not None and records_clean(
            body, batch.records_count, min(max(earliest_delta, _INT64_MIN), _INT64_MAX),
            min(max(latest_delta, _INT64_MIN), _INT64_MAX), check_timestamps, compacted):
        return body
    body = bytes(body)  # indexing bytes is faster than a memoryview
    record_errors: list[tuple[int, str]] = []
    timestamp_errors = False
    size = len(body)
    position = 0
    try:
        for index in range(batch.records_count):
            # Each varint is decoded inline when it has one or two bytes (a record's length,
            # offset delta and value length take two from 64 bytes and 64 records on); a
            # function call per field would cost more than the rest of the walk.
            byte = body[position]
            if byte < 0x80:
                length, position = _ZIGZAG[byte], position + 1
            elif (high := body[position + 1]) < 0x80:
                raw = (byte & 0x7F) | (high << 7)
                length, position = (raw >> 1) ^ -(raw & 1), position + 2
            else:
                length, position = _read_varint(body, position)
            end = position + length  # a negative or overlong length disagrees with the fields below
            byte = body[position + 1]  # after the record attributes, unused
            if byte < 0x80:
                timestamp_delta, position = _ZIGZAG[byte], position + 2
            elif (high := body[position + 2]) < 0x80:
                raw = (byte & 0x7F) | (high << 7)
                timestamp_delta, position = (raw >> 1) ^ -(raw & 1), position + 3
            else:
                timestamp_delta, position = _read_varint(body, position + 1)
            byte = body[position]
            if byte < 0x80:
                offset_delta, position = _ZIGZAG[byte], position + 1
            elif (high := body[position + 1]) < 0x80:
                raw = (byte & 0x7F) | (high << 7)
                offset_delta, position = (raw >> 1) ^ -(raw & 1), position + 2
            else:
                offset_delta, position = _read_varint(body, position)
            byte = body[position]
            if byte < 0x80:
                key_length, position = _ZIGZAG[byte], position + 1
            else:
                key_length, position = _read_varint(body, position)
            if key_length >= 0:
                position += key_length
            elif compacted:
                record_errors.append((index, "a compacted topic does not accept records without a key"))
            byte = body[position]
            if byte < 0x80:
                value_length, position = _ZIGZAG[byte], position + 1
            elif (high := body[position + 1]) < 0x80:
                raw = (byte & 0x7F) | (high << 7)
                value_length, position = (raw >> 1) ^ -(raw & 1), position + 2
            else:
                value_length, position = _read_varint(body, position)
            if value_length > 0:
                position += value_length
            if body[position] == 0:  # no headers
                position += 1
            else:
                position = _skip_headers(body, position, index)
            if position != end:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record {index}: length {length} disagrees with its fields")
            if offset_delta != index:
                record_errors.append((index, f"offset delta {offset_delta}, expected {index}"))
            if check_timestamps and not earliest_delta <= timestamp_delta <= latest_delta:
                timestamp_errors |= _timestamp_error(record_errors, index, base_timestamp + timestamp_delta,
                                                     earliest_ms, latest_ms)
    except IndexError:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"records_count {batch.records_count}: the records run "
                         "past the end of the batch") from None
    if position != size:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{size - position} bytes after record {batch.records_count - 1}, "
                         f"the last of records_count {batch.records_count}")
    if record_errors:
        raise RecordValidationError(ErrorCode.INVALID_TIMESTAMP if timestamp_errors else ErrorCode.INVALID_RECORD,
                                    record_errors)
    return body


def _timestamp_error(record_errors: list[tuple[int, str]], index: int, timestamp_ms: int, earliest_ms: int,
                     latest_ms: int) -> bool:
    """A CreateTime timestamp out of range is INVALID_TIMESTAMP (True when one is added); a
    record without one (-1) is not checked."""
    if timestamp_ms == NO_TIMESTAMP:
        return False
    record_errors.append((index, f"timestamp {timestamp_ms} is out of range [{earliest_ms}, {latest_ms}] "
                                 "(message.timestamp.before.max.ms, message.timestamp.after.max.ms)"))
    return True


def _skip_headers(body: bytes, position: int, index: int) -> int:
    """Skip a record's headers (count varint first); a null header key is INVALID_RECORD."""
    count, position = _read_varint(body, position)
    if count < 0:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record {index}: header count {count}")
    for _ in range(count):
        key_length, position = _read_varint(body, position)
        if key_length < 0:
            raise KafkaError(ErrorCode.INVALID_RECORD, f"record {index}: a header key is null")
        position += key_length
        value_length, position = _read_varint(body, position)
        if value_length > 0:
            position += value_length
        if position > len(body):
            raise IndexError
    return position


def decompress_bounded(compression: int, data: memoryview, max_bytes: int) -> bytes:
    """Decompress a batch's records, refusing (MESSAGE_TOO_LARGE) once more than `max_bytes`
    come out, without producing more than max_bytes + 1 of them; bad input is CORRUPT_MESSAGE."""
    too_large = KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                           f"the batch's records decompress to more than max.message.bytes={max_bytes}")
    try:
        match compression:
            case CompressionType.GZIP:
                inflater = zlib.decompressobj(wbits=47)  # 32 + 15: gzip or zlib header
                out = inflater.decompress(data, max_bytes + 1)
                if len(out) > max_bytes:
                    raise too_large
                if not inflater.eof:
                    raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "the gzip stream ends early")
                return out
            case CompressionType.SNAPPY:
                if bytes(data[:8]) == XERIAL_MAGIC:
                    return _xerial_bounded(data, max_bytes, too_large)
                if cramjam.snappy.decompress_raw_len(data) > max_bytes:
                    raise too_large
                return bytes(cramjam.snappy.decompress_raw(data))
            case CompressionType.LZ4 | CompressionType.ZSTD:
                return _decompress_into_growing(compression, data, max_bytes, too_large)
    except (zlib.error, cramjam.DecompressionError, struct.error, ValueError) as e:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"cannot decompress codec {compression}: {e}") from e
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec id {compression}")


def _decompress_into_growing(compression: int, data: memoryview, max_bytes: int, too_large: KafkaError) -> bytes:
    """lz4 and zstd into a buffer that starts at DECOMPRESS_RATIO_GUESS times the input and
    grows fourfold while it fills up, up to max_bytes + 1: a buffer of max.message.bytes for
    every small batch would cost more than its decompression."""
    codec = cramjam.lz4 if compression == CompressionType.LZ4 else cramjam.zstd
    capacity = min(max(DECOMPRESS_BUFFER_BYTES_MIN, DECOMPRESS_RATIO_GUESS * len(data)), max_bytes + 1)
    while True:
        out = bytearray(capacity)
        try:
            written = codec.decompress_into(data, out)
        except cramjam.DecompressionError as e:
            if "whole buffer" not in str(e):
                raise
            if capacity > max_bytes:  # it filled max_bytes + 1 and had more
                raise too_large from None
            capacity = min(capacity * 4, max_bytes + 1)
            continue
        if written > max_bytes:
            raise too_large
        return bytes(memoryview(out)[:written])


def _xerial_bounded(view: memoryview, max_bytes: int, too_large: KafkaError) -> bytes:
    position = XERIAL_HEADER.size
    out = []
    total = 0
    while position < len(view):
        (block_bytes,) = _INT32.unpack_from(view, position)
        position += _INT32.size
        if block_bytes < 0 or position + block_bytes > len(view):
            raise ValueError(f"xerial block of {block_bytes} bytes overruns the stream")
        block = view[position : position + block_bytes]
        total += cramjam.snappy.decompress_raw_len(block)
        if total > max_bytes:
            raise too_large
        out.append(bytes(cramjam.snappy.decompress_raw(block)))
        position += block_bytes
    return b"".join(out)
