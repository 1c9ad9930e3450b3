"""Protocol layer: exact requests through kspec's codec, exact answers, malformed input (PRO-1).

A malformed or unsupported request must get an error code or a closed connection, never a
hang, a garbled answer or a change to stored data. Responses must follow the message
definitions: a client that decodes them as specified must be able to.
"""
from __future__ import annotations

import struct

import pytest

from conformance import ops
from conformance.ops import expect
from conformance.target import error_name
from conformance.wire import ConnectionClosed, WireTimeout
from reference.protocol import schema
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from reference.protocol.messages import ProtocolDecodeError, decode_response, encode_request
from reference.protocol.records import CRC_OFFSET

COLUMN = "wire"
ANSWER_TIMEOUT_S = 10.0  # a broker must answer or close within this
API_KEY_UNKNOWN = 32_000


def _expect_answer_or_close(wire, frame: bytes) -> None:
    """Sends a frame; fails unless the broker answers or closes the connection in time."""
    wire.send_frame(frame)
    try:
        wire.receive_frame(timeout_s=ANSWER_TIMEOUT_S)
    except ConnectionClosed:
        pass  # closing is an accepted answer
    except WireTimeout:
        raise AssertionError(f"expected an error answer or a closed connection within {ANSWER_TIMEOUT_S:.0f} s; "
                             f"seen silence after frame {frame[:64].hex()}") from None


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


@pytest.mark.guarantee("PRO-1")
def test_api_versions_v0_lists_api_versions_itself(wire):
    response = wire.request(ApiKey.API_VERSIONS, 0, {})
    keys = {entry.api_key: (entry.min_version, entry.max_version) for entry in response.api_keys}
    expect(response.error_code == ErrorCode.NONE, "ApiVersions v0 to succeed", error_name(response.error_code))
    expect(ApiKey.API_VERSIONS in keys and keys[ApiKey.API_VERSIONS][0] == 0,
           "ApiVersions listed with min version 0 (every client starts there)", keys.get(ApiKey.API_VERSIONS))
    expect(all(low <= high for low, high in keys.values()), "min <= max for every API", keys)


@pytest.mark.guarantee("PRO-1")
def test_unsupported_api_versions_version_is_answered_in_the_v0_layout(wire, target):
    """KIP-511: a client may open with a newer ApiVersions than the broker knows; the broker answers
    UNSUPPORTED_VERSION in the v0 layout so the client can read it and retry."""
    high = target.capabilities.api_versions[ApiKey.API_VERSIONS][1]
    body_version = max(3, min(high, schema.valid_versions(ApiKey.API_VERSIONS)[1]))  # a flexible layout
    frame = bytearray(encode_request(ApiKey.API_VERSIONS, body_version, 7, "kspec-conformance",
                                     {"client_software_name": "kspec", "client_software_version": "1"}))
    struct.pack_into(">h", frame, 6, high + 1)  # the request's api_version, past the broker's max
    wire.send_frame(bytes(frame))
    frame_body = wire.receive_frame(timeout_s=ANSWER_TIMEOUT_S)
    try:
        correlation_id, body = decode_response(ApiKey.API_VERSIONS, 0, frame_body)
    except ProtocolDecodeError as error:
        raise AssertionError(f"expected UNSUPPORTED_VERSION in the ApiVersions v0 layout (int16 error, int32 count, "
                             f"entries); seen bytes {frame_body.hex()} that do not decode as v0: {error}") from None
    expect(correlation_id == 7, "the request's correlation id 7", correlation_id)
    expect(body.error_code == ErrorCode.UNSUPPORTED_VERSION, "UNSUPPORTED_VERSION (35)", error_name(body.error_code))
    expect(any(e.api_key == ApiKey.API_VERSIONS for e in body.api_keys),
           "the ApiVersions range in the answer, for the client's retry", body.api_keys)


@pytest.mark.guarantee("PRO-1")
def test_metadata_controller_id_names_a_listed_broker(target):
    """Clients send admin requests and (kafkajs) idempotent InitProducerId to the controller."""
    caps = target.refresh_capabilities()
    expect(caps.broker(caps.controller_id) is not None,
           f"Metadata ControllerId to be one of the brokers {[b.node_id for b in caps.brokers]}",
           f"ControllerId {caps.controller_id}")


@pytest.mark.guarantee("PRO-1")
def test_produce_with_acks_0_gets_no_response(target):
    """With acks=0 the broker sends no Produce response: the client keeps no request in flight,
    so any answer is read as the answer to its next request."""
    topic = target.create_topic("acks0")
    caps = target.capabilities
    with target.leader_wire(topic) as wire:
        _acks_0_then_metadata(wire, caps, topic)


def _acks_0_then_metadata(wire, caps, topic: str) -> None:
    version = caps.version_or_skip(ApiKey.PRODUCE, *ops.PRODUCE_RANGE)
    produce_id = wire.send(ApiKey.PRODUCE, version, ops.produce_body(topic, ops.values_batch([b"a0"]), 0, 0))
    metadata_version = caps.version_or_skip(ApiKey.METADATA, 1, 12)
    metadata_id = wire.send(ApiKey.METADATA, metadata_version, {"topics": [], "allow_auto_topic_creation": False})
    first = wire.receive_frame(timeout_s=ANSWER_TIMEOUT_S)
    (correlation_id,) = struct.unpack_from(">i", first, 0)
    expect(correlation_id == metadata_id, f"the Metadata response (correlation id {metadata_id}) first",
           f"a response with correlation id {correlation_id}"
           + (" — a response to the acks=0 Produce" if correlation_id == produce_id else ""))


@pytest.mark.guarantee("PRO-1")
@pytest.mark.parametrize("case", ["size-negative", "size-huge", "header-truncated", "api-key-unknown",
                                  "version-unsupported", "body-truncated", "body-garbage"])
def test_malformed_request_gets_error_or_close_and_leaves_data_untouched(case, target):
    caps = target.capabilities
    topic = target.create_topic(f"pro1-{case}")
    with target.leader_wire(topic) as wire:
        before = ops.produce(wire, caps, topic, ops.values_batch([b"kept-1", b"kept-2"]))
        expect(before.error_code == 0, "the setup produce to succeed", error_name(before.error_code))
    version = caps.version_or_skip(ApiKey.PRODUCE, *ops.PRODUCE_RANGE)
    good = encode_request(ApiKey.PRODUCE, version, 1, "kspec-conformance",
                          ops.produce_body(topic, ops.values_batch([b"must-not-land"]), 0, -1))
    frames = {
        "size-negative": struct.pack(">i", -5) + good[4:],
        "size-huge": struct.pack(">i", 0x7FFF_FFF0) + good[4:],
        "header-truncated": _frame(good[4:9]),
        "api-key-unknown": _frame(struct.pack(">hhi", API_KEY_UNKNOWN, 0, 1) + b"\x00\x00"),
        "version-unsupported": _frame(struct.pack(">hhi", ApiKey.PRODUCE, 999, 1) + good[12:]),
        "body-truncated": _frame(good[4:len(good) - 40]),
        "body-garbage": _frame(good[4:20] + bytes(range(256)) * 4),
    }
    with target.leader_wire(topic) as wire:
        _expect_answer_or_close(wire, frames[case])
    with target.leader_wire(topic) as wire:
        stored = ops.read_all(wire, caps, topic)
    expect([r.value for r in stored] == [b"kept-1", b"kept-2"], "the two records stored before, and nothing else",
           [r.value for r in stored])


@pytest.mark.guarantee("PRO-1")
def test_batch_with_bad_crc_is_rejected_with_corrupt_message(target):
    caps = target.capabilities
    topic = target.create_topic("crc")
    with target.leader_wire(topic) as wire:
        _produce_bad_crc(wire, caps, topic)
    with target.leader_wire(topic) as fresh:
        expect(ops.high_watermark(fresh, caps, topic) == 0, "nothing stored", "records in the log")


def _produce_bad_crc(wire, caps, topic: str) -> None:
    batch = bytearray(ops.values_batch([b"x"]))
    struct.pack_into(">I", batch, CRC_OFFSET, (struct.unpack_from(">I", batch, CRC_OFFSET)[0] ^ 0xFFFF) & 0xFFFFFFFF)
    try:
        response = ops.produce(wire, caps, topic, bytes(batch))
    except ConnectionClosed:
        response = None  # closing the connection is an accepted answer
    if response is not None:
        expect(response.error_code == ErrorCode.CORRUPT_MESSAGE, "CORRUPT_MESSAGE (2) for a batch whose CRC is wrong",
               error_name(response.error_code))


@pytest.mark.guarantee("PRO-1")
def test_fetch_and_produce_for_unknown_partitions_answer_unknown_topic_or_partition(wire, target):
    caps = target.capabilities
    topic = target.create_topic("unknown-partition")  # any broker must answer for a partition that does not exist
    produced = ops.produce(wire, caps, topic, ops.values_batch([b"x"]), partition=999)
    expect(produced.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
           "UNKNOWN_TOPIC_OR_PARTITION (3) for Produce to partition 999", error_name(produced.error_code))
    fetched = ops.fetch(wire, caps, topic, 0, partition=999)
    expect(fetched.error_code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID),
           "UNKNOWN_TOPIC_OR_PARTITION (3) for Fetch of partition 999", error_name(fetched.error_code))
