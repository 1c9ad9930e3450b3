"""What a node's shell lends its request handlers and coordinators, as interfaces with one
implementation for a single node and one for a cluster node, so no caller asks which it is.

- `ReplicationWaiter`: wait until a partition's high watermark passes an offset (acks=all).
  A cluster node waits in its AcksPurgatory (Kafka's DelayedProduce); a single node's ISR is
  the leader alone, so an append is replicated as it lands (`ImmediateReplication`).
- `InterBrokerSender`: one request to another broker (markers, KIP-890 verification). A
  single node has no other broker: `no_peers` fails as an unreachable peer would.
- `ProducerIdManager`: producer ids for the transaction coordinator, from the node's own
  metadata log on a single node (`LocalProducerIdManager`), from the active controller in a
  cluster (`RpcProducerIdManager`, as Kafka's RPCProducerIdManager).
"""
from __future__ import annotations

import asyncio
from typing import Protocol

from reference.node.broker import TopicPartition
from reference.node.interface import BrokerNode
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode, KafkaError

INIT_PRODUCER_ID_VERSION = 0  # a plain producer id from the controller, for a new transactional id
PEER_ERRORS = (OSError, asyncio.TimeoutError, KafkaError)  # a call to another node failed, or was refused


class ReplicationWaiter(Protocol):
    async def wait_for_replication(self, broker: BrokerNode, topic_partition: TopicPartition, required_offset: int,
                                   timeout_ms: int, leader_epoch: int | None = None) -> ErrorCode: ...


class ImmediateReplication:
    """A single node: the ISR is this leader, the high watermark is the log end after an append."""

    async def wait_for_replication(self, broker: BrokerNode, topic_partition: TopicPartition, required_offset: int,
                                   timeout_ms: int, leader_epoch: int | None = None) -> ErrorCode:
        return ErrorCode.NONE


class InterBrokerSender(Protocol):
    async def __call__(self, broker_id: int, api_key: int, version: int, body: dict): ...


async def no_peers(broker_id: int, api_key: int, version: int, body: dict):
    raise ConnectionRefusedError(f"a single node has no broker {broker_id} to send {ApiKey(api_key).name} to")


class ProducerIdManager(Protocol):
    async def reserve(self) -> ErrorCode:
        """Make sure the next `take` has an id (may ask another node); NONE or a retriable error."""

    def take(self, now_ms: int) -> int: ...


class LocalProducerIdManager:
    def __init__(self, broker: BrokerNode) -> None:
        self.broker = broker

    async def reserve(self) -> ErrorCode:
        return ErrorCode.NONE

    def take(self, now_ms: int) -> int:
        return self.broker.allocate_producer_id(now_ms)


class RpcProducerIdManager:
    """Ids from the active controller: an InitProducerId without a transactional id, sent to
    this node, which forwards it to the controller."""

    def __init__(self, send: InterBrokerSender, node_id: int) -> None:
        self.send = send
        self.node_id = node_id
        self.spare: list[int] = []

    async def reserve(self) -> ErrorCode:
        if self.spare:
            return ErrorCode.NONE
        try:
            response = await self.send(self.node_id, ApiKey.INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION,
                                       {"transactional_id": None, "transaction_timeout_ms": 0})
        except PEER_ERRORS:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if response.error_code != ErrorCode.NONE:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        self.spare.append(response.producer_id)
        return ErrorCode.NONE

    def take(self, now_ms: int) -> int:
        return self.spare.pop()  # InitProducerId reserved one before it called the coordinator
