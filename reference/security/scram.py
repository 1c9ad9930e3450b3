"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's ScramSaslServer speaks them.

The arithmetic is the standard library's: hashlib.pbkdf2_hmac is RFC 5802's Hi(), hmac and
hashlib give HMAC() and H(). What is written here is the message grammar and the exchange,
which is the lesson.

Credentials (KIP-554): a user's credential is the salt, the iteration count, StoredKey and
ServerKey, never the password. The client sends SaltedPassword = Hi(password, salt, i) in
AlterUserScramCredentials; the controller derives the keys and stores a
UserScramCredentialRecord.

Exchange (server side), sans-IO, two steps:
    client-first  n,,n=<user>,r=<client nonce>        -> server-first r=<nonce>,s=<salt>,i=<i>
    client-final  c=biws,r=<nonce>,p=<proof>          -> server-final v=<server signature>
An unknown user, a wrong proof or a malformed message raises ScramError; Kafka answers every
one with the same SASL_AUTHENTICATION_FAILED message, so a client learns nothing about which
users exist.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": ("sha256", 1), "SCRAM-SHA-512": ("sha512", 2)}  # name -> (hash, Kafka's code)
MECHANISM_BY_CODE = {code: name for name, (_, code) in MECHANISMS.items()}
ITERATIONS_MIN = 4096  # Kafka's ScramMechanism.minIterations
ITERATIONS_MAX = 16384  # AlterUserScramCredentials refuses more (ScramControlManager)


class ScramError(Exception):
    """The exchange failed; the message is for the broker's log, not the client."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 Hi(Normalize(password), salt, i): PBKDF2 with HMAC of the mechanism's hash."""
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism][0], password.encode(), salt, iterations)


def credential_from_salted_password(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key")."""
    hash_name = MECHANISMS[mechanism][0]
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    return ScramCredential(salt, hashlib.new(hash_name, client_key).digest(),
                           hmac.digest(salted, b"Server Key", hash_name), iterations)


def _attributes(message: str, expected: str) -> dict[str, str]:
    """'a=1,b=2' -> {'a': '1', 'b': '2'} with exactly the expected attribute letters, in order."""
    parts = message.split(",")
    names = [part[:2] for part in parts]
    if names != [f"{letter}=" for letter in expected]:
        raise ScramError(f"malformed SCRAM message {message!r}: expected attributes {','.join(expected)}")
    return {part[0]: part[2:] for part in parts}


def _decode_name(name: str) -> str:
    """RFC 5802 saslname: ',' is sent as '=2C' and '=' as '=3D'; any other '=' is malformed."""
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError(f"malformed SCRAM user name {name!r}")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One SCRAM exchange on the server. `credentials(user)` returns the stored ScramCredential
    or None; `nonce` is the server's random part (passed in: sans-IO)."""

    def __init__(self, mechanism: str, credentials: Callable[[str], ScramCredential | None], nonce: str) -> None:
        assert mechanism in MECHANISMS, mechanism
        self.mechanism = mechanism
        self._hash = MECHANISMS[mechanism][0]
        self._credentials = credentials
        self._server_nonce = nonce
        self._step = 0
        self.username: str | None = None  # set once the exchange has succeeded

    @property
    def complete(self) -> bool:
        return self._step == 2

    def evaluate(self, token: bytes) -> bytes:
        """One client message -> the server's answer; ScramError ends the exchange."""
        try:
            message = token.decode()
        except UnicodeDecodeError:
            raise ScramError("SCRAM message is not UTF-8") from None
        if self._step == 0:
            return self._client_first(message)
        if self._step == 1:
            return self._client_final(message)
        raise ScramError("SCRAM exchange already complete")

    def _client_first(self, message: str) -> bytes:
        gs2_flag, _, rest = message.partition(",")
        authzid, _, bare = rest.partition(",")
        if gs2_flag != "n":  # no channel binding: Kafka accepts GS2 flag 'n' only
            raise ScramError(f"unsupported GS2 header {message[:10]!r}: channel binding is not supported")
        if authzid and not authzid.startswith("a="):
            raise ScramError(f"malformed SCRAM client-first message {message!r}")
        parts = bare.split(",")
        if len(parts) < 2 or not parts[0].startswith("n=") or not parts[1].startswith("r=") or not parts[1][2:]:
            raise ScramError(f"malformed SCRAM client-first message {message!r}")
        user = _decode_name(parts[0][2:])
        if authzid and _decode_name(authzid[2:]) != user:
            raise ScramError(f"authorization id {authzid[2:]!r} differs from user {user!r}")
        extensions = dict(part.partition("=")[::2] for part in parts[2:])
        if extensions.get("tokenauth") == "true":
            raise ScramError("delegation tokens are not supported")
        credential = self._credentials(user)
        if credential is None:
            raise ScramError(f"unknown SCRAM user {user!r} for {self.mechanism}")
        if credential.iterations < ITERATIONS_MIN:
            raise ScramError(f"{user!r} has {credential.iterations} iterations < {ITERATIONS_MIN}")
        self._user, self._credential = user, credential
        self._nonce = parts[1][2:] + self._server_nonce
        self._client_first_bare = bare
        self._server_first = f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        self._gs2_header = f"{gs2_flag},{authzid},"
        self._step = 1
        return self._server_first.encode()

    def _client_final(self, message: str) -> bytes:
        without_proof, _, _ = message.rpartition(",p=")
        attributes = _attributes(message, "crp")
        if attributes["r"] != self._nonce:
            raise ScramError("the client-final nonce is not the one the server sent")
        if attributes["c"] != base64.b64encode(self._gs2_header.encode()).decode():
            raise ScramError("the channel binding in client-final does not match the GS2 header")
        try:
            proof = base64.b64decode(attributes["p"], validate=True)
        except ValueError:
            raise ScramError("the client proof is not base64") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = hmac.digest(self._credential.stored_key, auth_message, self._hash)
        if len(proof) != len(client_signature):
            raise ScramError("the client proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), self._credential.stored_key):
            raise ScramError(f"invalid SCRAM proof for user {self._user!r}")
        server_signature = hmac.digest(self._credential.server_key, auth_message, self._hash)
        self.username = self._user
        self._step = 2
        return b"v=" + base64.b64encode(server_signature)
