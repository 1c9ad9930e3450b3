"""compression.type honoured on append: a produced batch in another codec is rebuilt in the
topic's codec (Kafka's LogValidator), its records and producer metadata intact."""
from __future__ import annotations

import os
import time

import pytest

from reference.config import BrokerConfig
from reference.protocol.compression import CompressionType, decompress
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import (TIMESTAMP_TYPE_CREATE_TIME, Record, RecordBatch, build_batch, iter_batches,
                                        recompress)
from reference.storage.config import LogConfig
from reference.storage.log import Log

NOW_MS = int(time.time() * 1000)
RECORDS = [Record(0, NOW_MS - 5 + i, f"k{i}".encode(), b"value-%d" % i * 20, (("h", b"x"),)) for i in range(50)]


def _appended(tmp_path, topic_configs: dict[str, str], codec: int, **batch_fields) -> RecordBatch:
    log = Log(str(tmp_path / "p-0"), LogConfig.from_properties(topic_configs), now_ms=NOW_MS)
    log.append_as_leader(build_batch([Record(0, NOW_MS, b"a", b"b", ())]), 0, NOW_MS)  # so the next starts at 1
    log.append_as_leader(build_batch(RECORDS, compression=codec, **batch_fields), 3, NOW_MS)
    stored = list(iter_batches(log.read(1, 1 << 20).records))
    log.close()
    assert len(stored) == 1 and stored[0].crc_is_valid()
    return stored[0]


@pytest.mark.parametrize("topic_codec,produced", [
    ("zstd", CompressionType.LZ4), ("zstd", CompressionType.NONE), ("gzip", CompressionType.SNAPPY),
    ("lz4", CompressionType.GZIP), ("snappy", CompressionType.ZSTD), ("uncompressed", CompressionType.ZSTD)])
def test_a_batch_is_stored_in_the_topic_codec_with_its_records_and_producer_metadata(tmp_path, topic_codec, produced):
    stored = _appended(tmp_path, {"compression.type": topic_codec}, produced,
                       producer_id=7, producer_epoch=2, base_sequence=0, is_transactional=True)
    expected = CompressionType.NONE if topic_codec == "uncompressed" else CompressionType[topic_codec.upper()]
    assert stored.compression == expected
    assert (stored.base_offset, stored.last_offset, stored.partition_leader_epoch) == (1, 50, 3)
    assert (stored.producer_id, stored.producer_epoch, stored.base_sequence) == (7, 2, 0)
    assert stored.is_transactional and not stored.is_control and stored.timestamp_type == TIMESTAMP_TYPE_CREATE_TIME
    assert stored.max_timestamp == max(record.timestamp for record in RECORDS)
    assert [r[1:] for r in stored.records()] == [r[1:] for r in RECORDS]
    assert [r.offset for r in stored.records()] == list(range(1, 51))


def test_producer_keeps_the_producers_codec_byte_for_byte(tmp_path):
    produced = build_batch(RECORDS, compression=CompressionType.LZ4)
    stored = _appended(tmp_path, {}, CompressionType.LZ4)
    assert stored.compression == CompressionType.LZ4
    assert bytes(stored.buffer[61:]) == produced[61:]  # the payload is not touched


def test_the_codec_level_is_the_topics(tmp_path):
    fast = _appended(tmp_path / "fast", {"compression.type": "gzip", "compression.gzip.level": "1"}, 0)
    best = _appended(tmp_path / "best", {"compression.type": "gzip", "compression.gzip.level": "9"}, 0)
    assert fast.records() == best.records() and fast.buffer[61:] != best.buffer[61:]


def test_log_append_time_survives_recompression(tmp_path):
    stored = _appended(tmp_path, {"compression.type": "zstd", "message.timestamp.type": "LogAppendTime"}, 0)
    assert stored.compression == CompressionType.ZSTD and stored.max_timestamp == NOW_MS
    assert all(record.timestamp == NOW_MS for record in stored.records())


def test_a_recompressed_batch_over_max_message_bytes_is_refused(tmp_path):
    incompressible = [Record(0, NOW_MS, None, os.urandom(2048), ())]
    produced = build_batch(incompressible, compression=CompressionType.NONE)
    log = Log(str(tmp_path / "p-0"), LogConfig.from_properties(
        {"compression.type": "gzip", "max.message.bytes": str(len(produced))}), now_ms=NOW_MS)
    try:
        log.append_as_leader(produced, 0, NOW_MS)  # fits as sent; gzip's header makes it bigger
        pytest.fail("expected MESSAGE_TOO_LARGE")
    except KafkaError as e:
        assert e.code == ErrorCode.MESSAGE_TOO_LARGE
    finally:
        assert log.log_end_offset == 0
        log.close()


def test_recompress_keeps_control_and_header_fields():
    control = RecordBatch(build_batch(RECORDS[:1], compression=CompressionType.GZIP, is_control=True,
                                      is_transactional=True, producer_id=3, base_offset=9))
    records_body = decompress(control.compression, control.buffer[61:])
    rebuilt = RecordBatch(recompress(control, records_body, CompressionType.NONE))
    assert rebuilt.is_control and rebuilt.is_transactional and rebuilt.crc_is_valid()
    assert (rebuilt.base_offset, rebuilt.producer_id, rebuilt.records_count) == (9, 3, 1)
    assert rebuilt.compression == CompressionType.NONE and rebuilt.records() == control.records()


def test_the_broker_property_compression_type_is_the_topics_default():
    defaults = BrokerConfig.from_properties({"compression.type": "zstd"}).topic_defaults()
    assert LogConfig.from_properties(defaults).target_compression == CompressionType.ZSTD
    assert LogConfig.from_properties({**defaults, "compression.type": "producer"}).target_compression is None
    with pytest.raises(ValueError, match="compression.type must be one of"):
        BrokerConfig.from_properties({"compression.type": "brotli"})
