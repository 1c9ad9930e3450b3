"""The public codec: Kafka requests and responses to and from bytes, by (api_key, api_version).

    decode_request(api_key, api_version, body) -> Struct
    encode_request(api_key, api_version, correlation_id, client_id, body) -> bytes
    decode_response(api_key, api_version, frame_body) -> (correlation_id, Struct)
    encode_response(api_key, api_version, correlation_id, body) -> bytes
    encode_response_chunks(api_key, api_version, correlation_id, body) -> list of bytes-like
    unsupported_api_versions_response(correlation_id, api_versions_range) -> bytes

Encoders return a whole frame: the int32 size, the header of the right version, the body.
`body` is a Struct or a Mapping (nested dicts and lists allowed); a field it lacks takes the
definition's default; fields of other versions are ignored, and a name the definition does
not know fails an assertion (a typo would otherwise be sent as a default).

Records. A `records` field decodes to a zero-copy memoryview of the input (or None), which
stays valid as long as the input buffer does; call bytes() on it to keep it apart. To encode,
give bytes-like or a list of bytes-like chunks (e.g. slices of segment files).
encode_response_chunks returns the frame as a list of chunks with every records chunk of
4 KiB or more spliced in as it was given, ready for a transport's writelines; encode_response
joins them into one bytes.

Errors. A body that does not decode raises ProtocolDecodeError (a ValueError) naming the
message and the field; a version outside the definition's validVersions raises its subclass
UnsupportedVersion. Counts and lengths are checked against the bytes that remain before
anything is allocated. Bytes after the end of a body are ignored, as Kafka's own parser
ignores them: librdkafka 2.16 sends Metadata v13 requests with three such bytes.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping

from reference.protocol import schema
from reference.protocol.api_keys import ApiKey
from reference.protocol.codec import Decoder, Encoder, Struct, compile_decoder, compile_encoder
from reference.protocol.errors import ErrorCode
from reference.protocol.headers import read_response_header, write_request_header, write_response_header
from reference.protocol.primitives import INT16, INT32, ProtocolDecodeError, Reader, Writer, nbytes

__all__ = [
    "ProtocolDecodeError",
    "Struct",
    "UnsupportedVersion",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_chunks",
    "unsupported_api_versions_response",
]

FRAME_SIZE_BYTES = 4
Body = Struct | Mapping


class UnsupportedVersion(ProtocolDecodeError):
    """A version outside the definition's validVersions (or an API key no definition names)."""


def _definition(api_key: int, api_version: int, kind: str) -> schema.MessageDefinition:
    try:
        definition = schema.definition(api_key, kind)
    except KeyError:
        raise UnsupportedVersion(f"unknown api key {api_key}") from None
    if api_version not in definition.valid_versions:
        versions = definition.valid_versions
        raise UnsupportedVersion(f"{definition.name} v{api_version} is outside v{versions.low}-v{versions.high}")
    return definition


@functools.cache
def _decoder(api_key: int, api_version: int, kind: str) -> Decoder:
    return compile_decoder(schema.layout(api_key, api_version, kind))


@functools.cache
def _encoder(api_key: int, api_version: int, kind: str) -> Encoder:
    return compile_encoder(schema.layout(api_key, api_version, kind))


def _decode_body(api_key: int, api_version: int, kind: str, reader: Reader) -> Struct:
    definition = _definition(api_key, api_version, kind)
    try:
        body = _decoder(api_key, api_version, kind)(reader)
    except ProtocolDecodeError as error:
        raise error.in_message(f"{definition.name} v{api_version}") from None
    return body


def decode_request(api_key: int, api_version: int, body: bytes | bytearray | memoryview) -> Struct:
    """A request body (the bytes after the request header) as a Struct."""
    return _decode_body(api_key, api_version, schema.REQUEST, Reader(body))


def decode_response(api_key: int, api_version: int, frame_body: bytes | bytearray | memoryview) -> tuple[int, Struct]:
    """A response frame body (the bytes after the size) as (correlation_id, Struct).

    An ApiVersions response carrying UNSUPPORTED_VERSION is decoded as v0, the layout a
    broker answers in when it does not know the request's version (KIP-511).
    """
    reader = Reader(frame_body)
    correlation_id = read_response_header(reader, api_key, api_version)
    if (
        api_key == ApiKey.API_VERSIONS
        and reader.remaining() >= INT16.size
        and INT16.unpack_from(reader.buffer, reader.position)[0] == ErrorCode.UNSUPPORTED_VERSION
    ):
        api_version = 0
    return correlation_id, _decode_body(api_key, api_version, schema.RESPONSE, reader)


def _finish_frame(writer: Writer) -> list[bytes | bytearray | memoryview]:
    chunks = writer.chunks()
    size = sum(nbytes(chunk) for chunk in chunks) - FRAME_SIZE_BYTES
    INT32.pack_into(chunks[0], 0, size)  # chunks[0] is the Writer's own bytearray: it holds the header
    return chunks


def _frame_writer() -> Writer:
    writer = Writer()
    writer.int32(0)  # the size, filled in by _finish_frame
    return writer


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Body
) -> bytes:
    """A whole request frame: size, request header (v1, or v2 for a flexible version), body."""
    _definition(api_key, api_version, schema.REQUEST)
    writer = _frame_writer()
    write_request_header(writer, api_key, api_version, correlation_id, client_id)
    _encoder(api_key, api_version, schema.REQUEST)(writer, body)
    return b"".join(_finish_frame(writer))


def encode_response_chunks(
    api_key: int, api_version: int, correlation_id: int, body: Body
) -> list[bytes | bytearray | memoryview]:
    """A whole response frame as chunks: size, response header, body, with records spliced in."""
    _definition(api_key, api_version, schema.RESPONSE)
    writer = _frame_writer()
    write_response_header(writer, api_key, api_version, correlation_id)
    _encoder(api_key, api_version, schema.RESPONSE)(writer, body)
    return _finish_frame(writer)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Body) -> bytes:
    """A whole response frame: size, response header (v0, or v1 when flexible; v0 always
    for ApiVersions), body."""
    return b"".join(encode_response_chunks(api_key, api_version, correlation_id, body))


def unsupported_api_versions_response(correlation_id: int, api_versions_range: tuple[int, int]) -> bytes:
    """The answer to an ApiVersions request of a version the broker does not support.

    KIP-511: the broker answers in the v0 layout, which every client can read (error_code
    UNSUPPORTED_VERSION, then only ApiVersions' own range, no throttle_time_ms), so the client
    can retry with the highest version both sides know.
    """
    min_version, max_version = api_versions_range
    assert 0 <= min_version <= max_version, api_versions_range
    return encode_response(
        ApiKey.API_VERSIONS,
        0,
        correlation_id,
        {
            "error_code": ErrorCode.UNSUPPORTED_VERSION,
            "api_keys": [{"api_key": ApiKey.API_VERSIONS, "min_version": min_version, "max_version": max_version}],
        },
    )
