"""The wire forms, byte for byte: varints, flexible (compact) encodings, tagged fields, header
versions, nullable structs, records spliced as chunks, the KIP-511 reply, framing, and the
errors garbage input gets."""
from __future__ import annotations

import struct

import pytest

from reference.protocol import schema
from reference.protocol.api_keys import ApiKey
from reference.protocol.framing import FrameDecoder, FrameTooLarge
from reference.protocol.headers import parse_request_header, request_header_version, response_header_version
from reference.protocol.messages import (
    ProtocolDecodeError,
    UnsupportedVersion,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_chunks,
    unsupported_api_versions_response,
)
from reference.protocol.primitives import Reader, Writer


def written(write) -> bytes:
    writer = Writer()
    write(writer)
    return writer.getvalue()


# --- primitives -------------------------------------------------------------------------------


@pytest.mark.parametrize("value, encoded", [
    (0, "00"), (127, "7f"), (128, "8001"), (300, "ac02"), (0xFFFFFFFF, "ffffffff0f"),
])
def test_unsigned_varint_is_little_endian_base_128(value, encoded):
    assert written(lambda w: w.unsigned_varint(value)).hex() == encoded
    assert Reader(bytes.fromhex(encoded)).unsigned_varint() == value


@pytest.mark.parametrize("value, encoded", [(0, "00"), (-1, "01"), (1, "02"), (-64, "7f"), (64, "8001")])
def test_varint_is_zigzag(value, encoded):
    assert written(lambda w: w.varint(value)).hex() == encoded
    assert Reader(bytes.fromhex(encoded)).varint() == value


@pytest.mark.parametrize("value", [0, -1, 1, (1 << 63) - 1, -(1 << 63), 1 << 40])
def test_varlong_roundtrips_the_int64_range(value):
    assert Reader(written(lambda w: w.varlong(value))).varlong() == value


def test_overlong_varint_is_rejected():
    with pytest.raises(ProtocolDecodeError, match="longer than 5 bytes"):
        Reader(b"\xff" * 6).unsigned_varint()


def test_compact_forms_use_length_plus_one_and_zero_for_null():
    assert written(lambda w: w.compact_string("ab")).hex() == "036162"
    assert written(lambda w: w.compact_string(None, nullable=True)).hex() == "00"
    assert written(lambda w: w.compact_string("")).hex() == "01"
    assert written(lambda w: w.string(None, nullable=True)).hex() == "ffff"
    assert written(lambda w: w.bytes(None, nullable=True)).hex() == "ffffffff"
    assert Reader(bytes.fromhex("00")).compact_string(nullable=True) is None


def test_tagged_fields_must_ascend():
    with pytest.raises(ProtocolDecodeError, match="tags must ascend"):
        Reader(bytes.fromhex("02" "0500" "0300")).tagged_fields()


def test_lengths_are_checked_against_the_bytes_that_remain():
    with pytest.raises(ProtocolDecodeError, match="needs 1000 bytes, 2 remain"):
        Reader(struct.pack(">h", 1000) + b"ab").string()
    with pytest.raises(ProtocolDecodeError, match="array needs 2000000000 bytes"):
        Reader(struct.pack(">i", 2_000_000_000)).array_count(nullable=False)


# --- headers ---------------------------------------------------------------------------------


def test_flexible_request_uses_header_v2_with_an_int16_client_id():
    frame = encode_request(ApiKey.API_VERSIONS, 3, 7, "kspec",
                           {"client_software_name": "kspec", "client_software_version": "1.0"})
    assert frame.hex() == (
        "0000001b" "0012" "0003" "00000007" "0005" + b"kspec".hex() + "00"  # header v2
        "06" + b"kspec".hex() + "04" + b"1.0".hex() + "00"  # compact strings, empty tagged section
    )
    header, offset = parse_request_header(frame[4:])
    assert header.client_id == "kspec" and offset == 16


def test_non_flexible_request_uses_header_v1_with_a_null_client_id():
    frame = encode_request(ApiKey.METADATA, 1, 1, None, {"topics": None})
    assert frame.hex() == "0000000e" "0003" "0001" "00000001" "ffff" "ffffffff"
    assert parse_request_header(frame[4:])[0].client_id is None


def test_api_versions_response_always_has_header_v0():
    assert response_header_version(ApiKey.API_VERSIONS, 3) == 0
    assert response_header_version(ApiKey.METADATA, 9) == 1
    assert response_header_version(ApiKey.METADATA, 8) == 0
    assert request_header_version(ApiKey.PRODUCE, 9) == 2
    assert request_header_version(ApiKey.PRODUCE, 8) == 1
    frame = encode_response(ApiKey.API_VERSIONS, 3, 5, {})
    assert frame[4:8].hex() == "00000005" and frame[8:10].hex() == "0000"  # error_code right after
    frame = encode_response(ApiKey.METADATA, 9, 5, {})
    assert frame[4:9].hex() == "0000000500"  # correlation id, then the header's tagged section


def test_header_of_an_unknown_api_key_is_an_error():
    with pytest.raises(ProtocolDecodeError, match="unknown api key 999"):
        parse_request_header(struct.pack(">hhi", 999, 0, 1) + b"\xff\xff")


# --- tagged fields, nullability, defaults -------------------------------------------------------


def test_tagged_field_is_written_only_when_not_default():
    default = encode_response(ApiKey.API_VERSIONS, 3, 1, {"finalized_features_epoch": -1})
    assert default.endswith(bytes.fromhex("01" "00000000" "00"))  # empty api_keys, throttle, no tags
    epoch = encode_response(ApiKey.API_VERSIONS, 3, 1, {"finalized_features_epoch": 3})
    assert epoch.endswith(bytes.fromhex("01" "01" "08" "0000000000000003"))
    assert decode_response(ApiKey.API_VERSIONS, 3, epoch[4:])[1].finalized_features_epoch == 3
    assert decode_response(ApiKey.API_VERSIONS, 3, default[4:])[1].finalized_features_epoch == -1


def test_unknown_tagged_fields_are_kept_and_written_back():
    frame = bytearray(encode_response(ApiKey.API_VERSIONS, 3, 1, {}))
    frame[-1:] = bytes.fromhex("01" "09" "02" "abcd")  # tag 9, two bytes: unknown to this version
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    _, body = decode_response(ApiKey.API_VERSIONS, 3, bytes(frame[4:]))
    assert body.unknown_tagged_fields == ((9, b"\xab\xcd"),)
    assert encode_response(ApiKey.API_VERSIONS, 3, 1, body) == bytes(frame)


def test_null_and_empty_compact_arrays_differ():
    all_topics = encode_request(ApiKey.METADATA, 9, 1, "c", {"topics": None})
    no_topics = encode_request(ApiKey.METADATA, 9, 1, "c", {"topics": []})
    offset = 4 + parse_request_header(all_topics[4:])[1]
    assert all_topics[offset] == 0 and no_topics[offset] == 1
    assert decode_request(ApiKey.METADATA, 9, all_topics[offset:]).topics is None
    assert decode_request(ApiKey.METADATA, 9, no_topics[offset:]).topics == []


def test_nullable_struct_has_a_presence_byte():
    api_key = ApiKey.DESCRIBE_TOPIC_PARTITIONS
    absent = encode_request(api_key, 0, 1, "c", {"cursor": None})
    present = encode_request(api_key, 0, 1, "c", {"cursor": {"topic_name": "t", "partition_index": 2}})
    offset = 4 + parse_request_header(absent[4:])[1]
    # no topics, response_partition_limit at its default 2000, null cursor, no tags
    assert absent[offset:].hex() == "01" "000007d0" "ff" "00"
    assert decode_request(api_key, 0, absent[offset:]).cursor is None
    cursor = decode_request(api_key, 0, present[offset:]).cursor
    assert (cursor.topic_name, cursor.partition_index) == ("t", 2)


def test_missing_fields_take_the_definitions_defaults():
    body = decode_request(ApiKey.PRODUCE, 3, encode_request(ApiKey.PRODUCE, 3, 1, "c", {})[14 + 1:])
    assert body.transactional_id is None and body.topic_data == []
    joined = decode_response(ApiKey.JOIN_GROUP, 5, encode_response(ApiKey.JOIN_GROUP, 5, 1, {})[4:])[1]
    assert joined.generation_id == -1 and joined.member_id == "" and joined.protocol_name == ""


def test_unknown_field_name_is_refused_on_encode():
    with pytest.raises(AssertionError, match="no field"):
        encode_response(ApiKey.METADATA, 12, 1, {"brokers": [{"node_idd": 1}]})


# --- records --------------------------------------------------------------------------------------


def test_records_decode_as_a_view_and_encode_from_chunks_without_copying():
    first, second = memoryview(b"a" * 8192), memoryview(b"b" * 8192)
    body = {"responses": [{"topic": "t", "partitions": [{"partition_index": 0, "records": [first, second]}]}]}
    chunks = encode_response_chunks(ApiKey.FETCH, 12, 3, body)
    assert any(chunk is first for chunk in chunks) and any(chunk is second for chunk in chunks)
    frame = b"".join(chunks)
    assert frame == encode_response(ApiKey.FETCH, 12, 3, body)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    _, decoded = decode_response(ApiKey.FETCH, 12, memoryview(frame)[4:])
    records = decoded.responses[0].partitions[0].records
    assert isinstance(records, memoryview) and records == b"a" * 8192 + b"b" * 8192


# --- versions and errors ----------------------------------------------------------------------------


def test_valid_and_flexible_versions_come_from_the_definitions():
    assert schema.valid_versions(ApiKey.PRODUCE) == (3, 13)
    assert schema.valid_versions(ApiKey.API_VERSIONS) == (0, 4)
    assert schema.flexible(ApiKey.FETCH, 12, schema.REQUEST) and not schema.flexible(ApiKey.FETCH, 11, schema.REQUEST)
    assert schema.flexible(ApiKey.API_VERSIONS, 9, schema.REQUEST)  # "3+" covers future versions
    assert not schema.flexible(ApiKey.SASL_HANDSHAKE, 1, schema.RESPONSE)


def test_version_outside_the_definition_is_unsupported():
    with pytest.raises(UnsupportedVersion, match="ProduceRequest v2 is outside v3-v13"):
        decode_request(ApiKey.PRODUCE, 2, b"")
    assert issubclass(UnsupportedVersion, ProtocolDecodeError) and issubclass(ProtocolDecodeError, ValueError)


def test_truncated_body_names_the_failing_field():
    frame = encode_request(ApiKey.PRODUCE, 9, 1, "c", {"topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"x" * 100}]}]})
    body = frame[4 + parse_request_header(frame[4:])[1]:]
    with pytest.raises(ProtocolDecodeError) as error:
        decode_request(ApiKey.PRODUCE, 9, body[:-10])
    assert str(error.value).startswith("ProduceRequest v9 topic_data[0].partition_data[0].records: ")


def test_invalid_utf8_is_a_decode_error():
    with pytest.raises(ProtocolDecodeError, match="not UTF-8"):
        decode_request(ApiKey.FIND_COORDINATOR, 0, b"\x00\x02\xff\xfe")


def test_kip511_reply_is_the_v0_body_with_only_api_versions_range():
    reply = unsupported_api_versions_response(9, (0, 4))
    assert reply.hex() == "00000010" "00000009" "0023" "00000001" "0012" "0000" "0004"
    correlation_id, body = decode_response(ApiKey.API_VERSIONS, 4, reply[4:])
    assert correlation_id == 9 and body.error_code == 35 and len(body.api_keys) == 1


def test_api_key_names_agree_with_the_definitions():
    for api_key in schema.api_keys():
        name = schema.definition(api_key, schema.REQUEST).name.removesuffix("Request")
        assert ApiKey(api_key).name == schema.snake_case(name).upper()


# --- framing -------------------------------------------------------------------------------------


def frames_of(*bodies: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(body)) + body for body in bodies)


def test_frames_split_at_every_byte_reassemble():
    stream = frames_of(b"abc", b"", b"x" * 300)
    decoder = FrameDecoder(max_frame_bytes=1000)
    frames = [bytes(frame) for index in range(len(stream)) for frame in decoder.feed(stream[index:index + 1])]
    assert frames == [b"abc", b"", b"x" * 300] and decoder.buffered_bytes() == 0


def test_frames_within_one_piece_are_views_of_it():
    frames = FrameDecoder(max_frame_bytes=1000).feed(frames_of(b"abc", b"defg") + b"\x00\x00")
    assert [bytes(frame) for frame in frames] == [b"abc", b"defg"]
    assert all(isinstance(frame, memoryview) for frame in frames)


@pytest.mark.parametrize("size", [1001, -1])
def test_frame_over_the_limit_or_negative_is_refused(size):
    with pytest.raises(FrameTooLarge, match=f"frame size {size} bytes is outside 0..1000"):
        FrameDecoder(max_frame_bytes=1000).feed(struct.pack(">i", size))
