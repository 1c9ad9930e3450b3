"""The broker over a real socket, request by request, with kspec's codec as the client."""
from __future__ import annotations

import struct
import threading
import time
import uuid

import pytest

from reference.protocol.api_keys import ApiKey
from reference.protocol.api_versions import SUPPORTED_API_VERSIONS
from reference.protocol.errors import ErrorCode
from reference.protocol.messages import decode_response
from reference.protocol.primitives import ZERO_UUID
from reference.protocol.records import CRC_OFFSET, iter_batches

from .conftest import RawClient
from .helpers import (
    batch_of, create_topic, fetch, fetch_request, list_offset, produce, produce_request, FETCH_VERSION,
)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_answers_every_version_with_the_advertised_table(client, version):
    body = {"client_software_name": "kspec-test", "client_software_version": "1.0"}
    response = client.request(ApiKey.API_VERSIONS, version, body)
    assert response.error_code == ErrorCode.NONE
    advertised = {key.api_key: (key.min_version, key.max_version) for key in response.api_keys}
    assert advertised == {int(key): versions for key, versions in SUPPORTED_API_VERSIONS.items()}
    assert advertised[ApiKey.PRODUCE][0] == 0  # KAFKA-18659


def test_api_versions_v3_with_an_invalid_software_name_is_invalid_request(client):
    body = {"client_software_name": "-bad name-", "client_software_version": "1.0"}
    assert client.request(ApiKey.API_VERSIONS, 3, body).error_code == ErrorCode.INVALID_REQUEST


def test_unsupported_api_versions_version_gets_the_v0_body(client):
    # A v5 request (header v2, flexible): the broker answers in the v0 layout (KIP-511).
    client_id = b"kspec-test"
    client.send_raw(_frame(struct.pack(">hhih", ApiKey.API_VERSIONS, 5, 77, len(client_id)) + client_id + b"\x00\x00"))
    frame = client.receive_frame()
    assert frame == struct.pack(">ihihhh", 77, ErrorCode.UNSUPPORTED_VERSION, 1, ApiKey.API_VERSIONS, 0, 4)
    correlation_id, body = decode_response(ApiKey.API_VERSIONS, 5, frame)
    assert (correlation_id, body.error_code) == (77, ErrorCode.UNSUPPORTED_VERSION)


@pytest.mark.parametrize("api_key, version", [(ApiKey.PRODUCE, 2), (ApiKey.FETCH, 3), (ApiKey.FIND_COORDINATOR, 7),
                                              (1000, 0)])
def test_unsupported_requests_close_only_that_connection(broker, client, api_key, version):
    client.send_raw(_frame(struct.pack(">hhih", api_key, version, 1, 1) + b"x" + b"\x00" * 16))
    assert client.is_closed_by_peer()
    other = RawClient(broker.bootstrap)
    assert other.request(ApiKey.API_VERSIONS, 0, {}).error_code == ErrorCode.NONE
    other.close()


def test_metadata_auto_creates_a_topic_with_an_id_and_names_this_node_controller(client):
    response = client.request(ApiKey.METADATA, 12, {"topics": [{"name": "auto-created", "topic_id": ZERO_UUID}],
                                                    "allow_auto_topic_creation": True})
    assert response.controller_id == 0 and [b.node_id for b in response.brokers] == [0]
    (topic,) = response.topics
    assert topic.error_code == ErrorCode.NONE and topic.topic_id != ZERO_UUID
    assert [(p.partition_index, p.leader_id, p.isr_nodes) for p in topic.partitions] == [(0, 0, [0])]
    by_id = client.request(ApiKey.METADATA, 12, {"topics": [{"name": None, "topic_id": topic.topic_id}]})
    assert by_id.topics[0].name == "auto-created"


@pytest.mark.parametrize("name, allow, error", [
    ("not-created", False, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ("bad/name", True, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ("..", True, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ("x" * 250, True, ErrorCode.INVALID_TOPIC_EXCEPTION),
])
def test_metadata_refuses_unknown_or_invalid_topics(client, name, allow, error):
    response = client.request(ApiKey.METADATA, 4, {"topics": [{"name": name}], "allow_auto_topic_creation": allow})
    assert response.topics[0].error_code == error


def test_produce_with_acks_0_sends_no_response(client):
    create_topic(client, "acks-zero")
    client.send(ApiKey.PRODUCE, 9, produce_request("acks-zero", batch_of([b"a"]), acks=0))
    correlation_id = client.send(ApiKey.API_VERSIONS, 0, {})
    assert client.receive(ApiKey.API_VERSIONS, 0, correlation_id).error_code == ErrorCode.NONE
    assert list_offset(client, "acks-zero", -1).offset == 1


def test_a_flipped_crc_byte_is_corrupt_message_and_the_log_is_untouched(client):
    create_topic(client, "crc")
    produce(client, "crc", batch_of([b"good"]))
    corrupt = bytearray(batch_of([b"bad"]))
    corrupt[CRC_OFFSET] ^= 0xFF
    assert produce(client, "crc", bytes(corrupt)).error_code == ErrorCode.CORRUPT_MESSAGE
    assert list_offset(client, "crc", -1).offset == 1
    records = fetch(client, "crc", 0).records
    assert [r.value for b in iter_batches(records) for r in b.records()] == [b"good"]


def test_a_batch_over_max_message_bytes_is_message_too_large(client):
    create_topic(client, "large")  # the broker runs with message.max.bytes=100000
    assert produce(client, "large", batch_of([b"x" * 100_001])).error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert list_offset(client, "large", -1).offset == 0


def test_fetch_outside_the_log_is_offset_out_of_range(client):
    create_topic(client, "range")
    produce(client, "range", batch_of([b"a", b"b"]))
    assert fetch(client, "range", 2).error_code == ErrorCode.NONE  # at the end: empty, not an error
    assert fetch(client, "range", 3).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert fetch(client, "range", -1).error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_fetch_reports_watermarks_and_serves_whole_batches(client):
    create_topic(client, "watermarks")
    for i in range(3):
        produce(client, "watermarks", batch_of([b"%d" % i, b"%d" % i]))
    answer = fetch(client, "watermarks", 3)
    assert (answer.high_watermark, answer.last_stable_offset, answer.log_start_offset) == (6, 6, 0)
    assert [b.base_offset for b in iter_batches(answer.records)] == [2, 4]  # the batch holding 3 is whole


def test_fetch_by_topic_id_and_an_unknown_id(client):
    topic_id = create_topic(client, "by-id").topic_id
    produce(client, "by-id", batch_of([b"a"]))
    request = fetch_request("by-id", 0)
    request["topics"][0]["topic_id"] = topic_id
    answer = client.request(ApiKey.FETCH, 13, request).responses[0]
    assert answer.topic_id == topic_id and answer.partitions[0].high_watermark == 1
    request["topics"][0]["topic_id"] = uuid.uuid4()
    assert client.request(ApiKey.FETCH, 13, request).responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_list_offsets_earliest_latest_max_timestamp_and_by_time(client):
    create_topic(client, "times")
    for timestamp_ms in (1000, 3000, 2000):
        produce(client, "times", batch_of([b"v"], timestamp_ms=timestamp_ms))
    assert list_offset(client, "times", -2).offset == 0
    assert list_offset(client, "times", -1).offset == 3
    assert (list_offset(client, "times", -3).offset, list_offset(client, "times", -3).timestamp) == (1, 3000)
    assert (list_offset(client, "times", 1500).offset, list_offset(client, "times", 1500).timestamp) == (1, 3000)
    assert list_offset(client, "times", 9999).offset == -1


def test_a_long_poll_fetch_returns_when_data_arrives(broker, client):
    create_topic(client, "long-poll")
    started = time.monotonic()
    assert fetch(client, "long-poll", 0, max_wait_ms=300, min_bytes=1).records in (b"", None)
    assert 0.25 <= time.monotonic() - started < 2

    def produce_later():
        time.sleep(0.3)
        producer = RawClient(broker.bootstrap)
        produce(producer, "long-poll", batch_of([b"late"]))
        producer.close()

    threading.Thread(target=produce_later).start()
    started = time.monotonic()
    answer = fetch(client, "long-poll", 0, max_wait_ms=10_000, min_bytes=1)
    assert time.monotonic() - started < 5
    assert [r.value for b in iter_batches(answer.records) for r in b.records()] == [b"late"]


def test_an_oversize_frame_closes_only_that_connection(broker, client):
    create_topic(client, "oversize")
    produce(client, "oversize", batch_of([b"kept"]))
    bystander = RawClient(broker.bootstrap)
    client.send_raw(struct.pack(">i", 2_000_001))  # socket.request.max.bytes=2000000
    assert client.is_closed_by_peer()
    assert fetch(bystander, "oversize", 0).high_watermark == 1
    bystander.close()


def test_fetch_honours_max_bytes_but_returns_one_batch_at_least(client):
    create_topic(client, "max-bytes")
    for _ in range(4):
        produce(client, "max-bytes", batch_of([b"x" * 1000]))
    one = fetch(client, "max-bytes", 0, max_bytes=10)
    assert len(list(iter_batches(one.records))) == 1  # KIP-74
    two = fetch(client, "max-bytes", 0, max_bytes=2200)
    assert len(list(iter_batches(two.records))) == 2


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body
