"""ElectLeaders (43): preferred and unclean leader elections on request (KIP-183, KIP-460).

A cluster's active controller decides each partition (ControllerState.elect_leader) and
answers once the elections' records are committed; other nodes forward the request to it
(KIP-590). topic_partitions null asks for every partition, and the answer then leaves out
those that need no election. v0 has no election_type (preferred only) and no top-level
error code. An unknown election type is an INVALID_REQUEST, for the request and every
partition in it, as Kafka's controller answers it. timeout_ms is not waited on: the answer
comes once the records are committed, or the commit's own timeout fails the request.
"""
from __future__ import annotations

from reference.controller.state import ElectionType
from reference.handlers.context import RequestContext
from reference.protocol.errors import ErrorCode

ELECTION_TYPES = frozenset(ElectionType)


def handle_elect_leaders(broker, request, context: RequestContext) -> dict:
    wanted = None
    if request.topic_partitions is not None:
        wanted = {}
        for topic in request.topic_partitions:
            wanted.setdefault(topic.topic, []).extend(topic.partitions)
    raw_type = request.election_type if context.api_version >= 1 else ElectionType.PREFERRED
    if raw_type in ELECTION_TYPES:
        error = ErrorCode.NONE
        results = broker.elect_leaders(wanted, ElectionType(raw_type))
    else:
        error = ErrorCode.INVALID_REQUEST
        results = {name: dict.fromkeys(partitions, error) for name, partitions in (wanted or {}).items()}
    return {"throttle_time_ms": 0, "error_code": error, "replica_election_results": [
        {"topic": name, "partition_result": [
            {"partition_id": partition_id, "error_code": partition_error,
             "error_message": None if partition_error == ErrorCode.NONE else partition_error.name}
            for partition_id, partition_error in answers.items()]}
        for name, answers in results.items()]}
