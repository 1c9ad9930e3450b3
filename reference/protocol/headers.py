"""Request and response headers, and the rules that pick their versions.

Request header v1 is api_key int16, api_version int16, correlation_id int32, client_id
(int16-length nullable string); v2, used when the request version is flexible, adds a
tagged-field section. client_id stays an int16-length string even in v2 (the RequestHeader
definition's ClientId flexibleVersions override). Request header v0 (no client_id) belonged
to ControlledShutdown v0 alone, which Kafka 4 removed; it is not supported.

Response header v0 is correlation_id; v1, used when the response version is flexible, adds a
tagged-field section. The ApiVersions response always uses v0, whatever its version, so a
client that does not yet know the broker's versions can always read it (KIP-511).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from reference.protocol import schema
from reference.protocol.api_keys import ApiKey
from reference.protocol.codec import Decoder, Encoder, compile_decoder, compile_encoder
from reference.protocol.primitives import INT16, ProtocolDecodeError, Reader, Writer

REQUEST_HEADER_FIXED_BYTES = 8  # api_key, api_version, correlation_id


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def request_header_version(api_key: int, api_version: int) -> int:
    return 2 if schema.flexible(api_key, api_version, schema.REQUEST) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if schema.flexible(api_key, api_version, schema.RESPONSE) else 0


@functools.cache
def _header_decoder(name: str, version: int) -> Decoder:
    return compile_decoder(schema.message_layout(name, version))


@functools.cache
def _header_encoder(name: str, version: int) -> Encoder:
    return compile_encoder(schema.message_layout(name, version))


def parse_request_header(frame_body: bytes | bytearray | memoryview) -> tuple[RequestHeader, int]:
    """The header of a request frame (the bytes after the size) and the offset of its body.

    Raises ProtocolDecodeError for a truncated header or an API key no definition names
    (the broker cannot know that request's layout, so it can only close the connection).
    """
    if len(frame_body) < REQUEST_HEADER_FIXED_BYTES:
        raise ProtocolDecodeError(f"request header needs {REQUEST_HEADER_FIXED_BYTES} bytes, got {len(frame_body)}")
    api_key, api_version = INT16.unpack_from(frame_body, 0)[0], INT16.unpack_from(frame_body, 2)[0]
    try:
        version = request_header_version(api_key, api_version)
    except KeyError:
        raise ProtocolDecodeError(f"unknown api key {api_key}") from None
    reader = Reader(frame_body)
    try:
        header = _header_decoder("RequestHeader", version)(reader)
    except ProtocolDecodeError as error:
        raise error.in_message(f"RequestHeader v{version}") from None
    return RequestHeader(api_key, api_version, header.correlation_id, header.client_id), reader.position


def write_request_header(writer: Writer, api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> None:
    _header_encoder("RequestHeader", request_header_version(api_key, api_version))(
        writer,
        {"request_api_key": api_key, "request_api_version": api_version,
         "correlation_id": correlation_id, "client_id": client_id},
    )


def write_response_header(writer: Writer, api_key: int, api_version: int, correlation_id: int) -> None:
    _header_encoder("ResponseHeader", response_header_version(api_key, api_version))(
        writer, {"correlation_id": correlation_id}
    )


def read_response_header(reader: Reader, api_key: int, api_version: int) -> int:
    """The correlation id of a response frame body; the reader is left at the body."""
    version = response_header_version(api_key, api_version)
    try:
        return _header_decoder("ResponseHeader", version)(reader).correlation_id
    except ProtocolDecodeError as error:
        raise error.in_message(f"ResponseHeader v{version}") from None
