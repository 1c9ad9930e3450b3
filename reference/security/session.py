"""One client connection's security state: its listener, the client's address, its principal,
and (on a SASL listener) the SASL authenticator that must succeed before anything is served."""
from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from reference.security.listeners import Listener
from reference.security.principal import ANONYMOUS, KafkaPrincipal
from reference.security.sasl import SaslAuthenticator, State
from reference.security.scram import ScramCredential

SASL_APIS = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
NONCE_BYTES = 18


@dataclass
class Session:
    listener: Listener
    client_host: str
    principal: KafkaPrincipal = ANONYMOUS
    authenticator: SaslAuthenticator | None = None
    close_reason: str | None = None  # set: close the connection once the response is sent

    @classmethod
    def open(cls, listener: Listener, client_host: str, principal: KafkaPrincipal,
             scram_credentials: Callable[[str, str], ScramCredential | None]) -> Session:
        authenticator = None
        if listener.sasl is not None:
            authenticator = SaslAuthenticator(listener.sasl, scram_credentials,
                                              lambda: secrets.token_urlsafe(NONCE_BYTES))
        return cls(listener, client_host, principal, authenticator)

    def gate(self, api_key: int, now_ms: int) -> str | None:
        """Why this request may not be served (the connection then closes unanswered), or None."""
        return None if self.authenticator is None else self.authenticator.admits(api_key, now_ms)

    def sasl_request(self, api_key: int, version: int, request, now_ms: int) -> dict:
        """SaslHandshake or SaslAuthenticate on a SASL listener."""
        assert self.authenticator is not None and api_key in SASL_APIS
        if api_key == ApiKey.SASL_HANDSHAKE:
            response = self.authenticator.handshake(request.mechanism, version)
            if response["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
                self.close_reason = f"unsupported SASL mechanism {request.mechanism!r}"
        else:
            response = self.authenticator.authenticate(request.auth_bytes, version, now_ms)
        self._after_token()
        return response

    def raw_token(self, token: bytes, now_ms: int) -> bytes | None:
        """A token after SaslHandshake v0; None: the exchange failed (close without an answer)."""
        assert self.authenticator is not None
        reply = self.authenticator.raw_token(token, now_ms)
        self._after_token()
        return reply

    def _after_token(self) -> None:
        if self.authenticator.state == State.FAILED:
            self.close_reason = self.close_reason or f"SASL authentication failed: {self.authenticator.failure}"
        if self.authenticator.principal is not None:
            self.principal = self.authenticator.principal
