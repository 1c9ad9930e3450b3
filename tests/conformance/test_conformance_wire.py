"""The suite's raw wire client against real sockets: a broker that never answers, one that
closes, and one that answers a request (a tiny socket server speaking kspec's codec)."""
from __future__ import annotations

import socket
import threading

import pytest

from conformance.wire import ConnectionClosed, WireClient, WireTimeout
from reference.protocol.api_keys import ApiKey
from reference.protocol.framing import FrameDecoder
from reference.protocol.headers import parse_request_header
from reference.protocol.messages import encode_response


@pytest.fixture
def listener():
    server = socket.create_server(("127.0.0.1", 0))
    yield server
    server.close()


def _address(server: socket.socket) -> str:
    return "127.0.0.1:%d" % server.getsockname()[1]


def test_a_silent_broker_times_out_with_a_message(listener):
    with WireClient(_address(listener), timeout_s=0.3) as wire:
        assert wire.silent_for(0.1)
        with pytest.raises(WireTimeout, match=r"API_VERSIONS v0 \(correlation id 1\) .*no complete response"):
            wire.request(ApiKey.API_VERSIONS, 0, {})


def test_a_closed_connection_is_reported(listener):
    with WireClient(_address(listener)) as wire:
        accepted, _ = listener.accept()
        accepted.close()
        assert wire.closed_by_peer(timeout_s=2.0)
        with pytest.raises(ConnectionClosed):
            wire.receive_frame()


def test_a_request_gets_its_decoded_response(listener):
    def serve_one():
        connection, _ = listener.accept()
        decoder = FrameDecoder(1 << 20)
        frames = []
        while not frames:
            frames = decoder.feed(connection.recv(65536))
        header, _ = parse_request_header(frames[0])
        connection.sendall(encode_response(ApiKey.API_VERSIONS, 0, header.correlation_id, {
            "error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]}))
        connection.close()

    server = threading.Thread(target=serve_one)
    server.start()
    with WireClient(_address(listener)) as wire:
        response = wire.request(ApiKey.API_VERSIONS, 0, {})
    server.join()
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(18, 0, 4)]
