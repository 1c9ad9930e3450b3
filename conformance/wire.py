"""A raw Kafka wire client on kspec's codec: one blocking socket, exact requests, exact responses.

The protocol layer of the suite sends requests byte for byte as written (including malformed
ones) and reads the broker's answer without any client library in between:

    with WireClient("127.0.0.1:9092") as wire:
        response = wire.request(ApiKey.METADATA, 12, {"topics": None})
        wire.send_frame(b"\\x00\\x00\\x00\\x02\\xff\\xff")      # garbage
        assert wire.closed_by_peer(timeout_s=5)

Every read has a timeout (WireTimeout names what was awaited), so a broker that hangs fails
a test instead of hanging the suite. TLS is supported through an ssl.SSLContext; SASL is not
(tests that need the wire layer skip on SASL listeners).
"""
from __future__ import annotations

import itertools
import socket
import ssl
import struct

from reference.protocol.messages import Struct, decode_response, encode_request

REQUEST_TIMEOUT_S_DEFAULT = 15.0
CONNECT_TIMEOUT_S = 10.0
FRAME_BYTES_MAX = 256 * 1024 * 1024  # a response larger than this is treated as broken framing
CLIENT_ID = "kspec-conformance"

_FRAME_SIZE = struct.Struct(">i")


class WireTimeout(TimeoutError):
    """No (complete) response within the timeout."""


class ConnectionClosed(ConnectionError):
    """The broker closed the connection while a response was awaited."""


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    assert host and port.isdigit(), f"expected HOST:PORT, got {address!r}"
    return host.strip("[]"), int(port)


class WireClient:
    """One TCP (or TLS) connection to one broker, speaking the Kafka protocol request by request."""

    def __init__(self, address: str, *, client_id: str | None = CLIENT_ID,
                 timeout_s: float = REQUEST_TIMEOUT_S_DEFAULT, ssl_context: ssl.SSLContext | None = None) -> None:
        self.address = address
        self.client_id = client_id
        self.timeout_s = timeout_s
        host, port = parse_address(address)
        sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        self.sock = ssl_context.wrap_socket(sock, server_hostname=host) if ssl_context else sock
        self.sock.settimeout(timeout_s)
        self._correlation_ids = itertools.count(1)

    # -- sending

    def send(self, api_key: int, api_version: int, body: Struct | dict) -> int:
        """Encode and send one request; returns its correlation id."""
        correlation_id = next(self._correlation_ids)
        self.sock.sendall(encode_request(api_key, api_version, correlation_id, self.client_id, body))
        return correlation_id

    def send_frame(self, frame: bytes) -> None:
        """Send bytes exactly as given (a hand-made, possibly malformed, request)."""
        self.sock.sendall(frame)

    # -- receiving

    def receive_frame(self, timeout_s: float | None = None) -> bytes:
        """The next response frame body (the bytes after the size)."""
        (size,) = _FRAME_SIZE.unpack(self._read_exactly(_FRAME_SIZE.size, timeout_s))
        if not 0 <= size <= FRAME_BYTES_MAX:
            raise ConnectionClosed(f"response frame size {size} is outside 0..{FRAME_BYTES_MAX}: broken framing")
        return self._read_exactly(size, timeout_s)

    def receive(self, api_key: int, api_version: int, correlation_id: int, timeout_s: float | None = None) -> Struct:
        frame_body = self.receive_frame(timeout_s)
        received_id, body = decode_response(api_key, api_version, frame_body)
        if received_id != correlation_id:
            raise ConnectionClosed(f"response carries correlation id {received_id}, expected {correlation_id}")
        return body

    def request(self, api_key: int, api_version: int, body: Struct | dict, timeout_s: float | None = None) -> Struct:
        """Send one request and wait for its response."""
        return self.receive(api_key, api_version, self.send(api_key, api_version, body), timeout_s)

    # -- observing the connection

    def closed_by_peer(self, timeout_s: float) -> bool:
        """True when the broker closes the connection within timeout_s (bytes it sends meanwhile
        are read and dropped); False when it stays open."""
        self.sock.settimeout(timeout_s)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return True
        except socket.timeout:
            return False
        finally:
            self.sock.settimeout(self.timeout_s)

    def silent_for(self, timeout_s: float) -> bool:
        """True when nothing arrives (and the connection stays open) for timeout_s."""
        self.sock.settimeout(timeout_s)
        try:
            self.sock.recv(1, socket.MSG_PEEK)  # a byte, or b"" for a close: either way not silent
            return False
        except socket.timeout:
            return True
        except ConnectionError:
            return False
        finally:
            self.sock.settimeout(self.timeout_s)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _read_exactly(self, size: int, timeout_s: float | None) -> bytes:
        self.sock.settimeout(self.timeout_s if timeout_s is None else timeout_s)
        chunks, remaining = [], size
        try:
            while remaining:
                chunk = self.sock.recv(min(remaining, 1 << 20))
                if not chunk:
                    raise ConnectionClosed(f"connection closed by {self.address} with {remaining} of {size} "
                                           "bytes still expected")
                chunks.append(chunk)
                remaining -= len(chunk)
        except socket.timeout:
            raise WireTimeout(f"no complete response from {self.address} within "
                              f"{self.sock.gettimeout():.1f} s ({size - remaining} of {size} bytes)") from None
        except ConnectionResetError as error:
            raise ConnectionClosed(f"connection reset by {self.address}: {error}") from None
        finally:
            self.sock.settimeout(self.timeout_s)
        return b"".join(chunks)
