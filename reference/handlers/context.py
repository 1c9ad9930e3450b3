"""What every handler receives besides the request body and the node's state: who asked
(principal, listener, address), which version, when, and the node's services (its group and
transaction coordinators, acks=all waits, inter-broker requests; reference/runtime/)."""
from __future__ import annotations

from dataclasses import dataclass

from reference.runtime import NodeServices
from reference.security.principal import ANONYMOUS, KafkaPrincipal


@dataclass(frozen=True)
class RequestContext:
    api_version: int
    correlation_id: int
    client_id: str | None
    now_ms: int
    services: NodeServices
    listener: str = ""  # the listener's name, e.g. SASL_SSL
    principal: KafkaPrincipal = ANONYMOUS  # who asked (TLS certificate or SASL), for the authorizer
    client_host: str = ""  # the client's IP address, for ACLs with a host


class CloseConnection(Exception):
    """The request is answered by closing the connection (e.g. a failed acks=0 produce)."""
