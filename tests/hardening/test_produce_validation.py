"""Record validation against a real `kspec broker`: a batch whose record count lies, one whose
compressed records expand far past max.message.bytes, and one with null keys on a compacted
topic are refused and nothing of them is stored; the null keys are named per record
(KIP-467 record_errors, with error_message)."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Producer

from reference.process import BrokerProcess
from reference.protocol.compression import CompressionType
from reference.protocol.errors import ErrorCode
from tests.broker.conftest import RawClient
from tests.broker.helpers import create_topic, list_offset, produce

from .batches import batch, record

LATEST = -1


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(str(tmp_path_factory.mktemp("validation") / "data")) as process:
        yield process


@pytest.fixture
def client(broker):
    connection = RawClient(broker.bootstrap)
    yield connection
    connection.close()


def test_lies_and_bombs_are_refused_and_nothing_is_stored(client):
    assert create_topic(client, "validated").error_code == 0
    lying = batch([record(0), record(1)], records_count=3)
    bomb = batch([record(0, value=b"\x00" * (64 << 20))], compression=CompressionType.ZSTD)
    assert len(bomb) < 100_000
    assert produce(client, "validated", lying).error_code == ErrorCode.CORRUPT_MESSAGE
    assert produce(client, "validated", bomb).error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert list_offset(client, "validated", LATEST).offset == 0, "nothing stored"
    stored = produce(client, "validated", batch([record(0), record(1)]))
    assert (stored.error_code, stored.base_offset) == (0, 0)


def test_null_keys_on_a_compacted_topic_get_per_record_errors(client):
    assert create_topic(client, "compacted", configs={"cleanup.policy": "compact"}).error_code == 0
    answer = produce(client, "compacted", batch([record(0), record(1, key=None), record(2)]))
    assert answer.error_code == ErrorCode.INVALID_RECORD and answer.error_message
    assert [(e.batch_index, "without a key" in e.batch_index_error_message) for e in answer.record_errors] == [(1, True)]
    assert list_offset(client, "compacted", LATEST).offset == 0, "nothing stored"


def test_librdkafka_fails_the_records_without_a_key_and_the_rest_of_their_batch_and_nothing_is_stored(broker, client):
    """librdkafka's test 0011: in one batch, the records named in record_errors fail with
    INVALID_RECORD and the others with _INVALID_DIFFERENT_RECORD (KIP-467). librdkafka does
    this when the response names two or more records; with exactly one it reports the
    partition's error, INVALID_RECORD, for every record of the batch (the same response shape)."""
    assert create_topic(client, "compacted-rdkafka", configs={"cleanup.policy": "compact"}).error_code == 0
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 100, "enable.idempotence": False,
                         "log_level": 0})
    reports: dict[bytes, KafkaError | None] = {}
    for value, key in ((b"a", b"k1"), (b"b", None), (b"c", b"k2"), (b"d", None)):
        producer.produce("compacted-rdkafka", value, key, partition=0,
                         on_delivery=lambda error, message: reports.__setitem__(message.value(), error))
    assert producer.flush(30) == 0
    assert {value: error.code() for value, error in reports.items()} == {
        b"a": KafkaError._INVALID_DIFFERENT_RECORD, b"b": KafkaError.INVALID_RECORD,
        b"c": KafkaError._INVALID_DIFFERENT_RECORD, b"d": KafkaError.INVALID_RECORD}
    assert list_offset(client, "compacted-rdkafka", LATEST).offset == 0
