"""TLS for SSL and SASL_SSL listeners with the standard library's ssl module.

`server_context(lookup)` builds an ssl.SSLContext from Kafka's properties (PEM stores, KIP-651):
    ssl.keystore.type=PEM
    ssl.keystore.location=/path/server.pem         key and certificate chain in one PEM file
  or ssl.keystore.certificate.chain=<PEM text>     and ssl.keystore.key=<PEM text> (KIP-651)
    ssl.key.password                               the key's password, if it is encrypted
    ssl.truststore.location=/path/ca.pem | ssl.truststore.certificates=<PEM text>
    ssl.client.auth=none|requested|required

`TlsChannel` runs TLS over a non-blocking socket with an ssl.SSLObject between two MemoryBIOs:
the TLS state machine is sans-IO, and the shell moves its bytes with the event loop's sock_*
calls, as it does for plaintext connections.
"""
from __future__ import annotations

import asyncio
import functools
import os
import socket
import ssl
import tempfile
from collections.abc import Callable

from reference.security.principal import rfc2253_subject

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
RECEIVE_BYTES = 64 * 1024


def server_context(lookup: Callable[[str], str | None], client_auth: str) -> ssl.SSLContext:
    """An SSLContext for one listener; ValueError with one line naming the property at fault."""
    keystore_type = (lookup("ssl.keystore.type") or "PEM").upper()
    if keystore_type != "PEM":
        raise ValueError(f"ssl.keystore.type={keystore_type} is not supported; use PEM "
                         "(e.g. openssl pkcs12 -in store.p12 -nodes -out server.pem)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    password = lookup("ssl.key.password")
    location, chain, key = (lookup(name) for name in
                            ("ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key"))
    try:
        if location:
            context.load_cert_chain(location, password=password)
        elif chain and key:
            _load_inline_chain(context, chain, key, password)
        else:
            raise ValueError("an SSL listener needs ssl.keystore.location, or ssl.keystore.certificate.chain "
                             "and ssl.keystore.key")
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"ssl.keystore: cannot load the key and certificate chain "
                         f"({location or 'ssl.keystore.certificate.chain'}): {e}") from None
    truststore_type = (lookup("ssl.truststore.type") or "PEM").upper()
    if truststore_type != "PEM":
        raise ValueError(f"ssl.truststore.type={truststore_type} is not supported; use PEM")
    trust_location, trust_certificates = lookup("ssl.truststore.location"), lookup("ssl.truststore.certificates")
    try:
        if trust_location:
            context.load_verify_locations(cafile=trust_location)
        elif trust_certificates:
            context.load_verify_locations(cadata=trust_certificates)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"ssl.truststore: cannot load {trust_location or 'ssl.truststore.certificates'}: {e}") from None
    if client_auth not in CLIENT_AUTH:
        raise ValueError(f"ssl.client.auth={client_auth} must be none, requested or required")
    if client_auth != "none" and not (trust_location or trust_certificates):
        raise ValueError(f"ssl.client.auth={client_auth} needs ssl.truststore.location to verify client certificates")
    context.verify_mode = CLIENT_AUTH[client_auth]
    return context


def _load_inline_chain(context: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """KIP-651 gives the PEM text itself; ssl loads chains from files only, so a private
    temporary file holds it for the moment of loading."""
    descriptor, path = tempfile.mkstemp(suffix=".pem")  # mode 0600
    try:
        with os.fdopen(descriptor, "w") as f:
            f.write(key.strip() + "\n" + chain.strip() + "\n")
        context.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


class TlsChannel:
    """A TLS connection over a non-blocking socket: a listener's (server side), or, given the
    server's host name, a node's connection to another node (client side)."""

    def __init__(self, connection: socket.socket, context: ssl.SSLContext, server_hostname: str | None = None) -> None:
        self._socket = connection
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=server_hostname is None,
                                     server_hostname=server_hostname)

    async def handshake(self) -> None:
        """Complete the TLS handshake; ssl.SSLError on a client that does not speak TLS (e.g.
        a plaintext Kafka request on this port) or presents a certificate that does not verify."""
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._receive():
                    raise ConnectionResetError("closed during the TLS handshake")
        await self._flush()

    def peer_subject(self) -> str | None:
        """The verified client certificate's subject in RFC 2253 form, None without one."""
        certificate = self._tls.getpeercert()
        return rfc2253_subject(certificate["subject"]) if certificate else None

    async def recv_into(self, buffer) -> int:
        """Decrypted bytes into buffer; 0 at the end of the stream."""
        while True:
            try:
                return self._tls.read(len(buffer), buffer)
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._receive():
                    return 0
            except ssl.SSLZeroReturnError:
                return 0

    async def sendall(self, data) -> None:
        self._tls.write(data)
        await self._flush()

    async def _receive(self) -> bool:
        data = await asyncio.get_running_loop().sock_recv(self._socket, RECEIVE_BYTES)
        if not data:
            return False
        self._incoming.write(data)
        return True

    async def _flush(self) -> None:
        data = self._outgoing.read()
        if data:
            await asyncio.get_running_loop().sock_sendall(self._socket, data)


class PlainChannel:
    """A plaintext connection: the event loop's sock_* calls, received straight into the buffer."""

    def __init__(self, connection: socket.socket) -> None:
        # The loop's own coroutines, bound to the socket: no coroutine of ours around each read
        # (a 1 MB produce request arrives in several reads).
        loop = asyncio.get_running_loop()
        self.recv_into = functools.partial(loop.sock_recv_into, connection)
        self.sendall = functools.partial(loop.sock_sendall, connection)
