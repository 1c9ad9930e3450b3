"""reference/handlers/error_responses.py: an error for a whole request, in the request's own
response schema (Kafka's AbstractRequest.getErrorResponse), for every version the reference
serves of each request a node forwards to the controller: each named topic, resource, ACL filter
or user carries the error, and the answer encodes."""
from __future__ import annotations

import pytest

from reference.handlers.error_responses import ERROR_RESPONSES, error_response
from reference.protocol.api_keys import ApiKey
from reference.protocol.api_versions import CLUSTER_ONLY_API_VERSIONS, SUPPORTED_API_VERSIONS
from reference.protocol.errors import ErrorCode
from reference.protocol.headers import parse_request_header
from reference.protocol.messages import decode_request, decode_response, encode_request, encode_response

TIMED_OUT = ErrorCode.REQUEST_TIMED_OUT
REQUESTS = {
    ApiKey.CREATE_TOPICS: {"topics": [{"name": "a", "num_partitions": 1, "replication_factor": 1}]},
    ApiKey.DELETE_TOPICS: {"topics": [{"name": "a"}], "topic_names": ["a"]},
    ApiKey.CREATE_PARTITIONS: {"topics": [{"name": "a", "count": 2}]},
    ApiKey.ALTER_CONFIGS: {"resources": [{"resource_type": 2, "resource_name": "a"}]},
    ApiKey.INCREMENTAL_ALTER_CONFIGS: {"resources": [{"resource_type": 2, "resource_name": "a"}]},
    ApiKey.INIT_PRODUCER_ID: {"transactional_id": None, "transaction_timeout_ms": 1000},
    ApiKey.DESCRIBE_QUORUM: {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]},
    ApiKey.ELECT_LEADERS: {"topic_partitions": [{"topic": "a", "partitions": [0, 1]}]},
    ApiKey.CREATE_ACLS: {"creations": [{"resource_type": 2, "resource_name": "a", "principal": "User:x", "host": "*",
                                        "operation": 2, "permission_type": 3}]},
    ApiKey.DELETE_ACLS: {"filters": [{"resource_type_filter": 2}]},
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: {"deletions": [{"name": "x", "mechanism": 1}],
                                          "upsertions": [{"name": "x", "mechanism": 2, "iterations": 4096,
                                                          "salt": b"s", "salted_password": b"p"}]},
}


def error_codes(struct) -> list[int]:
    """Every error_code in a decoded response, depth first."""
    found = []
    for name, value in vars(struct).items():
        if name == "error_code":
            found.append(value)
        for item in value if isinstance(value, list) else [value]:
            if hasattr(item, "__dict__") and not isinstance(item, (bytes, str)):
                found += error_codes(item)
    return found


@pytest.mark.parametrize("api_key", sorted(ERROR_RESPONSES), ids=lambda key: ApiKey(key).name)
def test_every_part_of_a_forwarded_request_carries_the_error(api_key):
    assert set(REQUESTS) == set(ERROR_RESPONSES)
    low, high = {**SUPPORTED_API_VERSIONS, **CLUSTER_ONLY_API_VERSIONS}[api_key]
    for version in range(low, high + 1):
        frame = encode_request(api_key, version, 1, "test", REQUESTS[api_key])[4:]
        header, body_offset = parse_request_header(frame)
        request = decode_request(api_key, version, frame[body_offset:])
        body = error_response(api_key, request, TIMED_OUT, "no controller")
        _, answer = decode_response(api_key, version, encode_response(api_key, version, 1, body)[4:])
        codes = error_codes(answer)
        assert codes and set(codes) == {TIMED_OUT}, (ApiKey(api_key).name, version, answer)
