"""One error for a whole request, in that request's own response schema, as Kafka's
AbstractRequest.getErrorResponse builds it: each topic, resource, ACL or user the request named
gets the error, and the response's top-level error code where it has one.

The admin requests a node forwards to the active controller (KIP-590) are the ones listed; the
forwarding shell answers with this when no controller takes the request in time
(REQUEST_TIMED_OUT, as Kafka's ForwardingManager on the channel's timeout).
"""
from __future__ import annotations

from typing import Callable

from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


def _create_topics(request, error: ErrorCode, message: str) -> dict:
    return {"topics": [{"name": t.name, "error_code": error, "error_message": message} for t in request.topics]}


def _delete_topics(request, error: ErrorCode, message: str) -> dict:
    named = [(t.name, t.topic_id) for t in request.topics] if request.get("topics") else \
        [(name, None) for name in request.topic_names or []]
    return {"responses": [{"name": name, **({"topic_id": topic_id} if topic_id is not None else {}),
                           "error_code": error, "error_message": message} for name, topic_id in named]}


def _create_partitions(request, error: ErrorCode, message: str) -> dict:
    return {"results": [{"name": t.name, "error_code": error, "error_message": message} for t in request.topics]}


def _alter_configs(request, error: ErrorCode, message: str) -> dict:
    return {"responses": [{"error_code": error, "error_message": message, "resource_type": r.resource_type,
                           "resource_name": r.resource_name} for r in request.resources]}


def _init_producer_id(request, error: ErrorCode, message: str) -> dict:
    return {"error_code": error, "producer_id": NO_PRODUCER_ID, "producer_epoch": NO_PRODUCER_EPOCH}


def _describe_quorum(request, error: ErrorCode, message: str) -> dict:
    return {"error_code": error, "error_message": message, "topics": []}


def _elect_leaders(request, error: ErrorCode, message: str) -> dict:
    return {"error_code": error, "replica_election_results": [
        {"topic": t.topic, "partition_result": [{"partition_id": p, "error_code": error, "error_message": message}
                                                for p in t.partitions]}
        for t in request.topic_partitions or []]}


def _create_acls(request, error: ErrorCode, message: str) -> dict:
    return {"results": [{"error_code": error, "error_message": message} for _ in request.creations]}


def _delete_acls(request, error: ErrorCode, message: str) -> dict:
    return {"filter_results": [{"error_code": error, "error_message": message, "matching_acls": []}
                               for _ in request.filters]}


def _alter_user_scram_credentials(request, error: ErrorCode, message: str) -> dict:
    users = dict.fromkeys(c.name for c in (*request.deletions, *request.upsertions))
    return {"results": [{"user": user, "error_code": error, "error_message": message} for user in users]}


ERROR_RESPONSES: dict[int, Callable] = {
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.ALTER_CONFIGS: _alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _alter_configs,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.DESCRIBE_QUORUM: _describe_quorum,
    ApiKey.ELECT_LEADERS: _elect_leaders,
    ApiKey.CREATE_ACLS: _create_acls,
    ApiKey.DELETE_ACLS: _delete_acls,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _alter_user_scram_credentials,
}


def error_response(api_key: int, request, error: ErrorCode, message: str) -> dict:
    """The response body that answers every part of the decoded request with `error`."""
    return ERROR_RESPONSES[api_key](request, error, message)
