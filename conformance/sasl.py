"""The client side of SASL for the wire layer: PLAIN and SCRAM-SHA-256/512 (RFC 5802, RFC 7677)
through SaslHandshake v1 and SaslAuthenticate, from librdkafka's property names
(sasl.mechanism(s), sasl.username, sasl.password). The arithmetic is hashlib's and hmac's."""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import ssl

from conformance.wire import WireClient
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SASL_AUTHENTICATE_VERSION = 1


class SaslFailed(ConnectionError):
    pass


def ssl_context(properties: dict[str, str]) -> ssl.SSLContext | None:
    """The TLS context that client properties (security.protocol, ssl.ca.location,
    ssl.certificate.location, ssl.key.location) ask for; None for a plaintext protocol."""
    if properties.get("security.protocol", "PLAINTEXT").upper() not in ("SSL", "SASL_SSL"):
        return None
    context = ssl.create_default_context(cafile=properties.get("ssl.ca.location"))
    if "ssl.certificate.location" in properties:
        context.load_cert_chain(properties["ssl.certificate.location"], properties.get("ssl.key.location"))
    return context


def connect(address: str, properties: dict[str, str], **options):
    """A WireClient to `address` with the properties' TLS, authenticated when they ask for SASL
    (PLAIN or SCRAM); the connection is closed again if authentication fails."""
    wire = WireClient(address, ssl_context=ssl_context(properties), **options)
    if properties.get("security.protocol", "PLAINTEXT").upper().startswith("SASL"):
        try:
            authenticate(wire, mechanism_of(properties), properties.get("sasl.username", ""),
                         properties.get("sasl.password", ""))
        except BaseException:
            wire.close()
            raise
    return wire


def mechanism_of(properties: dict[str, str]) -> str:
    return properties.get("sasl.mechanism", properties.get("sasl.mechanisms", "GSSAPI")).upper()


def authenticate(wire, mechanism: str, username: str, password: str) -> None:
    """Authenticate a fresh WireClient connection; SaslFailed says what the broker answered."""
    handshake = wire.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    if handshake.error_code != ErrorCode.NONE:
        raise SaslFailed(f"SaslHandshake {mechanism}: error {handshake.error_code}, broker offers {handshake.mechanisms}")
    if mechanism == "PLAIN":
        _exchange(wire, f"\0{username}\0{password}".encode())
    elif mechanism in SCRAM_HASHES:
        _scram(wire, SCRAM_HASHES[mechanism], username, password)
    else:
        raise SaslFailed(f"the wire layer speaks PLAIN and SCRAM only, not {mechanism}")


def _exchange(wire, token: bytes) -> bytes:
    answer = wire.request(ApiKey.SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION, {"auth_bytes": token})
    if answer.error_code != ErrorCode.NONE:
        raise SaslFailed(f"SaslAuthenticate: error {answer.error_code}: {answer.error_message}")
    return bytes(answer.auth_bytes)


def _scram(wire, hash_name: str, username: str, password: str) -> None:
    client_nonce = secrets.token_urlsafe(18)
    name = username.replace("=", "=3D").replace(",", "=2C")
    client_first_bare = f"n={name},r={client_nonce}"
    server_first = _exchange(wire, f"n,,{client_first_bare}".encode()).decode()
    fields = dict(part.split("=", 1) for part in server_first.split(","))
    if not fields["r"].startswith(client_nonce):
        raise SaslFailed("the server's SCRAM nonce does not extend the client's")
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(hashlib.new(hash_name, client_key).digest(), auth_message, hash_name)
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    server_final = _exchange(wire, f"{without_proof},p={proof}".encode()).decode()
    expected = hmac.digest(hmac.digest(salted, b"Server Key", hash_name), auth_message, hash_name)
    if server_final != "v=" + base64.b64encode(expected).decode():
        raise SaslFailed("the server's SCRAM signature does not verify")


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """What AlterUserScramCredentials carries (KIP-554): Hi(password, salt, iterations)."""
    return hashlib.pbkdf2_hmac(SCRAM_HASHES[mechanism], password.encode(), salt, iterations)
