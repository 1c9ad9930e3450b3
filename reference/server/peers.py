"""Connections from one node to another: the client side of every inter-node RPC (Kafka's
NetworkClient as the raft client, the controller channel and the replica fetchers use it).

One request in flight per connection; a connection that fails or times out is closed and opened
again on the next call. A connection speaks the security protocol of the listener it goes to
(reference/security/inter_node.py): TLS with the node's truststore, then SASL (SaslHandshake v1,
SaslAuthenticate v2) with the node's own credentials, before its first request. A refused
authentication is a ConnectionRefusedError, so callers treat it as a peer they cannot reach.
"""
from __future__ import annotations

import asyncio
import socket

from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from reference.protocol.framing import FrameDecoder, FrameTooLarge
from reference.protocol.messages import decode_response, encode_request
from reference.security.inter_node import ClientSecurity
from reference.security.tls import PlainChannel, TlsChannel

PEER_TIMEOUT_S = 5.0
PEER_ERRORS = (OSError, asyncio.TimeoutError)  # a peer that is gone, refuses, or closes mid-call
PEER_RESPONSE_MAX_BYTES = 100 * 1024 * 1024  # a response frame from another node (socket.request.max.bytes)
SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_VERSION = 2


class PeerConnection:
    """One connection to another node; one request in flight at a time, reconnecting after errors.

    A plain non-blocking socket, as the server's connections are (reference/server/server.py):
    a response is received straight into the FrameDecoder's buffer for it and decoded in place,
    so a fetched 1 MB batch reaches the follower's log without a copy on the way (over TLS, the
    decrypted bytes are written into that buffer)."""

    def __init__(self, host: str, port: int, client_id: str, security: ClientSecurity | None = None) -> None:
        self.address = (host, port)
        self.client_id = client_id
        self.security = security
        self._lock = asyncio.Lock()
        self._socket: socket.socket | None = None
        self._channel: PlainChannel | TlsChannel | None = None
        self._decoder = FrameDecoder(PEER_RESPONSE_MAX_BYTES)
        self._correlation_id = 0

    async def call(self, api_key: int, version: int, body: dict, timeout_s: float = PEER_TIMEOUT_S):
        async with self._lock:
            try:
                return await asyncio.wait_for(self._call(api_key, version, body), timeout_s)
            except BaseException:
                self.close()
                raise

    async def _call(self, api_key: int, version: int, body: dict):
        if self._channel is None:
            await self._open()
        return await self._exchange(api_key, version, body)

    async def _open(self) -> None:
        self._socket = await _connect(*self.address)
        if self.security is None or self.security.ssl_context is None:
            self._channel = PlainChannel(self._socket)
        else:
            self._channel = TlsChannel(self._socket, self.security.ssl_context, server_hostname=self.address[0])
            await self._channel.handshake()
        sasl = self.security.sasl_client() if self.security is not None else None
        if sasl is None:
            return
        handshake = await self._exchange(ApiKey.SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION, {"mechanism": sasl.mechanism})
        if handshake.error_code != ErrorCode.NONE:
            raise ConnectionRefusedError(f"{self.address}: SASL mechanism {sasl.mechanism} refused "
                                         f"(enabled: {', '.join(handshake.mechanisms)})")
        token = sasl.first()
        while token is not None:
            answer = await self._exchange(ApiKey.SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION, {"auth_bytes": token})
            if answer.error_code != ErrorCode.NONE:
                raise ConnectionRefusedError(f"{self.address}: SASL authentication as {self.security.username} "
                                             f"failed: {answer.error_message}")
            try:
                token = None if sasl.mechanism == "PLAIN" else sasl.evaluate(bytes(answer.auth_bytes))
            except ValueError as e:
                raise ConnectionRefusedError(f"{self.address}: {e}") from None

    async def _exchange(self, api_key: int, version: int, body: dict):
        """One request and its response on the open channel."""
        self._correlation_id += 1
        await self._channel.sendall(encode_request(api_key, version, self._correlation_id, self.client_id, body))
        frames = []
        while not frames:
            received = await self._channel.recv_into(self._decoder.get_buffer())
            if not received:
                raise ConnectionResetError(f"{self.address} closed the connection")
            try:
                frames = self._decoder.buffer_updated(received)
            except FrameTooLarge as e:
                raise ConnectionResetError(str(e)) from e
        assert len(frames) == 1, "one request in flight, so one response"
        correlation_id, response = decode_response(api_key, version, frames[0])
        assert correlation_id == self._correlation_id, (correlation_id, self._correlation_id)
        return response

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = self._channel = None
            self._decoder = FrameDecoder(PEER_RESPONSE_MAX_BYTES)  # a half-received frame is gone


async def _connect(host: str, port: int) -> socket.socket:
    loop = asyncio.get_running_loop()
    family, _, _, _, address = (await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))[0]
    connection = socket.socket(family, socket.SOCK_STREAM)
    try:
        connection.setblocking(False)
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await loop.sock_connect(connection, address)
    except BaseException:
        connection.close()
        raise
    return connection
