"""The long-lived parts of a node that request handlers call: the group and transaction
coordinators that follow their internal topics' leadership, and the capabilities the shell
lends them (acks=all waits, inter-broker requests, producer ids). `NodeServices` bundles them;
the shell builds it once per node (`node_services`) and hands it to every request in its
RequestContext, as Kafka's BrokerServer builds its coordinators and passes them to KafkaApis.
"""
from __future__ import annotations

from dataclasses import dataclass

from reference.node.interface import BrokerNode
from reference.runtime.capabilities import (
    ImmediateReplication, InterBrokerSender, LocalProducerIdManager, ProducerIdManager, ReplicationWaiter, no_peers,
)
from reference.runtime.groups import GroupCoordinatorRuntime
from reference.runtime.transactions import TransactionCoordinatorRuntime


@dataclass(frozen=True)
class NodeServices:
    groups: GroupCoordinatorRuntime
    transactions: TransactionCoordinatorRuntime
    replication: ReplicationWaiter  # acks=all: wait until the high watermark passes an offset
    peers: InterBrokerSender  # one request to another broker

    def next_deadline_ms(self) -> int | None:
        """When the coordinators' timers next have work, if they have any."""
        deadlines = [d for d in (self.groups.next_deadline_ms(), self.transactions.next_deadline_ms())
                     if d is not None]
        return min(deadlines, default=None)


def node_services(broker: BrokerNode, now_ms: int, replication: ReplicationWaiter = ImmediateReplication(),
                  peers: InterBrokerSender = no_peers, producer_ids: ProducerIdManager | None = None) -> NodeServices:
    """A single node's services by default; a cluster node passes its AcksPurgatory, its
    inter-broker sender and the controller's producer ids."""
    groups = GroupCoordinatorRuntime(broker, replication)
    transactions = TransactionCoordinatorRuntime(broker, groups, replication, peers,
                                                 producer_ids or LocalProducerIdManager(broker), now_ms)
    return NodeServices(groups, transactions, replication, peers)
