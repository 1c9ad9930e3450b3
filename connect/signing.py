"""KIP-507 inter-worker request signing (connect.protocol=sessioned).

The leader keeps a session key in the config topic (`session-key` {"key": base64,
"algorithm", "creation-timestamp"}), makes a new one when it is older than
inter.worker.key.ttl.ms, and every worker reads it. A worker's internal requests to the
leader (POST /connectors/<c>/tasks, PUT /connectors/<c>/fence) carry the HMAC of their body
under that key in `X-Connect-Authorization` (base64) and the algorithm in
`X-Connect-Request-Signature-Algorithm`; the leader answers 400 to an unsigned one, 400 to an
algorithm it does not verify with (inter.worker.verification.algorithms) and 403 to a wrong
signature, as Connect's DistributedHerder does.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

SIGNATURE_HEADER = "X-Connect-Authorization"
ALGORITHM_HEADER = "X-Connect-Request-Signature-Algorithm"
# Java's Mac names -> hashlib; key sizes in bytes as Java's KeyGenerator makes them by default
DIGESTS = {"HmacSHA256": hashlib.sha256, "HmacSHA1": hashlib.sha1, "HmacSHA512": hashlib.sha512}
KEY_BYTES_DEFAULT = {"HmacSHA256": 32, "HmacSHA1": 64, "HmacSHA512": 64}


@dataclass(frozen=True)
class SessionKey:
    key: bytes
    algorithm: str
    creation_timestamp_ms: int

    @classmethod
    def generate(cls, algorithm: str, now_ms: int, key_bits: int | None = None) -> SessionKey:
        size = key_bits // 8 if key_bits else KEY_BYTES_DEFAULT[algorithm]
        return cls(secrets.token_bytes(size), algorithm, now_ms)

    def record(self) -> dict:
        return {"key": base64.b64encode(self.key).decode(), "algorithm": self.algorithm,
                "creation-timestamp": self.creation_timestamp_ms}

    @classmethod
    def from_record(cls, value: dict) -> SessionKey:
        return cls(base64.b64decode(value["key"]), value["algorithm"], value["creation-timestamp"])


def signature_headers(key: SessionKey, algorithm: str, body: bytes) -> dict[str, str]:
    mac = hmac.new(key.key, body, DIGESTS[algorithm]).digest()
    return {SIGNATURE_HEADER: base64.b64encode(mac).decode(), ALGORITHM_HEADER: algorithm}


class SignatureError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def verify(key: SessionKey | None, verification_algorithms: list[str], body: bytes, headers) -> None:
    """Raise SignatureError (400 or 403) unless the request is signed with the session key."""
    signature, algorithm = headers.get(SIGNATURE_HEADER), headers.get(ALGORITHM_HEADER)
    if signature is None or algorithm is None:
        raise SignatureError(400, "Internal request missing required signature")
    if algorithm not in verification_algorithms or algorithm not in DIGESTS:
        raise SignatureError(400, f"This worker does not support the signature algorithm {algorithm}")
    if key is None:
        raise SignatureError(403, "Internal request contained invalid signature.")  # no session key yet
    expected = signature_headers(key, algorithm, body)[SIGNATURE_HEADER]
    if not hmac.compare_digest(expected, signature):
        raise SignatureError(403, "Internal request contained invalid signature.")
