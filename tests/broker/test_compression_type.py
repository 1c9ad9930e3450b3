"""compression.type against a real broker: a confluent-kafka producer's batches are stored in
the topic's codec (read back with a raw Fetch), and zstd needs Produce v7 (KIP-110)."""
from __future__ import annotations

from confluent_kafka import Producer

from reference.protocol.api_keys import ApiKey
from reference.protocol.compression import CompressionType
from reference.protocol.errors import ErrorCode
from reference.protocol.records import Record, build_batch, iter_batches

from .helpers import create_topic, fetch, produce_request

VALUES = [b"value-%03d-" % i * 10 for i in range(40)]


def _produce_with_confluent(broker, topic: str, codec: str) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 50})
    for value in VALUES:
        producer.produce(topic, value=value, key=b"k", partition=0)
    assert producer.flush(30) == 0


def _stored(client, topic: str) -> list:
    batches = list(iter_batches(fetch(client, topic, 0).records))
    assert batches and all(batch.crc_is_valid() for batch in batches)
    return batches


def test_a_zstd_topic_stores_lz4_and_uncompressed_batches_as_zstd(broker, client):
    for codec in ("lz4", "none"):
        topic = f"compress-zstd-{codec}"
        assert create_topic(client, topic, configs={"compression.type": "zstd"}).error_code == 0
        _produce_with_confluent(broker, topic, codec)
        batches = _stored(client, topic)
        assert {batch.compression for batch in batches} == {CompressionType.ZSTD}
        assert [record.value for batch in batches for record in batch.records()] == VALUES
        assert [record.offset for batch in batches for record in batch.records()] == list(range(len(VALUES)))


def test_an_uncompressed_topic_stores_gzip_batches_uncompressed(broker, client):
    assert create_topic(client, "compress-none", configs={"compression.type": "uncompressed"}).error_code == 0
    _produce_with_confluent(broker, "compress-none", "gzip")
    batches = _stored(client, "compress-none")
    assert {batch.compression for batch in batches} == {CompressionType.NONE}
    assert [record.value for batch in batches for record in batch.records()] == VALUES


def test_zstd_before_produce_v7_is_unsupported_compression_type(client):
    assert create_topic(client, "compress-v6").error_code == 0
    records = build_batch([Record(value=b"v")], compression=CompressionType.ZSTD)
    response = client.request(ApiKey.PRODUCE, 6, produce_request("compress-v6", records))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    response = client.request(ApiKey.PRODUCE, 7, produce_request("compress-v6", records))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE
