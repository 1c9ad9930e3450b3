"""RecordBatch v2 and legacy message sets, checked against the record builders of real
clients (aiokafka for every codec, kafka-python for uncompressed/gzip and magic 0/1)."""
from __future__ import annotations

import cramjam
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AiokafkaBatchBuilder
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from reference.protocol import compression
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import (
    CONTROL_TYPE_COMMIT, ControlRecord, LegacyRecordBatch, Record, RecordBatch, TIMESTAMP_TYPE_LOG_APPEND_TIME,
    assign_offsets, build_batch, build_control_batch, iter_batches, validate_produce,
)

CODECS = [0, 1, 2, 3, 4]
RECORDS = [Record(0, 1_700_000_000_000 + i, f"key-{i}".encode() if i % 3 else None, f"value-{i}".encode() * 20,
                  (("trace", b"t%d" % i),) if i % 2 else ()) for i in range(50)]


def records_of(batch: RecordBatch) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()]


def expected(base_offset: int = 0) -> list[tuple]:
    return [(base_offset + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(RECORDS)]


@pytest.mark.parametrize("codec", CODECS)
def test_batches_written_by_aiokafka_parse_for_every_codec(codec):
    builder = AiokafkaBatchBuilder(2, codec, 0, 7, 1, 100, 1 << 20)
    for i, r in enumerate(RECORDS):
        builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
    (batch,) = validate_produce(bytes(builder.build()), max_message_bytes=1 << 20)
    assert batch.crc_is_valid() and batch.compression == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 1, 100)
    assert batch.records_count == len(RECORDS) and batch.last_offset_delta == len(RECORDS) - 1
    assert batch.max_timestamp == RECORDS[-1].timestamp
    assert records_of(batch) == expected()


@pytest.mark.parametrize("codec", [0, 1])
def test_batches_written_by_kafka_python_parse(codec):
    builder = KafkaPythonBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 20)
    for i, r in enumerate(RECORDS):
        builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
    batch = RecordBatch(bytes(builder.build()))
    assert batch.crc_is_valid()
    assert records_of(batch) == expected()


@pytest.mark.parametrize("codec", CODECS)
def test_build_batch_is_read_back_by_kafka_python(codec):
    data = build_batch(RECORDS, base_offset=40, compression=codec, producer_id=3, producer_epoch=2, base_sequence=9)
    batch = RecordBatch(data)
    assert batch.crc_is_valid() and batch.size_bytes == len(data)
    assert records_of(batch) == expected(40)
    theirs = KafkaPythonBatch(data)
    assert theirs.validate_crc()
    assert (theirs.base_offset, theirs.producer_id, theirs.base_sequence, theirs.compression_type) == (40, 3, 9, codec)
    if codec in (0, 1):  # kafka-python here has no snappy/lz4/zstd library installed
        assert [(r.offset, r.key, r.value) for r in theirs] == [(o, k, v) for o, _, k, v, _ in expected(40)]


def test_snappy_raw_block_as_librdkafka_writes_it_is_read():
    payload = b"librdkafka writes one raw snappy block" * 100
    raw = bytes(cramjam.snappy.compress_raw(payload))
    assert not raw.startswith(compression.XERIAL_MAGIC)
    assert compression.decompress(compression.CompressionType.SNAPPY, raw) == payload


def test_snappy_writes_xerial_framing_in_32k_blocks():
    payload = bytes(range(256)) * 1000  # 256000 bytes: 8 blocks
    framed = compression.compress(compression.CompressionType.SNAPPY, payload)
    assert framed.startswith(compression.XERIAL_MAGIC)
    assert compression.decompress(compression.CompressionType.SNAPPY, framed) == payload


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_garbage_compressed_payload_is_corrupt_message(codec):
    with pytest.raises(KafkaError) as error:
        compression.decompress(codec, b"\x00definitely not compressed\xff" * 3)
    assert error.value.code == ErrorCode.CORRUPT_MESSAGE


def test_assign_offsets_patches_header_and_log_append_time_recomputes_crc():
    data = bytearray(build_batch(RECORDS[:3]))
    assign_offsets(data, 1000, 5)
    batch = RecordBatch(data)
    assert (batch.base_offset, batch.partition_leader_epoch, batch.last_offset) == (1000, 5, 1002)
    assert batch.crc_is_valid()
    assign_offsets(data, 1000, 5, log_append_time_ms=42)
    assert batch.crc_is_valid() and batch.timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records()] == [42, 42, 42]
    assert KafkaPythonBatch(bytes(data)).validate_crc()


def test_control_batch_round_trip():
    batch = RecordBatch(build_control_batch(CONTROL_TYPE_COMMIT, producer_id=11, producer_epoch=3,
                                            coordinator_epoch=8, timestamp_ms=5))
    assert batch.is_control and batch.is_transactional and batch.crc_is_valid()
    assert ControlRecord.from_record(batch.records()[0]) == ControlRecord(CONTROL_TYPE_COMMIT, 8)


# ------------------------------------------------------------ validate_produce (PRO-1)


def produce_error(data: bytes, max_message_bytes: int = 1 << 20) -> ErrorCode:
    with pytest.raises(KafkaError) as error:
        validate_produce(data, max_message_bytes=max_message_bytes)
    return error.value.code


ONE = build_batch(RECORDS[:5], producer_id=1, producer_epoch=0, base_sequence=0)


def test_validate_produce_accepts_one_good_batch():
    (batch,) = validate_produce(ONE, max_message_bytes=len(ONE))
    assert batch.records_count == 5


def test_validate_produce_rejections_follow_kafka():
    assert produce_error(b"") == ErrorCode.INVALID_RECORD
    assert produce_error(ONE[:-1]) == ErrorCode.CORRUPT_MESSAGE
    assert produce_error(ONE + b"\x00" * 7) == ErrorCode.CORRUPT_MESSAGE
    assert produce_error(ONE + ONE) == ErrorCode.INVALID_RECORD
    assert produce_error(ONE, max_message_bytes=len(ONE) - 1) == ErrorCode.MESSAGE_TOO_LARGE
    flipped = bytearray(ONE)
    flipped[-1] ^= 0x01
    assert produce_error(bytes(flipped)) == ErrorCode.CORRUPT_MESSAGE
    bad_count = bytearray(ONE)
    bad_count[57:61] = (4).to_bytes(4, "big")
    assign_offsets(bad_count, 0, -1, log_append_time_ms=0)  # re-CRC so only the count is wrong
    assert produce_error(bytes(bad_count)) == ErrorCode.INVALID_RECORD
    control = build_control_batch(CONTROL_TYPE_COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0,
                                  timestamp_ms=0)
    assert produce_error(control) == ErrorCode.INVALID_RECORD
    no_sequence = build_batch(RECORDS[:1], producer_id=1, producer_epoch=0)
    assert produce_error(no_sequence) == ErrorCode.INVALID_RECORD
    legacy = bytes(_legacy_message_set(1, 0))
    assert produce_error(legacy) == ErrorCode.INVALID_RECORD


# ------------------------------------------------------------ legacy message sets


def _legacy_message_set(magic: int, codec: int) -> bytearray:
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i, r in enumerate(RECORDS[:10]):
        builder.append(i, r.timestamp if magic else None, r.key, r.value)
    return builder.build()


@pytest.mark.parametrize("magic,codec", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_legacy_message_sets_are_readable(magic, codec):
    data = _legacy_message_set(magic, codec)
    if magic == 1 and codec:  # as a broker stores it: the wrapper carries the last inner offset (KIP-31)
        data[0:8] = (9).to_bytes(8, "big")
    batches = list(iter_batches(data))
    assert all(isinstance(b, LegacyRecordBatch) and b.crc_is_valid() for b in batches)
    assert sum(b.size_bytes for b in batches) == len(data)
    records = [r for b in batches for r in b.records()]
    assert [(r.offset, r.key, r.value) for r in records] == [(i, r.key, r.value) for i, r in enumerate(RECORDS[:10])]
    if magic == 1:
        assert [r.timestamp for r in records] == [r.timestamp for r in RECORDS[:10]]


def test_iter_batches_stops_at_a_truncated_tail():
    data = build_batch(RECORDS[:2]) + build_batch(RECORDS[2:4], base_offset=2)
    for cut in range(len(data)):
        batches = list(iter_batches(data[:cut]))
        valid_bytes = sum(b.size_bytes for b in batches)
        assert valid_bytes <= cut and len(batches) == (0 if cut < len(data) // 2 else 1)
