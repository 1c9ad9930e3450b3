"""InitProducerId (key 22): idempotent producers here, transactional ones at the transaction
coordinator (reference/handlers/transactions.py).

Without a transactional id, each call hands out a fresh producer id with epoch 0, from blocks the broker reserves in its
metadata log, so ids are never reused across restarts. An epoch bump request (v3+, KIP-360:
producer_id and producer_epoch given) also gets a fresh id, as Kafka does for producers
without a transactional id.
"""
from __future__ import annotations

from reference.handlers.context import RequestContext
from reference.handlers.transactions import handle_init_producer_id_transactional
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode


async def handle_init_producer_id(broker: BrokerNode, request, context: RequestContext) -> dict:
    if request.transactional_id is not None:
        return await handle_init_producer_id_transactional(broker, request, context)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "producer_id": broker.allocate_producer_id(context.now_ms), "producer_epoch": 0}
