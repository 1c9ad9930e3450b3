"""SASL on a connection, as Kafka's SaslServerAuthenticator runs it (KIP-43, KIP-152, KIP-368).

A sans-IO state machine per connection. The shell asks `admits(api_key, now_ms)` before
handling a request, hands SaslHandshake and SaslAuthenticate bodies (and, after a v0
handshake, raw token frames) to it, and sends what it returns:

    HANDSHAKE      ApiVersions (once) or SaslHandshake; anything else closes the connection
                   with no answer (AUTH-1). An unknown mechanism: UNSUPPORTED_SASL_MECHANISM,
                   then the connection closes.
    AUTHENTICATE   after SaslHandshake v1: SaslAuthenticate tokens (v0-2).
    RAW_TOKENS     after SaslHandshake v0: size-prefixed tokens without request headers.
    AUTHENTICATED  every request goes to its handler with the principal. With
                   connections.max.reauth.ms > 0, SaslAuthenticate v1+ tells the client the
                   session lifetime; after it expires only SaslHandshake is admitted, which
                   starts a re-authentication that must name the same principal (KIP-368).
    FAILED         the answer was SASL_AUTHENTICATION_FAILED (or the v0 exchange failed);
                   the shell closes the connection after connection.failed.authentication.delay.ms.

Mechanisms: PLAIN (users from the listener's JAAS config, `user_<name>="<password>"`) and
SCRAM-SHA-256/512 (credentials from the metadata log, reference/security/scram.py).
"""
from __future__ import annotations

import enum
import hmac
from collections.abc import Callable
from dataclasses import dataclass, field

from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from reference.security.principal import USER_TYPE, KafkaPrincipal
from reference.security.scram import MECHANISMS as SCRAM_MECHANISMS
from reference.security.scram import ScramCredential, ScramError, ScramServer

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
AUTHENTICATION_FAILED_MESSAGE = "Authentication failed: Invalid username or password"  # Kafka's, for PLAIN
SCRAM_FAILED_MESSAGE = "Authentication failed during authentication due to invalid credentials with SASL mechanism "
SESSION_LIFETIME_VERSION = 1  # SaslAuthenticate v1 added session_lifetime_ms (KIP-368)


class State(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    RAW_TOKENS = "raw tokens"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class AuthenticationFailed(Exception):
    """Raised by a mechanism; `client_message` is what the client is told."""

    def __init__(self, log_message: str, client_message: str) -> None:
        super().__init__(log_message)
        self.client_message = client_message


@dataclass(frozen=True)
class SaslConfig:
    """One SASL listener's settings (reference/security/listeners.py builds it)."""
    mechanisms: tuple[str, ...]
    plain_users: dict[str, str] = field(default_factory=dict)  # from PlainLoginModule user_<name>="<pw>"
    reauth_ms: int = 0  # connections.max.reauth.ms; 0: never re-authenticate


class PlainServer:
    """RFC 4616 PLAIN: one message `authzid NUL user NUL password` (Kafka's PlainSaslServer)."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.username: str | None = None

    @property
    def complete(self) -> bool:
        return self.username is not None

    def evaluate(self, token: bytes) -> bytes:
        fields = token.split(b"\x00")
        if len(fields) != 3:
            raise AuthenticationFailed("PLAIN message does not have 3 NUL-separated fields",
                                       "Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user, password = (part.decode(errors="replace") for part in fields)
        if not user or not password:
            raise AuthenticationFailed("PLAIN message with an empty user or password",
                                       "Authentication failed: username and password must not be empty")
        if authzid and authzid != user:
            raise AuthenticationFailed(f"PLAIN authorization id {authzid!r} differs from user {user!r}",
                                       "Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        expected = self._users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed(f"PLAIN: wrong password or unknown user {user!r}", AUTHENTICATION_FAILED_MESSAGE)
        self.username = user
        return b""


class SaslAuthenticator:
    """The SASL state of one connection. `scram_credentials(mechanism, user)` reads the metadata
    image; `new_nonce()` gives a fresh random string for SCRAM."""

    def __init__(self, config: SaslConfig, scram_credentials: Callable[[str, str], ScramCredential | None],
                 new_nonce: Callable[[], str]) -> None:
        self.config = config
        self._scram_credentials = scram_credentials
        self._new_nonce = new_nonce
        self.state = State.HANDSHAKE
        self.principal: KafkaPrincipal | None = None
        self.mechanism: str | None = None
        self.session_expiry_ms: int | None = None  # KIP-368: when the session must be re-authenticated
        self.failure: str | None = None  # why authentication failed, for the broker's log
        self._server = None
        self._api_versions_seen = False

    # -- the gate -------------------------------------------------------------------------

    def admits(self, api_key: int, now_ms: int) -> str | None:
        """None when the request may go on; else why the connection closes without an answer."""
        if self.state == State.AUTHENTICATED:
            if self.session_expiry_ms is not None and now_ms >= self.session_expiry_ms \
                    and api_key != ApiKey.SASL_HANDSHAKE:
                return f"the SASL session of {self.principal} expired; re-authenticate (KIP-368)"
            return None
        if self.state == State.HANDSHAKE:
            if api_key == ApiKey.API_VERSIONS and not self._api_versions_seen:
                self._api_versions_seen = True
                return None
            if api_key == ApiKey.SASL_HANDSHAKE:
                return None
            return f"{_name(api_key)} before SASL authentication (only ApiVersions and SaslHandshake are served)"
        if self.state == State.AUTHENTICATE and api_key == ApiKey.SASL_AUTHENTICATE:
            return None
        return f"{_name(api_key)} while SASL is in state {self.state.value}"

    @property
    def expects_raw_token(self) -> bool:
        return self.state == State.RAW_TOKENS

    @property
    def authenticated(self) -> bool:
        return self.state == State.AUTHENTICATED

    # -- SaslHandshake ----------------------------------------------------------------------

    def handshake(self, mechanism: str, version: int) -> dict:
        """SaslHandshake (v0: raw tokens follow; v1: SaslAuthenticate follows)."""
        enabled = list(self.config.mechanisms)
        reauthenticating = self.state == State.AUTHENTICATED
        if reauthenticating and (self.config.reauth_ms <= 0 or version < 1):
            return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": enabled}
        if mechanism not in enabled or (reauthenticating and mechanism != self.mechanism):
            self.state = State.FAILED
            return {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled}
        self.mechanism = mechanism
        if mechanism == PLAIN:
            self._server = PlainServer(self.config.plain_users)
        else:
            self._server = ScramServer(mechanism, lambda user: self._scram_credentials(mechanism, user),
                                       self._new_nonce())
        self.state = State.AUTHENTICATE if version >= 1 else State.RAW_TOKENS
        return {"error_code": ErrorCode.NONE, "mechanisms": enabled}

    # -- tokens -----------------------------------------------------------------------------

    def authenticate(self, token: bytes, version: int, now_ms: int) -> dict:
        """SaslAuthenticate: the mechanism's answer, or SASL_AUTHENTICATION_FAILED (then the close);
        ILLEGAL_SASL_STATE when no exchange is under way (e.g. once authenticated)."""
        if self.state != State.AUTHENTICATE:
            return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "error_message": f"SASL is {self.state.value}",
                    "auth_bytes": b"", "session_lifetime_ms": 0}
        try:
            challenge = self._evaluate(token, now_ms)
        except AuthenticationFailed as e:
            self.state = State.FAILED
            self.failure = str(e)
            return {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": e.client_message,
                    "auth_bytes": b"", "session_lifetime_ms": 0}
        lifetime_ms = 0
        if self.authenticated and self.config.reauth_ms > 0 and version >= SESSION_LIFETIME_VERSION:
            lifetime_ms = self.config.reauth_ms
            self.session_expiry_ms = now_ms + lifetime_ms
        return {"error_code": ErrorCode.NONE, "error_message": None, "auth_bytes": challenge,
                "session_lifetime_ms": lifetime_ms}

    def raw_token(self, token: bytes, now_ms: int) -> bytes | None:
        """A token after SaslHandshake v0: the answer's bytes, or None (close without an answer)."""
        try:
            return self._evaluate(token, now_ms)
        except AuthenticationFailed as e:
            self.state = State.FAILED
            self.failure = str(e)
            return None

    def _evaluate(self, token: bytes, now_ms: int) -> bytes:
        assert self._server is not None
        try:
            challenge = self._server.evaluate(bytes(token))
        except ScramError as e:
            raise AuthenticationFailed(str(e), SCRAM_FAILED_MESSAGE + self.mechanism) from None
        if self._server.complete:
            principal = KafkaPrincipal(USER_TYPE, self._server.username)
            if self.principal is not None and principal != self.principal:  # KIP-368: same principal only
                raise AuthenticationFailed(f"re-authentication as {principal} on a connection of {self.principal}",
                                           "Cannot change principals during re-authentication")
            self.principal = principal
            self.state = State.AUTHENTICATED
            self.session_expiry_ms = None
        return challenge


def _name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API key {api_key}"
