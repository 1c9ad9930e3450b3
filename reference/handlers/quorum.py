"""DescribeQuorum (key 55): the controller quorum as its leader sees it (KIP-595, KIP-836).

The quorum's one partition is `__cluster_metadata-0`. The answer names the leader, its epoch
and high watermark, and each voter's log end offset, last fetch and last caught-up time, from
which kafka-metadata-quorum.sh (and `kspec cluster status`) shows each voter's lag. Only the
Raft leader knows the voters' progress, so the cluster's shell forwards the request to the
active controller, as brokers forward admin requests (KIP-590). Observers (broker-only nodes,
which replicate the log without voting) are listed with the same figures, as long as they
fetch. v2's Nodes list the voters' addresses (in combined mode, where the brokers listen).
"""
from __future__ import annotations

from reference.controller.raft import RaftRole
from reference.handlers.context import RequestContext
from reference.node.base import METADATA_TOPIC
from reference.protocol.errors import ErrorCode
from reference.protocol.primitives import ZERO_UUID

METADATA_PARTITION = 0
CONTROLLER_LISTENER = "CONTROLLER"


def handle_describe_quorum(broker, request, context: RequestContext) -> dict:
    raft = broker.raft
    topics = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            if topic.topic_name != METADATA_TOPIC or partition.partition_index != METADATA_PARTITION:
                partitions.append(_partition_error(partition.partition_index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            elif raft.role is not RaftRole.LEADER:
                partitions.append(_partition_error(partition.partition_index, ErrorCode.NOT_LEADER_OR_FOLLOWER))
            else:
                partitions.append({"partition_index": METADATA_PARTITION, "error_code": ErrorCode.NONE,
                                   "error_message": None, "leader_id": raft.leader_id, "leader_epoch": raft.epoch,
                                   "high_watermark": raft.high_watermark,
                                   "current_voters": _replica_states(raft.voter_states(context.now_ms)),
                                   "observers": _replica_states(raft.observer_states(context.now_ms))})
        topics.append({"topic_name": topic.topic_name, "partitions": partitions})
    return {"error_code": ErrorCode.NONE, "error_message": None, "topics": topics,
            "nodes": [{"node_id": node_id, "listeners": [{"name": CONTROLLER_LISTENER, "host": host, "port": port}]}
                      for node_id, (host, port) in sorted(broker.voters.items())]}


def _replica_states(states) -> list[dict]:
    return [{"replica_id": state.replica_id, "replica_directory_id": ZERO_UUID, "log_end_offset": state.log_end_offset,
             "last_fetch_timestamp": state.last_fetch_ms, "last_caught_up_timestamp": state.last_caught_up_ms}
            for state in states]


def _partition_error(index: int, error: ErrorCode) -> dict:
    return {"partition_index": index, "error_code": error, "error_message": None, "leader_id": -1,
            "leader_epoch": -1, "high_watermark": -1, "current_voters": [], "observers": []}
