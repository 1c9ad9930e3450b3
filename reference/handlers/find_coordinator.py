"""FindCoordinator: which node coordinates a group (the leader of its `__consumer_offsets`
partition) or a transactional id (the leader of its `__transaction_state` partition).
"""
from __future__ import annotations

from reference.coordinator.records import CONSUMER_OFFSETS_TOPIC
from reference.handlers.context import RequestContext
from reference.node.interface import BrokerNode
from reference.runtime import NodeServices
from reference.protocol.errors import ErrorCode

COORDINATOR_KEY_TYPES = {0: "group", 1: "transaction"}  # FindCoordinator KeyType
GROUP_KEY_TYPE = 0
BATCHED_COORDINATOR_KEYS_VERSION = 4  # FindCoordinator v4+ (KIP-699)


def handle_find_coordinator(broker: BrokerNode, request, context: RequestContext) -> dict:
    """The leader of the key's partition of `__consumer_offsets` (or `__transaction_state`)."""
    context.services.groups.start(context.now_ms)
    keys = (request.coordinator_keys if context.api_version >= BATCHED_COORDINATOR_KEYS_VERSION
            else [request.key])
    key_type = request.get("key_type", GROUP_KEY_TYPE)  # v0 has no key type: it finds group coordinators
    found = [_find(broker, context.services, key_type, key, context.now_ms) for key in keys]
    if context.api_version >= BATCHED_COORDINATOR_KEYS_VERSION:
        return {"coordinators": [{"key": key, **each} for key, each in zip(keys, found)]}
    return found[0]


def _find(broker: BrokerNode, services: NodeServices, key_type: int, key: str, now_ms: int) -> dict:
    if key_type not in COORDINATOR_KEY_TYPES:
        return {"node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.INVALID_REQUEST,
                "error_message": f"key type {key_type}"}
    if COORDINATOR_KEY_TYPES[key_type] == "group":
        leader = broker.partition_leader(CONSUMER_OFFSETS_TOPIC, services.groups.coordinator.partition_for(key))
    else:
        leader = services.transactions.coordinator_node(key, now_ms)
    if leader is None:
        return {"node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                "error_message": None}
    node_id, host, port = leader
    return {"node_id": node_id, "host": host, "port": port, "error_code": ErrorCode.NONE, "error_message": None}
