"""Every API key, every valid version, request and response: encode, decode, get the same back.

Two bodies per (api_key, version, kind): the empty body, which must decode to every field's
default, and a body that sets every field of that version to a non-default value (arrays
with elements, nested structs filled, tagged fields set), which must decode to itself.
"""
from __future__ import annotations

import uuid

import pytest

from reference.protocol import schema
from reference.protocol.codec import Struct, default_struct
from reference.protocol.headers import parse_request_header
from reference.protocol.messages import decode_request, decode_response, encode_request, encode_response
from reference.protocol.schema import FieldLayout, StructLayout

SAMPLE_SCALARS = {
    "int8": 7,
    "int16": -300,
    "int32": 70_000,
    "int64": 1 << 40,
    "uint16": 65_000,
    "uint32": 4_000_000_000,
    "float64": 1.5,
    "bool": True,
    "string": "kspec-é",
    "bytes": b"\x00\x01\xff",
    "records": b"\x00" * 70,
    "uuid": uuid.UUID(int=0x1234_5678_9ABC),
}


def sample_value(field: FieldLayout):
    if field.type == "struct":
        element = sample_struct(field.struct)
    else:
        element = SAMPLE_SCALARS[field.type]
    return [element, element] if field.is_array else element


def sample_struct(layout: StructLayout) -> dict:
    return {field.name: sample_value(field) for field in (*layout.fields, *layout.tagged_fields)}


def as_struct(value):
    if isinstance(value, dict):
        return Struct(**{name: as_struct(member) for name, member in value.items()})
    if isinstance(value, list):
        return [as_struct(item) for item in value]
    return value


def versions(kind: str) -> list:
    return [
        pytest.param(api_key, version, id=f"{schema.definition(api_key, kind).name}-v{version}")
        for api_key in schema.api_keys()
        for version in range(schema.definition(api_key, kind).valid_versions.low,
                             schema.definition(api_key, kind).valid_versions.high + 1)
    ]


def request_roundtrip(api_key: int, version: int, body) -> Struct:
    frame = encode_request(api_key, version, 42, "kspec", body)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, offset = parse_request_header(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (api_key, version, 42, "kspec")
    return decode_request(api_key, version, memoryview(frame)[4 + offset:])


def response_roundtrip(api_key: int, version: int, body) -> Struct:
    frame = encode_response(api_key, version, 42, body)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    correlation_id, decoded = decode_response(api_key, version, frame[4:])
    assert correlation_id == 42
    return decoded


@pytest.mark.parametrize("api_key, version", versions(schema.REQUEST))
def test_request_roundtrip_every_version(api_key, version):
    layout = schema.layout(api_key, version, schema.REQUEST)
    assert request_roundtrip(api_key, version, {}) == default_struct(layout)
    body = sample_struct(layout)
    assert request_roundtrip(api_key, version, body) == as_struct(body)


@pytest.mark.parametrize("api_key, version", versions(schema.RESPONSE))
def test_response_roundtrip_every_version(api_key, version):
    layout = schema.layout(api_key, version, schema.RESPONSE)
    assert response_roundtrip(api_key, version, {}) == default_struct(layout)
    body = sample_struct(layout)
    assert response_roundtrip(api_key, version, body) == as_struct(body)


def test_decoded_struct_reencodes_to_the_same_bytes():
    layout = schema.layout(1, 12, schema.RESPONSE)
    frame = encode_response(1, 12, 9, sample_struct(layout))
    _, decoded = decode_response(1, 12, frame[4:])
    assert encode_response(1, 12, 9, decoded) == frame


def test_a_body_for_the_newest_version_encodes_at_older_versions():
    """A handler may build one body for the newest version; older versions drop what they lack."""
    newest = sample_struct(schema.layout(3, 13, schema.RESPONSE))
    decoded = response_roundtrip(3, 0, newest)
    assert set(decoded.to_dict()) == {"brokers", "topics"}
    assert decoded.brokers[0].host == "kspec-é"
