"""Garbage in, ProtocolDecodeError out: random and truncated bodies never raise anything else,
never hang and never allocate beyond what the input could hold (PRO-1)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.protocol import schema
from reference.protocol.codec import Struct
from reference.protocol.framing import FrameDecoder, FrameTooLarge
from reference.protocol.headers import parse_request_header
from reference.protocol.messages import ProtocolDecodeError, decode_request, decode_response, encode_request
from test_protocol_roundtrip import sample_struct  # tests/protocol is on sys.path (rootdir-less import)

pytestmark = pytest.mark.guarantee("PRO-1")

REQUEST_VERSIONS = [
    (api_key, version)
    for api_key in schema.api_keys()
    for version in range(schema.valid_versions(api_key)[0], schema.valid_versions(api_key)[1] + 1)
]


def decodes_or_refuses(decode, *args) -> None:
    try:
        assert isinstance(decode(*args), (Struct, tuple))
    except ProtocolDecodeError:
        pass


@settings(max_examples=3000, deadline=None)
@given(st.sampled_from(REQUEST_VERSIONS), st.binary(max_size=64))
def test_random_request_bodies_only_raise_protocol_decode_error(api_key_version, body):
    api_key, version = api_key_version
    decodes_or_refuses(decode_request, api_key, version, body)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(REQUEST_VERSIONS), st.binary(max_size=64))
def test_random_response_frames_only_raise_protocol_decode_error(api_key_version, frame_body):
    api_key, version = api_key_version
    if version in schema.definition(api_key, schema.RESPONSE).valid_versions:
        decodes_or_refuses(decode_response, api_key, version, frame_body)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(REQUEST_VERSIONS), st.data())
def test_truncated_and_corrupted_requests_only_raise_protocol_decode_error(api_key_version, data):
    api_key, version = api_key_version
    frame = encode_request(api_key, version, 1, "c", sample_struct(schema.layout(api_key, version, schema.REQUEST)))
    body = bytearray(frame[4 + parse_request_header(frame[4:])[1]:])
    cut = data.draw(st.integers(0, len(body)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, max(len(body) - 1, 0)), st.integers(0, 255)), max_size=3))
    for position, byte in flips:
        if position < len(body):
            body[position] = byte
    decodes_or_refuses(decode_request, api_key, version, bytes(body[:cut]))


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=40))
def test_random_headers_only_raise_protocol_decode_error(frame_body):
    try:
        parse_request_header(frame_body)
    except ProtocolDecodeError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=20), max_size=10))
def test_random_streams_give_frames_or_frame_too_large(pieces):
    decoder = FrameDecoder(max_frame_bytes=64)
    try:
        for piece in pieces:
            for frame in decoder.feed(piece):
                assert len(frame) <= 64
    except FrameTooLarge as error:
        assert not 0 <= error.size_bytes <= 64
