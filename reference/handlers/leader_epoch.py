"""The current-leader-epoch check of Fetch and ListOffsets (KIP-320), and the new-leader
hints of Produce and Fetch answers (KIP-951).

A client that names a leader epoch older than the partition's is fenced; a newer one means
this broker has not yet learned of it. -1 skips the check.

A Produce (v10+) or Fetch (v12+) that reached a broker which does not lead the partition is
answered with the leader this broker's metadata names, with its epoch, and (Produce v10+, Fetch
v16+) that leader's endpoint, so the client can go there without a Metadata round trip first.
"""
from __future__ import annotations

from reference.node.broker import TopicPartition
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode, KafkaError

NO_LEADER_EPOCH = -1
NO_LEADER = -1
LEADER_HINT_ERRORS = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


def check_current_leader_epoch(partition, current_leader_epoch: int) -> None:
    if current_leader_epoch == NO_LEADER_EPOCH or current_leader_epoch == partition.leader_epoch:
        return
    if current_leader_epoch < partition.leader_epoch:
        raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH,
                         f"epoch {current_leader_epoch} < leader epoch {partition.leader_epoch}")
    raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                     f"epoch {current_leader_epoch} > leader epoch {partition.leader_epoch}")


def current_leader(broker: BrokerNode, topic_partition: TopicPartition, endpoints: dict[int, dict]) -> dict:
    """The LeaderIdAndEpoch of a partition as this broker knows it (-1, -1 when it knows no
    leader), adding the leader's NodeEndpoint to `endpoints` (by node id)."""
    leader = broker.partition_leader(topic_partition.topic, topic_partition.partition)
    if leader is None:
        return {"leader_id": NO_LEADER, "leader_epoch": NO_LEADER_EPOCH}
    leader_id, host, port = leader
    endpoints[leader_id] = {"node_id": leader_id, "host": host, "port": port, "rack": None}
    epoch = broker.partition_metadata(topic_partition.topic, topic_partition.partition)["leader_epoch"]
    return {"leader_id": leader_id, "leader_epoch": epoch}
