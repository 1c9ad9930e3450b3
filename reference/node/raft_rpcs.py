"""The Raft core's messages (reference/controller/raft.py) as Kafka's KRaft RPCs (KIP-595, KIP-996).

KRaft's RPCs are request/response, as every Kafka RPC is: a Vote request's answer is the
VoteResponse, a Fetch of `__cluster_metadata` is answered by the FetchResponse (held by the
leader up to its MaxWaitMs while it has nothing new). The core knows nothing of that pairing:
it takes messages in and puts messages in its outbox. This module is the translation, both
ways, with the checks KafkaRaftClient makes of a request before its core sees it
(`request_error`: a leader or candidate that is no voter, offsets and epochs that cannot be);
the shell (reference/server/raft_driver.py) pairs an answer in the outbox with the request it
answers.

    core message                      Kafka RPC
    VoteRequest / VoteResponse        Vote (52) v2: PreVote (KIP-996) says which kind
    BeginQuorumEpoch                  BeginQuorumEpoch (53) request; its response carries no core message
    EndQuorumEpoch                    EndQuorumEpoch (54) request, sent by a leader that shuts down
    FetchRequest / FetchResponse      Fetch (1) v18 of topic id METADATA_TOPIC_ID, partition 0, with
                                      ReplicaState (KIP-903) and the follower's HighWatermark (KIP-1166)

A pre-vote's ReplicaEpoch is the epoch the candidate would stand in (its own plus one), as the
core's VoteRequest carries it. Entries travel as the metadata log holds them on disk
(quorum.entry_batches). The core sends snapshots only to a follower behind the log
start, and the durable node never trims its log (reference/node/quorum.py), so FetchSnapshot
(59) never has anything to carry: SnapshotId in a Fetch answer is left unset.
"""
from __future__ import annotations

import uuid

from reference.controller.raft import (
    BeginQuorumEpoch,
    EndQuorumEpoch,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from reference.node.quorum import decode_entries, entry_batches
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's Uuid.METADATA_TOPIC_ID
METADATA_PARTITION = 0
VOTE_VERSION = 2
BEGIN_QUORUM_EPOCH_VERSION = 1
END_QUORUM_EPOCH_VERSION = 1
FETCH_VERSION = 18  # ReplicaState (15+), the follower's HighWatermark (18+)
FETCH_MAX_BYTES = 8 * 1024 * 1024  # Kafka's raft fetch max bytes
UNKNOWN_HIGH_WATERMARK = 2**63 - 1  # Fetch v18's default: the follower does not know it


def _partition(**fields) -> dict:
    return {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": METADATA_PARTITION, **fields}]}


def _only_partition(request_or_response):
    """The one partition of a KRaft RPC: a Kafka RPC names topics and partitions, KRaft uses one."""
    topic, = request_or_response.topics
    partition, = topic.partitions
    return partition


# ------------------------------------------------------------ requests

def to_request(message, cluster_id: str, destination: int) -> tuple[ApiKey, int, dict]:
    """A request message of the core, addressed to `destination`: (api key, version, body)."""
    if isinstance(message, VoteRequest):
        return ApiKey.VOTE, VOTE_VERSION, {"cluster_id": cluster_id, "voter_id": destination, "topics": [_partition(
            replica_epoch=message.candidate_epoch, replica_id=message.candidate_id,
            last_offset_epoch=message.last_offset_epoch, last_offset=message.last_offset, pre_vote=message.pre_vote)]}
    if isinstance(message, BeginQuorumEpoch):
        return ApiKey.BEGIN_QUORUM_EPOCH, BEGIN_QUORUM_EPOCH_VERSION, {
            "cluster_id": cluster_id, "voter_id": destination,
            "topics": [_partition(leader_id=message.leader_id, leader_epoch=message.leader_epoch)]}
    if isinstance(message, EndQuorumEpoch):
        return ApiKey.END_QUORUM_EPOCH, END_QUORUM_EPOCH_VERSION, {
            "cluster_id": cluster_id, "topics": [_partition(leader_id=message.leader_id,
                                                            leader_epoch=message.leader_epoch)]}
    assert isinstance(message, FetchRequest), message
    return ApiKey.FETCH, FETCH_VERSION, {
        "cluster_id": cluster_id, "replica_state": {"replica_id": message.replica_id, "replica_epoch": -1},
        "max_wait_ms": message.max_wait_ms, "min_bytes": 0, "max_bytes": FETCH_MAX_BYTES, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic_id": METADATA_TOPIC_ID, "partitions": [{
            "partition": METADATA_PARTITION, "current_leader_epoch": message.epoch,
            "fetch_offset": message.fetch_offset, "last_fetched_epoch": message.last_fetched_epoch,
            "log_start_offset": -1, "partition_max_bytes": FETCH_MAX_BYTES,
            "high_watermark": message.high_watermark}]}]}


def is_metadata_fetch(request) -> bool:
    """A Fetch of the metadata log (a voter's or an observer's), not of a partition of the brokers."""
    return len(request.topics) == 1 and request.topics[0].get("topic_id") == METADATA_TOPIC_ID


def request_error(api_key: int, request, voters: tuple[int, ...], local_id: int) -> ErrorCode | None:
    """What KafkaRaftClient refuses before its core sees a request (handleVoteRequest,
    handleBeginQuorumEpochRequest, handleEndQuorumEpochRequest, handleFetchRequest): another
    topic or partition than the metadata log's, a Vote whose last offset or epoch cannot be
    (INVALID_REQUEST), a leader or candidate id below zero or naming this node itself
    (INVALID_REQUEST: no node sends these to itself, and Kafka's QuorumState will not follow or
    vote for its own id) or not a voter (INCONSISTENT_VOTER_SET), a Fetch with a negative wait,
    offset or epoch, or a last fetched epoch past the leader epoch it names (INVALID_REQUEST).
    None when the core may take it. Epochs below this node's are left to the core, which
    answers with its own."""
    if api_key == ApiKey.FETCH:
        topic, = request.topics  # is_metadata_fetch: one topic, the metadata log's id
        if [p.partition for p in topic.partitions] != [METADATA_PARTITION]:
            return ErrorCode.INVALID_REQUEST
        partition = topic.partitions[0]
        if (request.max_wait_ms < 0 or partition.fetch_offset < 0 or partition.last_fetched_epoch < 0
                or partition.last_fetched_epoch > partition.current_leader_epoch):
            return ErrorCode.INVALID_REQUEST
        return None
    if ([t.topic_name for t in request.topics] != [METADATA_TOPIC]
            or [p.partition_index for p in request.topics[0].partitions] != [METADATA_PARTITION]):
        return ErrorCode.INVALID_REQUEST
    partition = _only_partition(request)
    if api_key == ApiKey.VOTE:
        if (partition.last_offset < 0 or partition.last_offset_epoch < 0
                or partition.last_offset_epoch >= partition.replica_epoch):
            return ErrorCode.INVALID_REQUEST
        remote_id = partition.replica_id
    else:
        remote_id = partition.leader_id
    if remote_id < 0 or remote_id == local_id:
        return ErrorCode.INVALID_REQUEST
    return None if remote_id in voters else ErrorCode.INCONSISTENT_VOTER_SET


def from_request(api_key: int, request):
    """A KRaft request (one request_error lets through) as the core's message."""
    if api_key == ApiKey.FETCH:
        topic, = request.topics
        partition, = topic.partitions
        high_watermark = partition.get("high_watermark", UNKNOWN_HIGH_WATERMARK)
        replica_state = request.get("replica_state")  # Fetch v15+ (KIP-903); before, ReplicaId at the top
        replica_id = request.replica_id if replica_state is None else replica_state.replica_id
        return FetchRequest(replica_id, partition.current_leader_epoch, partition.fetch_offset,
                            partition.last_fetched_epoch, 0 if high_watermark == UNKNOWN_HIGH_WATERMARK else high_watermark,
                            request.max_wait_ms)
    partition = _only_partition(request)
    if api_key == ApiKey.VOTE:
        return VoteRequest(partition.replica_id, partition.replica_epoch, partition.last_offset_epoch,
                           partition.last_offset, bool(partition.get("pre_vote", False)))
    if api_key == ApiKey.BEGIN_QUORUM_EPOCH:
        return BeginQuorumEpoch(partition.leader_id, partition.leader_epoch)
    assert api_key == ApiKey.END_QUORUM_EPOCH, api_key
    return EndQuorumEpoch(partition.leader_id, partition.leader_epoch)


# ------------------------------------------------------------ responses

ANSWERED_BY = {ApiKey.VOTE: VoteResponse, ApiKey.FETCH: FetchResponse}  # the core message a response carries


def to_response(api_key: int, answer, leader_id: int, epoch: int, error: ErrorCode = ErrorCode.NONE) -> dict:
    """The response to a KRaft request. `answer` is the core's reply to it (a VoteResponse or a
    FetchResponse), or None: the core had nothing to say (a voter's Fetch to a node that is not
    the leader, a Vote to an observer, a BeginQuorumEpoch), and the response then carries this
    node's leader and epoch with `error` at the top, which the requester does not hand to its core."""
    if isinstance(answer, VoteResponse):
        return {"error_code": ErrorCode.NONE, "topics": [_partition(
            error_code=ErrorCode.NONE, leader_id=answer.leader_id, leader_epoch=answer.epoch,
            vote_granted=answer.vote_granted)]}
    if isinstance(answer, FetchResponse):
        assert answer.snapshot is None, "snapshots are not sent (none are taken)"
        error = (ErrorCode.FENCED_LEADER_EPOCH if answer.fenced else
                 ErrorCode.NOT_LEADER_OR_FOLLOWER if answer.not_leader else ErrorCode.NONE)
        return {"error_code": ErrorCode.NONE, "session_id": 0, "node_endpoints": [], "responses": [{
            "topic_id": METADATA_TOPIC_ID, "partitions": [{
                "partition_index": METADATA_PARTITION, "error_code": error, "high_watermark": answer.high_watermark,
                "last_stable_offset": answer.high_watermark, "log_start_offset": 0,
                "diverging_epoch": {"epoch": answer.diverging_epoch, "end_offset": answer.diverging_end_offset},
                "current_leader": {"leader_id": answer.leader_id, "leader_epoch": answer.epoch},
                "aborted_transactions": [], "preferred_read_replica": -1,
                "records": b"".join(batch for _, batch in entry_batches(answer.entries))}]}]}
    assert answer is None, answer
    if api_key == ApiKey.FETCH:
        return {"error_code": error, "session_id": 0, "responses": [], "node_endpoints": []}
    return {"error_code": error, "topics": [_partition(error_code=error, leader_id=leader_id, leader_epoch=epoch)]}


def from_response(request_message, destination: int, response):
    """The core message a response carries, given the request that was sent; None if it carries none."""
    if response.error_code != ErrorCode.NONE:
        return None
    if isinstance(request_message, VoteRequest):
        partition = _only_partition(response)
        return VoteResponse(destination, partition.leader_epoch, partition.vote_granted, request_message.pre_vote,
                            partition.leader_id)
    if not isinstance(request_message, FetchRequest):
        return None  # BeginQuorumEpoch and EndQuorumEpoch are acknowledged, not answered
    topic, = response.responses
    partition, = topic.partitions
    error = ErrorCode(partition.error_code)
    leader = partition.current_leader
    return FetchResponse(leader.leader_id, leader.leader_epoch, fenced=error == ErrorCode.FENCED_LEADER_EPOCH,
                         entries=decode_entries(partition.records), high_watermark=partition.high_watermark,
                         diverging_epoch=partition.diverging_epoch.epoch,
                         diverging_end_offset=partition.diverging_epoch.end_offset,
                         fetch_offset=request_message.fetch_offset,
                         not_leader=error == ErrorCode.NOT_LEADER_OR_FOLLOWER)
