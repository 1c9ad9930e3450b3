"""What every handler receives besides the request body: who asked (principal, listener,
address), which version, when."""
from __future__ import annotations

from dataclasses import dataclass

from reference.security.principal import ANONYMOUS, KafkaPrincipal


@dataclass(frozen=True)
class RequestContext:
    api_version: int
    correlation_id: int
    client_id: str | None
    now_ms: int
    listener: str = ""  # the listener's name, e.g. SASL_SSL
    principal: KafkaPrincipal = ANONYMOUS  # who asked (TLS certificate or SASL), for the authorizer
    client_host: str = ""  # the client's IP address, for ACLs with a host


class CloseConnection(Exception):
    """The request is answered by closing the connection (e.g. a failed acks=0 produce)."""
