"""The Raft core's messages as Kafka's KRaft RPCs (reference/node/raft_rpcs.py), through the real
codec both ways: what a node sends is what the other node's core receives, and an answer the
core had none for carries an error the requester does not hand to its core."""
from __future__ import annotations

import pytest

from reference.controller.raft import (
    BeginQuorumEpoch,
    EndQuorumEpoch,
    Entry,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from reference.node.raft_rpcs import from_request, from_response, request_error, to_request, to_response
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from reference.protocol.headers import parse_request_header
from reference.protocol.messages import decode_request, decode_response, encode_request, encode_response

CLUSTER_ID = "cluster-a"
VOTERS = (1, 2, 3)
LOCAL_ID = 1  # the node the requests are sent to (over_the_wire's destination)


def over_the_wire(message, destination: int = 1):
    """The request as the destination decodes it, and its api key and version."""
    api_key, version, body = to_request(message, CLUSTER_ID, destination)
    frame = encode_request(api_key, version, 7, "kspec-raft-2", body)[4:]
    header, offset = parse_request_header(frame)
    assert (header.api_key, header.api_version) == (api_key, version)
    return api_key, version, decode_request(api_key, version, frame[offset:])


def answered(api_key: int, version: int, response: dict):
    _, decoded = decode_response(api_key, version, encode_response(api_key, version, 7, response)[4:])
    return decoded


@pytest.mark.parametrize("message", [
    VoteRequest(2, 5, 4, 120, pre_vote=True),
    VoteRequest(2, 5, 4, 120, pre_vote=False),
    BeginQuorumEpoch(2, 5),
    EndQuorumEpoch(2, 5),
    FetchRequest(3, 5, 120, 4, high_watermark=118, max_wait_ms=250),
])
def test_a_request_reaches_the_other_core_as_it_was_sent(message):
    api_key, _, request = over_the_wire(message)
    assert request.cluster_id == CLUSTER_ID
    assert from_request(api_key, request) == message


def test_a_vote_is_answered_in_its_response():
    vote = VoteRequest(2, 5, 4, 120, pre_vote=True)
    api_key, version, _ = over_the_wire(vote)
    answer = VoteResponse(1, 4, True, True, leader_id=-1)
    response = answered(api_key, version, to_response(api_key, answer, leader_id=-1, epoch=4))
    assert from_response(vote, 1, response) == answer


def test_a_fetch_answer_carries_entries_as_record_batches_and_the_divergence():
    fetch = FetchRequest(3, 5, 2, 4, high_watermark=1, max_wait_ms=250)
    api_key, version, _ = over_the_wire(fetch)
    entries = (Entry(4, {"type": "TopicRecord", "name": "t"}), Entry(5, {"type": "LeaderChangeMessage"}),
               Entry(5, {"type": "PartitionRecord", "partition_id": 0}))
    answer = FetchResponse(1, 5, entries=entries, high_watermark=4, fetch_offset=2)
    assert from_response(fetch, 1, answered(api_key, version, to_response(api_key, answer, 1, 5))) == answer
    diverging = FetchResponse(1, 5, high_watermark=4, diverging_epoch=3, diverging_end_offset=1, fetch_offset=2)
    assert from_response(fetch, 1, answered(api_key, version, to_response(api_key, diverging, 1, 5))) == diverging
    not_leader = FetchResponse(1, 5, not_leader=True, fetch_offset=2)
    assert from_response(fetch, 2, answered(api_key, version, to_response(api_key, not_leader, 1, 5))) == not_leader


def test_a_request_the_core_did_not_answer_carries_an_error_and_no_message():
    fetch = FetchRequest(3, 5, 2, 4, max_wait_ms=250)
    api_key, version, _ = over_the_wire(fetch)
    response = answered(api_key, version, to_response(api_key, None, 1, 5, ErrorCode.NOT_LEADER_OR_FOLLOWER))
    assert response.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and from_response(fetch, 2, response) is None
    begin = BeginQuorumEpoch(2, 5)
    api_key, version, _ = over_the_wire(begin)
    assert api_key == ApiKey.BEGIN_QUORUM_EPOCH
    assert from_response(begin, 1, answered(api_key, version, to_response(api_key, None, 2, 5))) is None


# Found by fuzzing a cluster's inter-node listeners (tests/hardening/test_fuzz_internode.py).

def decoded(api_key: int, version: int, body: dict):
    frame = encode_request(api_key, version, 7, "fuzz", body)[4:]
    _, offset = parse_request_header(frame)
    return decode_request(api_key, version, frame[offset:])


@pytest.mark.parametrize("version", [13, 14])
def test_a_metadata_fetch_before_v15_names_its_replica_at_the_top(version):
    """Fetch v15 moved ReplicaId into ReplicaState (KIP-903); an older one failed on it."""
    _, _, body = to_request(FetchRequest(2, 3, 10, 3, 0, 0), CLUSTER_ID, 1)
    request = decoded(ApiKey.FETCH, version, {**body, "replica_id": 2})
    assert request_error(ApiKey.FETCH, request, VOTERS, LOCAL_ID) is None
    assert from_request(ApiKey.FETCH, request).replica_id == 2


@pytest.mark.parametrize("message, error", [
    (BeginQuorumEpoch(leader_id=578125251, leader_epoch=9), ErrorCode.INCONSISTENT_VOTER_SET),
    # Naming the node itself: it followed itself as "leader" (and its shell called itself the
    # active controller) at an epoch no other voter had, until the next election.
    (BeginQuorumEpoch(leader_id=LOCAL_ID, leader_epoch=998393686), ErrorCode.INVALID_REQUEST),
    (EndQuorumEpoch(leader_id=LOCAL_ID, leader_epoch=9), ErrorCode.INVALID_REQUEST),
    (VoteRequest(LOCAL_ID, 9, 1, 10, False), ErrorCode.INVALID_REQUEST),
    (EndQuorumEpoch(leader_id=-1, leader_epoch=9), ErrorCode.INVALID_REQUEST),
    (VoteRequest(4, 9, 1, 10, False), ErrorCode.INCONSISTENT_VOTER_SET),
    (VoteRequest(2, 9, 9, 10, False), ErrorCode.INVALID_REQUEST),  # last epoch not below the candidate's
    (VoteRequest(2, 9, 1, -1, False), ErrorCode.INVALID_REQUEST),
    (FetchRequest(2, 3, -1, 3, 0, 0), ErrorCode.INVALID_REQUEST),  # negative offset: was answered with a snapshot
    (FetchRequest(2, 3, 10, 4, 0, 0), ErrorCode.INVALID_REQUEST),  # last fetched epoch past the leader's
    (FetchRequest(2, 3, 10, 3, 0, -5), ErrorCode.INVALID_REQUEST),
])
def test_requests_kafkas_raft_client_refuses_never_reach_the_core(message, error):
    """A leader named that is no voter was followed (the node then called a controller it had no
    connection to); a negative fetch offset was answered with a snapshot the node never takes."""
    api_key, version, request = over_the_wire(message)
    assert request_error(api_key, request, VOTERS, LOCAL_ID) == error


def test_requests_from_the_quorum_pass():
    for message in (BeginQuorumEpoch(2, 9), EndQuorumEpoch(2, 9), VoteRequest(2, 9, 8, 10, True),
                    FetchRequest(2, 9, 10, 8, 0, 500), FetchRequest(7, 9, 0, 0, 0, 0)):
        api_key, _, request = over_the_wire(message)
        assert request_error(api_key, request, VOTERS, LOCAL_ID) is None, message
