"""Fixtures for the broker tests: a real `kspec broker` process and a raw protocol client."""
from __future__ import annotations

import itertools
import socket
import struct

import pytest

from reference.process import BrokerProcess
from reference.protocol.messages import decode_response, encode_request

SOCKET_TIMEOUT_S = 10.0


class RawClient:
    """One TCP connection speaking the Kafka protocol through kspec's codec."""

    def __init__(self, bootstrap: str, client_id: str = "kspec-test") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S)
        self.client_id = client_id
        self._correlation_ids = itertools.count(1)

    def send(self, api_key: int, version: int, body: dict) -> int:
        correlation_id = next(self._correlation_ids)
        self.sock.sendall(encode_request(api_key, version, correlation_id, self.client_id, body))
        return correlation_id

    def send_raw(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def receive(self, api_key: int, version: int, correlation_id: int):
        frame_body = self.receive_frame()
        received_id, body = decode_response(api_key, version, frame_body)
        assert received_id == correlation_id
        return body

    def receive_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._read_exactly(4))
        return self._read_exactly(size)

    def request(self, api_key: int, version: int, body: dict):
        return self.receive(api_key, version, self.send(api_key, version, body))

    def is_closed_by_peer(self, timeout_s: float = 5.0) -> bool:
        self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def nothing_to_read(self, timeout_s: float) -> bool:
        self.sock.settimeout(timeout_s)
        try:
            self.sock.recv(1, socket.MSG_PEEK)
            return False
        except socket.timeout:
            return True
        finally:
            self.sock.settimeout(SOCKET_TIMEOUT_S)

    def close(self) -> None:
        self.sock.close()

    def _read_exactly(self, size: int) -> bytes:
        chunks = []
        while size:
            chunk = self.sock.recv(min(size, 1 << 20))
            if not chunk:
                raise ConnectionError("closed by the broker")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(str(tmp_path_factory.mktemp("broker") / "data"),
                            overrides={"message.max.bytes": "100000", "socket.request.max.bytes": "2000000"})
    process.start()
    yield process
    if process.running:
        assert process.stop() == 0


@pytest.fixture
def client(broker):
    connection = RawClient(broker.bootstrap)
    yield connection
    connection.close()
