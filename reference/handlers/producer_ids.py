"""InitProducerId (key 22) for idempotent producers without a transactional id.

Each call hands out a fresh producer id with epoch 0, from blocks the broker reserves in its
metadata log, so ids are never reused across restarts. An epoch bump request (v3+, KIP-360:
producer_id and producer_epoch given) also gets a fresh id, as Kafka does for producers
without a transactional id. A transactional_id is refused with INVALID_REQUEST until the
transaction coordinator exists (clients reach it through FindCoordinator, not advertised).
"""
from __future__ import annotations

from reference.handlers.context import RequestContext
from reference.node.broker import Broker
from reference.protocol.errors import ErrorCode

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


def handle_init_producer_id(broker: Broker, request, context: RequestContext) -> dict:
    if request.transactional_id is not None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST,
                "producer_id": NO_PRODUCER_ID, "producer_epoch": NO_PRODUCER_EPOCH}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "producer_id": broker.allocate_producer_id(context.now_ms), "producer_epoch": 0}
