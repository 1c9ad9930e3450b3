"""A raw Kafka wire client on kspec's codec: one blocking socket, exact requests, exact responses.

The protocol layer of the suite sends requests byte for byte as written (including malformed
ones) and reads the broker's answer without any client library in between:

    with WireClient("127.0.0.1:9092") as wire:
        response = wire.request(ApiKey.METADATA, 12, {"topics": None})
        wire.send_frame(b"\\x00\\x00\\x00\\x02\\xff\\xff")      # garbage
        assert wire.closed_by_peer(timeout_s=5)

Every read has a timeout, so a broker that hangs fails a test instead of hanging the suite.
An answer Kafka would never give is a Finding (an AssertionError, so the test fails with it as
its message) that names the request and what came back instead: silence (WireTimeout), a closed
connection (ConnectionClosed), another correlation id, or bytes that do not decode at the
version asked for. After a finding the connection is dropped and the next request opens a
fresh one, so the rest of the check (and of the suite) carries on. TLS is supported through an
ssl.SSLContext; SASL is not (tests that need the wire layer skip on SASL listeners).
"""
from __future__ import annotations

import itertools
import socket
import ssl
import struct

from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from reference.protocol.messages import ProtocolDecodeError, Struct, decode_response, encode_request

REQUEST_TIMEOUT_S_DEFAULT = 15.0
CONNECT_TIMEOUT_S = 10.0
FRAME_BYTES_MAX = 256 * 1024 * 1024  # a response larger than this is treated as broken framing
CLIENT_ID = "kspec-conformance"

_FRAME_SIZE = struct.Struct(">i")


# The rules of Kafka's protocol a broker's answer is held to (Kafka's protocol guide, "The Protocol").
RULE_ANSWERED = "Kafka answers every request but an acks=0 Produce, on the connection it came on"
RULE_IN_ORDER = "Kafka answers a connection's requests in order, each with the request's correlation id"
RULE_VERSION = "Kafka answers at the version of the request, in that version's layout"
RULE_EVERY_PARTITION = "Kafka answers for every topic and partition a request names"


class Finding(AssertionError):
    """The broker answered in a way Kafka never does; the message says which request, what came
    back and the rule Kafka follows, in one or two lines."""


class WireTimeout(Finding, TimeoutError):
    """No (complete) response within the timeout."""


class ConnectionClosed(Finding, ConnectionError):
    """The broker closed the connection while a response was awaited."""


def request_name(api_key: int, api_version: int) -> str:
    """An API and version as Kafka names them in its logs, e.g. FETCH v12."""
    try:
        return f"{ApiKey(api_key).name} v{api_version}"
    except ValueError:
        return f"API key {api_key} v{api_version}"


def error_name(code: int) -> str:
    """An error code as NAME (n), for messages."""
    try:
        return f"{ErrorCode(code).name} ({code})"
    except ValueError:
        return f"error {code}"


def answered_entry(request: str, entries, key: str, wanted, kind: str):
    """The entry of a response list (topics, partitions, resources, ...) whose field `key` is
    `wanted`; a Finding naming what the broker listed instead when it is missing."""
    for entry in entries or ():
        if entry.get(key) == wanted:
            return entry
    listed = [entry.get(key) for entry in entries or ()]
    raise Finding(f"{request}: the response has no {kind} {wanted!r} (it lists {listed or 'none'}); "
                  f"{RULE_EVERY_PARTITION}")


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    assert host and port.isdigit(), f"expected HOST:PORT, got {address!r}"
    return host.strip("[]"), int(port)


class WireClient:
    """One TCP (or TLS) connection to one broker, speaking the Kafka protocol request by request.

    last_exchange (shared by every connection) names the most recent request of the run and
    what became of it, for a failure the suite's own checks did not anticipate."""

    last_exchange = "no request sent yet"

    def __init__(self, address: str, *, client_id: str | None = CLIENT_ID,
                 timeout_s: float = REQUEST_TIMEOUT_S_DEFAULT, ssl_context: ssl.SSLContext | None = None) -> None:
        self.address = address
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._ssl_context = ssl_context
        self._correlation_ids = itertools.count(1)
        self.sock = self._connect()

    def _connect(self) -> socket.socket:
        host, port = parse_address(self.address)
        sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        sock = self._ssl_context.wrap_socket(sock, server_hostname=host) if self._ssl_context else sock
        sock.settimeout(self.timeout_s)
        return sock

    def _reconnect_if_dropped(self) -> None:
        if self.sock.fileno() == -1:  # dropped after a finding: carry on with a fresh connection
            self.sock = self._connect()

    # -- sending

    def send(self, api_key: int, api_version: int, body: Struct | dict) -> int:
        """Encode and send one request; returns its correlation id."""
        self._reconnect_if_dropped()
        correlation_id = next(self._correlation_ids)
        WireClient.last_exchange = (f"{request_name(api_key, api_version)} (correlation id {correlation_id}) "
                                    f"sent to {self.address}")
        try:
            self.sock.sendall(encode_request(api_key, api_version, correlation_id, self.client_id, body))
        except (ConnectionResetError, BrokenPipeError) as error:
            self.sock.close()
            raise ConnectionClosed(f"{request_name(api_key, api_version)} to {self.address}: the connection was "
                                   f"closed before the request could be sent ({error}); {RULE_ANSWERED}") from None
        return correlation_id

    def send_frame(self, frame: bytes) -> None:
        """Send bytes exactly as given (a hand-made, possibly malformed, request)."""
        self._reconnect_if_dropped()
        self.sock.sendall(frame)

    # -- receiving

    def receive_frame(self, timeout_s: float | None = None) -> bytes:
        """The next response frame body (the bytes after the size)."""
        (size,) = _FRAME_SIZE.unpack(self._read_exactly(_FRAME_SIZE.size, timeout_s))
        if not 0 <= size <= FRAME_BYTES_MAX:
            raise ConnectionClosed(f"the response's size field reads {size}, outside 0..{FRAME_BYTES_MAX}: "
                                   "broken framing")
        return self._read_exactly(size, timeout_s)

    def receive(self, api_key: int, api_version: int, correlation_id: int, timeout_s: float | None = None) -> Struct:
        """The response to the request sent with correlation_id, or a Finding naming that request
        and what came instead (the connection is then dropped: its stream can no longer be trusted)."""
        sent = f"{request_name(api_key, api_version)} (correlation id {correlation_id}) to {self.address}"
        try:
            frame_body = self.receive_frame(timeout_s)
        except WireTimeout as finding:
            self._drop(f"{sent}: timed out")
            raise WireTimeout(f"{sent}: {finding}; {RULE_ANSWERED}") from None
        except ConnectionClosed as finding:
            self._drop(f"{sent}: connection closed")
            raise ConnectionClosed(f"{sent}: {finding}, before the response; {RULE_ANSWERED}") from None
        try:
            received_id, body = decode_response(api_key, api_version, frame_body)
        except ProtocolDecodeError as error:
            self._drop(f"{sent}: undecodable response")
            raise Finding(f"{sent}: the {len(frame_body)}-byte response does not decode at v{api_version} ({error}); "
                          f"{RULE_VERSION}") from None
        if received_id != correlation_id:
            self._drop(f"{sent}: answered correlation id {received_id}")
            raise Finding(f"{sent}: the response carries correlation id {received_id}; {RULE_IN_ORDER}")
        WireClient.last_exchange = f"{sent}: answered"
        return body

    def _drop(self, outcome: str) -> None:
        WireClient.last_exchange = outcome
        self.sock.close()

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
                    raise ConnectionClosed(f"the broker closed the connection with {remaining} of {size} "
                                           "bytes still expected")
                chunks.append(chunk)
                remaining -= len(chunk)
        except socket.timeout:
            raise WireTimeout(f"no complete response within {self.sock.gettimeout():.1f} s "
                              f"({size - remaining} of {size} bytes)") from None
        except ConnectionResetError as error:
            raise ConnectionClosed(f"the broker reset the connection ({error})") from None
        finally:
            self.sock.settimeout(self.timeout_s)
        return b"".join(chunks)
