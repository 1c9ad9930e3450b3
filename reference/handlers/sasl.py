"""SaslHandshake (key 17) and SaslAuthenticate (key 36) where no SASL exchange is expected.

On a SASL listener the connection's authenticator answers both (reference/security/sasl.py,
driven by the shell before any handler). They reach these handlers only on a listener without
SASL, or once a SASL connection is authenticated and re-authentication is off: Kafka answers
ILLEGAL_SASL_STATE there.
"""
from __future__ import annotations

from reference.handlers.context import RequestContext
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode


def handle_sasl_handshake(broker: BrokerNode, request, context: RequestContext) -> dict:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}


def handle_sasl_authenticate(broker: BrokerNode, request, context: RequestContext) -> dict:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "error_message": "Unexpected SASL request",
            "auth_bytes": b"", "session_lifetime_ms": 0}
