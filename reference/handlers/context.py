"""What every handler receives besides the request body: who asked, which version, when."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequestContext:
    api_version: int
    correlation_id: int
    client_id: str | None
    now_ms: int


class CloseConnection(Exception):
    """The request is answered by closing the connection (e.g. a failed acks=0 produce)."""
