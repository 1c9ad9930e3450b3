"""Security: authentication before anything (AUTH-1), ACLs that refuse and change nothing
(AUTH-2), and no client acting as a replica or a broker (AUTH-3).

Run against a secured listener with the client properties of an administrator (a super user,
or a principal allowed to alter ACLs and SCRAM credentials), e.g.
    kspec conformance --bootstrap-servers broker:9093 --client-property security.protocol=SASL_SSL \\
        --client-property sasl.mechanism=PLAIN --client-property sasl.username=admin \\
        --client-property sasl.password=... --client-property ssl.ca.location=ca.pem
AUTH-2 and AUTH-3 make a SCRAM user of their own as the unprivileged principal (and remove it
after); they are skipped, with the reason, where the broker offers no SASL listener with SCRAM,
no authorizer, or the given principal may not administer it.
"""
from __future__ import annotations

import contextlib
import os
import time
import uuid

import pytest

from conformance import ops
from conformance import sasl
from conformance.sasl import salted_password
from conformance.wire import ConnectionClosed, WireClient
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

SCRAM_MECHANISM, SCRAM_CODE, SCRAM_ITERATIONS = "SCRAM-SHA-256", 1, 4096
TOPIC_RESOURCE, CLUSTER_RESOURCE = 2, 4
READ, WRITE = 3, 4
LITERAL, ALLOW = 3, 3
CLOSE_TIMEOUT_S = 5.0


def _sasl_mechanisms(target) -> list[str]:
    """The mechanisms the first broker offers, from a SaslHandshake on a fresh connection."""
    with WireClient(target.first_address, ssl_context=sasl.ssl_context(target.properties)) as raw:
        return list(raw.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "KSPEC-PROBE"}).mechanisms)


@contextlib.contextmanager
def unprivileged_user(target):
    """A fresh SCRAM user, made through AlterUserScramCredentials by the target's principal:
    (wire connection as that user, its principal). Skips when the broker cannot give one."""
    if not target.uses_sasl:
        pytest.skip("needs a SASL listener (security.protocol=SASL_SSL or SASL_PLAINTEXT in --client-property)")
    if SCRAM_MECHANISM not in _sasl_mechanisms(target):
        pytest.skip(f"the listener does not offer {SCRAM_MECHANISM}, needed to make an unprivileged principal")
    with target.wire() as admin:
        probe = admin.request(ApiKey.DESCRIBE_ACLS, 1, {
            "resource_type_filter": CLUSTER_RESOURCE, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
        if probe.error_code == ErrorCode.SECURITY_DISABLED:
            pytest.skip("the broker under test has no authorizer (authorizer.class.name)")
        if probe.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
            pytest.skip("the client principal may not describe ACLs; give an administrator's --client-property")
        name, password = f"kspec-{os.getpid()}-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
        salt = os.urandom(16)
        altered = admin.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [], "upsertions": [{
            "name": name, "mechanism": SCRAM_CODE, "iterations": SCRAM_ITERATIONS, "salt": salt,
            "salted_password": salted_password(SCRAM_MECHANISM, password, salt, SCRAM_ITERATIONS)}]})
        if altered.results[0].error_code != ErrorCode.NONE:
            pytest.skip(f"the client principal may not create SCRAM users (error {altered.results[0].error_code})")
    try:
        wire = _wait_for_login(target, name, password)
        with wire:
            yield wire, f"User:{name}"
    finally:
        with target.wire() as admin:
            admin.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
                "deletions": [{"name": name, "mechanism": SCRAM_CODE}], "upsertions": []})
            admin.request(ApiKey.DELETE_ACLS, 1, {"filters": [{
                "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                "principal_filter": f"User:{name}", "host_filter": None, "operation": 1, "permission_type": 1}]})


def _wait_for_login(target, name: str, password: str) -> WireClient:
    """Log in as the new user; on a cluster the credential reaches each broker at its own pace."""
    last_error = None
    for _ in range(50):
        try:
            return target.wire_as(**{"sasl.mechanism": SCRAM_MECHANISM, "sasl.username": name,
                                     "sasl.password": password})
        except ConnectionError as error:
            last_error = error
            time.sleep(0.2)
    raise AssertionError(f"the SCRAM user made by AlterUserScramCredentials cannot log in: {last_error}")


def _allow(admin: WireClient, principal: str, topic: str, *operations: int) -> None:
    created = admin.request(ApiKey.CREATE_ACLS, 1, {"creations": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": topic, "resource_pattern_type": LITERAL,
         "principal": principal, "host": "*", "operation": operation, "permission_type": ALLOW}
        for operation in operations]})
    ops.expect(all(r.error_code == ErrorCode.NONE for r in created.results), "CreateAcls succeeded", created)


@pytest.mark.guarantee("AUTH-1")
def test_nothing_is_served_before_sasl_authentication(target):
    if not target.uses_sasl:
        pytest.skip("the broker under test is reached without SASL (no security.protocol=SASL_* property)")
    with WireClient(target.first_address, ssl_context=sasl.ssl_context(target.properties)) as raw:
        raw.send(ApiKey.METADATA, 4, {"topics": None, "allow_auto_topic_creation": False})
        ops.expect(raw.closed_by_peer(CLOSE_TIMEOUT_S), "the connection closed without an answer",
                   "an open connection")
    with WireClient(target.first_address, ssl_context=sasl.ssl_context(target.properties)) as raw:
        ops.expect(raw.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code in
                   (ErrorCode.NONE, ErrorCode.UNSUPPORTED_SASL_MECHANISM), "a SaslHandshake answer", "none")
        raw.send(ApiKey.CREATE_TOPICS, 2, {"topics": [{"name": target.new_topic_name("auth1"), "num_partitions": 1,
                                                       "replication_factor": 1, "assignments": [], "configs": []}],
                                           "timeout_ms": 1000})
        with contextlib.suppress(ConnectionClosed, ConnectionError, OSError):
            frame = raw.receive_frame(CLOSE_TIMEOUT_S)
            ops.expect(False, "no answer to CreateTopics before SaslAuthenticate", frame[:16])


@pytest.mark.guarantee("AUTH-2")
def test_denied_operations_are_refused_and_change_nothing(target):
    with unprivileged_user(target) as (user, _principal):
        topic = target.create_topic("auth2")
        caps = target.capabilities
        answer = ops.produce(user, caps, topic, ops.values_batch([b"refused"]))
        ops.expect(answer.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED, "TOPIC_AUTHORIZATION_FAILED",
                   answer.error_code)
        with target.wire() as admin:
            ops.expect(ops.high_watermark(admin, caps, topic) == 0, "nothing appended", ops.high_watermark(admin, caps, topic))
        created = user.request(ApiKey.CREATE_TOPICS, 2, {"topics": [{
            "name": topic + "-new", "num_partitions": 1, "replication_factor": -1, "assignments": [],
            "configs": []}], "timeout_ms": 5000}).topics[0]
        ops.expect(created.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED, "TOPIC_AUTHORIZATION_FAILED",
                   created.error_code)
        deleted = user.request(ApiKey.DELETE_TOPICS, 1, {"topic_names": [topic], "timeout_ms": 5000}).responses[0]
        ops.expect(deleted.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED, "TOPIC_AUTHORIZATION_FAILED",
                   deleted.error_code)
        with target.wire() as admin:
            metadata = admin.request(ApiKey.METADATA, 4, {"topics": [{"name": topic}, {"name": topic + "-new"}],
                                                          "allow_auto_topic_creation": False})
            errors = {t.name: t.error_code for t in metadata.topics}
            ops.expect(errors == {topic: ErrorCode.NONE, topic + "-new": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
                       "the topic still there and no new one", errors)


@pytest.mark.guarantee("AUTH-3")
def test_a_client_cannot_act_as_a_replica_or_a_broker(target):
    with unprivileged_user(target) as (user, principal):
        topic = target.create_topic("auth3")
        caps = target.capabilities
        with target.wire() as admin:
            ops.expect(ops.produce(admin, caps, topic, ops.values_batch([b"a", b"b"])).error_code == ErrorCode.NONE,
                       "the administrator's produce succeeds", "an error")
            high_watermark = ops.high_watermark(admin, caps, topic)
            _allow(admin, principal, topic, READ, WRITE)  # a reader and writer of the topic, not a broker
        fetch = user.request(ApiKey.FETCH, 11, {
            "replica_id": 1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": high_watermark + 10,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [],
            "rack_id": ""})
        code = fetch.responses[0].partitions[0].error_code
        ops.expect(code == ErrorCode.TOPIC_AUTHORIZATION_FAILED, "TOPIC_AUTHORIZATION_FAILED for a replica Fetch", code)
        markers = user.request(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
            "producer_id": 1, "producer_epoch": 0, "transaction_result": False, "coordinator_epoch": 0,
            "topics": [{"name": topic, "partition_indexes": [0]}]}]})
        code = markers.markers[0].topics[0].partitions[0].error_code
        ops.expect(code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "CLUSTER_AUTHORIZATION_FAILED for WriteTxnMarkers",
                   code)
        with target.wire() as admin:
            ops.expect(ops.high_watermark(admin, caps, topic) == high_watermark, "the high watermark unmoved",
                       ops.high_watermark(admin, caps, topic))
