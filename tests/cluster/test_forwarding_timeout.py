"""A node that finds no active controller to forward an admin request to within its forwarding
timeout answers the request REQUEST_TIMED_OUT in the request's own response schema, as Kafka's
ForwardingManager does on its channel's timeout (KIP-590), and keeps the connection: the client
retries. kspec.forwarding.timeout.ms (Kafka's fixed 60 s) is shortened here."""
from __future__ import annotations

import time

from conformance.wire import WireClient
from reference.node.base import METADATA_TOPIC
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

from .conftest import WAIT_S, wait_until

FORWARDING_TIMEOUT_MS = 1000
ANSWERED_S_MAX = 10.0  # the forwarding timeout, with room for a busy machine


def test_a_forwarded_request_that_finds_no_controller_is_answered_request_timed_out(start_cluster):
    cluster = start_cluster(2, **{"kspec.forwarding.timeout.ms": str(FORWARDING_TIMEOUT_MS)})
    controller = wait_until(lambda: max(cluster.controller_id(), 0), "an active controller")
    cluster.kill(3 - controller)
    # alone of two voters, the controller resigns once it hears from no majority; no election can end
    wait_until(lambda: cluster.controller_id() == -1, "the controller resigns")
    with WireClient(cluster.addresses[controller], timeout_s=WAIT_S) as wire:
        sent_s = time.monotonic()
        created = wire.request(ApiKey.CREATE_TOPICS, 5, {"topics": [
            {"name": "no-controller", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
            "timeout_ms": 30_000, "validate_only": False})
        assert FORWARDING_TIMEOUT_MS / 1000 <= time.monotonic() - sent_s < ANSWERED_S_MAX
        assert [(t.name, t.error_code) for t in created.topics] == [("no-controller", ErrorCode.REQUEST_TIMED_OUT)]
        quorum = wire.request(ApiKey.DESCRIBE_QUORUM, 1, {"topics": [
            {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]})
        assert quorum.error_code == ErrorCode.REQUEST_TIMED_OUT, "answered on the same connection"
        acls = wire.request(ApiKey.DELETE_ACLS, 2, {"filters": [
            {"resource_type_filter": 2, "resource_name_filter": "t", "pattern_type_filter": 3,
             "principal_filter": "User:alice", "host_filter": "*", "operation": 2, "permission_type": 3}]})
        assert [r.error_code for r in acls.filter_results] == [ErrorCode.REQUEST_TIMED_OUT]
