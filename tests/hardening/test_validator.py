"""LogValidator on its own: every record of a batch is walked, compressed or not, and a batch
with anything wrong in it is refused with Kafka's error (per-record errors, KIP-467)."""
from __future__ import annotations

import time
import tracemalloc

import pytest

from reference.protocol.compression import CompressionType, compress
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import RecordBatch, validate_produce
from reference.protocol.validator import RecordValidationError, ValidationRules, validate_records

from .batches import batch, record

HOUR_MS = 3600 * 1000
RULES = ValidationRules(max_message_bytes=1 << 20, compacted=False, log_append_time=False,
                        timestamp_before_max_ms=(1 << 63) - 1, timestamp_after_max_ms=HOUR_MS)
COMPACTED = ValidationRules(**{**RULES.__dict__, "compacted": True})


def refusal(raw: bytes, rules: ValidationRules = RULES) -> KafkaError:
    (checked,) = validate_produce(raw, max_message_bytes=rules.max_message_bytes)
    with pytest.raises(KafkaError) as raised:
        validate_records(checked, rules, int(time.time() * 1000))
    return raised.value


@pytest.mark.parametrize("compression", list(CompressionType))
def test_a_well_formed_batch_passes_compressed_or_not(compression):
    raw = batch([record(i, headers=((b"h", b"x"), (b"n", None))) for i in range(50)], compression=compression)
    validate_records(RecordBatch(raw), RULES, int(time.time() * 1000))


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD])
@pytest.mark.parametrize("records_count", [2, 4])
def test_a_records_count_that_lies_is_corrupt(compression, records_count):
    raw = batch([record(0), record(1), record(2)], records_count=records_count, compression=compression)
    assert refusal(raw).code == ErrorCode.CORRUPT_MESSAGE


def test_a_varint_longer_than_ten_bytes_is_corrupt():
    assert refusal(batch(b"\xff" * 12 + b"\x00", records_count=1)).code == ErrorCode.CORRUPT_MESSAGE


def test_a_record_whose_length_disagrees_with_its_fields_is_corrupt():
    good = record(0)
    assert refusal(batch([bytes([good[0] + 2]) + good[1:] + b"\x00\x00"])).code == ErrorCode.CORRUPT_MESSAGE


def test_compressed_bytes_that_do_not_decompress_are_corrupt():
    stream = bytearray(compress(CompressionType.GZIP, b"".join(record(i, value=b"v" * 100) for i in range(10))))
    stream[12:20] = b"\xff" * 8  # inside the deflate stream
    raw = batch(bytes(stream), records_count=10, compression=CompressionType.GZIP, compressed=True)
    assert refusal(raw).code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("compression", [c for c in CompressionType if c != CompressionType.NONE])
def test_a_batch_that_decompresses_past_max_message_bytes_is_too_large(compression):
    bomb = batch([record(0, value=b"\x00" * (4 << 20))], compression=compression)
    assert len(bomb) < RULES.max_message_bytes
    assert refusal(bomb).code == ErrorCode.MESSAGE_TOO_LARGE


def test_a_null_header_key_is_an_invalid_record():
    assert refusal(batch([record(0, headers=((None, b"v"),))])).code == ErrorCode.INVALID_RECORD


def test_null_keys_on_a_compacted_topic_are_named_by_their_index_in_the_batch():
    error = refusal(batch([record(0), record(1, key=None), record(2), record(3, key=None)]), COMPACTED)
    assert isinstance(error, RecordValidationError) and error.code == ErrorCode.INVALID_RECORD
    assert [index for index, _ in error.record_errors] == [1, 3]
    assert "without a key" in error.record_errors[0][1]


def test_offset_deltas_must_count_up_from_zero():
    error = refusal(batch([record(0), record(2), record(1)]))
    assert error.code == ErrorCode.INVALID_RECORD and [i for i, _ in error.record_errors] == [1, 2]


def test_timestamps_outside_the_before_and_after_bounds_are_invalid_timestamps():
    now_ms = int(time.time() * 1000)
    rules = ValidationRules(**{**RULES.__dict__, "timestamp_before_max_ms": HOUR_MS})
    raw = batch([record(0), record(1, timestamp_delta=2 * HOUR_MS), record(2, timestamp_delta=-2 * HOUR_MS)],
                base_timestamp_ms=now_ms)
    error = refusal(raw, rules)
    assert error.code == ErrorCode.INVALID_TIMESTAMP and [i for i, _ in error.record_errors] == [1, 2]
    log_append = ValidationRules(**{**rules.__dict__, "log_append_time": True})
    validate_records(RecordBatch(raw), log_append, now_ms)  # the broker's clock stamps them: not checked


@pytest.mark.parametrize("compression", [CompressionType.LZ4, CompressionType.ZSTD])
def test_a_small_batch_is_decompressed_into_a_small_buffer_whatever_the_limit(compression):
    """Found by bench_fuzz: every lz4 or zstd batch got a buffer of max.message.bytes + 1."""
    raw = batch([record(i, value=b"v" * 100) for i in range(10)], compression=compression)
    tracemalloc.start()
    try:
        validate_records(RecordBatch(raw), ValidationRules(**{**RULES.__dict__, "max_message_bytes": 1 << 30}),
                         int(time.time() * 1000))
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_bytes < 1 << 20, peak_bytes
