"""PeerConnection, the client side of every call between cluster nodes, over real sockets: a large
response arrives whole, and a peer that closes mid-call raises one of PEER_ERRORS (which every
caller handles) and the next call connects afresh."""
from __future__ import annotations

import asyncio

import pytest

from reference.protocol.api_keys import ApiKey
from reference.protocol.framing import FrameDecoder
from reference.protocol.headers import parse_request_header
from reference.protocol.messages import encode_response
from reference.server.peers import PEER_ERRORS, PeerConnection

FETCH_VERSION = 12
RECORDS_BYTES = 3 * 1024 * 1024  # larger than any one socket read
WAIT_S = 60.0


async def serve(handle_frame) -> tuple[asyncio.AbstractServer, int]:
    """A server that answers each request frame with handle_frame(header, connection_number), or
    closes the connection when that returns None."""
    connections = 0

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        number, decoder = connections, FrameDecoder(1024 * 1024)
        while data := await reader.read(65536):
            for frame in decoder.feed(data):
                header, _ = parse_request_header(frame)
                response = handle_frame(header, number)
                if response is None:
                    writer.close()
                    return
                writer.write(response)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def fetch_response(correlation_id: int, records: bytes) -> bytes:
    return encode_response(ApiKey.FETCH, FETCH_VERSION, correlation_id, {"responses": [
        {"topic": "t", "partitions": [{"partition_index": 0, "high_watermark": 7, "records": records}]}]})


def fetch(connection: PeerConnection):
    return connection.call(ApiKey.FETCH, FETCH_VERSION, {"replica_id": 1, "max_wait_ms": 0, "min_bytes": 1,
                                                         "topics": []}, WAIT_S)


def test_a_response_larger_than_a_socket_read_arrives_whole():
    records = bytes(range(256)) * (RECORDS_BYTES // 256)

    async def scenario():
        server, port = await serve(lambda header, _: fetch_response(header.correlation_id, records))
        connection = PeerConnection("127.0.0.1", port, "test")
        try:
            for _ in range(2):  # and the connection is reused
                response = await fetch(connection)
                partition = response.responses[0].partitions[0]
                assert partition.high_watermark == 7
                assert bytes(partition.records) == records
        finally:
            connection.close()
            server.close()

    asyncio.run(scenario())


def test_a_peer_that_closes_mid_call_raises_a_peer_error_and_the_next_call_reconnects():
    async def scenario():
        # The first connection is closed on its first request; the second one is answered.
        server, port = await serve(lambda header, number: None if number == 1
                                   else fetch_response(header.correlation_id, b""))
        connection = PeerConnection("127.0.0.1", port, "test")
        try:
            with pytest.raises(PEER_ERRORS):
                await fetch(connection)
            response = await fetch(connection)
            assert response.responses[0].partitions[0].high_watermark == 7
        finally:
            connection.close()
            server.close()

    asyncio.run(scenario())
