"""Security at the wire, through kspec's own codec over real sockets: what a SASL listener
serves before authentication (AUTH-1), what a client principal may not do (AUTH-3), mTLS
principals, SaslHandshake v0, and bad input (one clear error, the connection closed)."""
from __future__ import annotations

import socket
import ssl
import struct

import pytest

from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from tests.broker.helpers import batch_of
from tests.security.conftest import PASSWORDS, SecureClient, client_context, socket_closed

CLUSTER = {"resource_type": 4, "resource_name": "kafka-cluster", "resource_pattern_type": 3}


def sasl_client(secure_broker, pki, user: str = "admin") -> SecureClient:
    client = SecureClient(secure_broker.listeners["SASL_SSL"], client_context(pki))
    assert client.plain(user, PASSWORDS[user]).error_code == ErrorCode.NONE
    return client


def create_acl(client, principal: str, resource_type: int, name: str, operation: int, permission: int = 3):
    response = client.request(ApiKey.CREATE_ACLS, 3, {"creations": [{
        "resource_type": resource_type, "resource_name": name, "resource_pattern_type": 3, "principal": principal,
        "host": "*", "operation": operation, "permission_type": permission}]})
    assert [r.error_code for r in response.results] == [ErrorCode.NONE]


@pytest.fixture(scope="module")
def topic(secure_broker, pki):
    admin = sasl_client(secure_broker, pki)
    response = admin.request(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": "wire", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 5000})
    assert response.topics[0].error_code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)
    create_acl(admin, "User:alice", 2, "wire", 4)  # WRITE
    create_acl(admin, "User:alice", 2, "wire", 3)  # READ
    admin.close()
    return "wire"


@pytest.mark.guarantee("AUTH-1")
def test_auth_1_a_request_before_authentication_closes_the_connection_unanswered(secure_broker, pki):
    client = SecureClient(secure_broker.listeners["SASL_SSL"], client_context(pki))
    versions = client.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert versions.error_code == ErrorCode.NONE  # ApiVersions is served before authentication
    client.send(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False})
    assert socket_closed(client.sock)


@pytest.mark.guarantee("AUTH-1")
def test_auth_1_a_request_between_handshake_and_authenticate_closes_the_connection(secure_broker, pki):
    client = SecureClient(secure_broker.listeners["SASL_SSL"], client_context(pki))
    assert client.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.NONE
    client.send(ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": "sneaky", "num_partitions": 1, "replication_factor": 1,
                                                      "assignments": [], "configs": []}], "timeout_ms": 1000})
    assert socket_closed(client.sock)
    admin = sasl_client(secure_broker, pki)
    assert admin.request(ApiKey.METADATA, 12, {"topics": [{"name": "sneaky"}], "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False}
                         ).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_wrong_password_gets_sasl_authentication_failed_with_a_message_then_a_close(secure_broker, pki):
    client = SecureClient(secure_broker.listeners["SASL_SSL"], client_context(pki))
    answer = client.plain("alice", "wrong")
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and "Invalid username or password" in answer.error_message
    assert socket_closed(client.sock)


def test_unknown_mechanism_is_refused_with_the_enabled_ones_then_a_close(secure_broker, pki):
    client = SecureClient(secure_broker.listeners["SASL_SSL"], client_context(pki))
    (answer,) = client.sasl("GSSAPI")
    assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert socket_closed(client.sock)


@pytest.mark.parametrize("token", [b"n,,n=admin", b"garbage", b"p,,n=admin,r=abc", b"n,,n=nobody,r=abc"])
def test_malformed_or_unknown_scram_gets_sasl_authentication_failed(secure_broker, pki, token):
    client = SecureClient(secure_broker.listeners["SASL_SSL"], client_context(pki))
    answers = client.sasl("SCRAM-SHA-256", token)
    assert answers[-1].error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert answers[-1].error_message.startswith("Authentication failed")  # the same for an unknown user
    assert socket_closed(client.sock)


def test_sasl_handshake_v0_takes_raw_tokens(secure_broker, pki):
    client = SecureClient(secure_broker.listeners["SASL_SSL"], client_context(pki))
    assert client.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == ErrorCode.NONE
    token = f"\0alice\0{PASSWORDS['alice']}".encode()
    client.send_raw(struct.pack(">i", len(token)) + token)
    assert client.receive_frame() == b""  # PLAIN's empty answer: authenticated
    assert client.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                "include_topic_authorized_operations": False}).brokers


def test_a_tls_handshake_on_the_plaintext_port_is_closed(secure_broker, pki):
    host, port = secure_broker.listeners["PLAINTEXT"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            client_context(pki).wrap_socket(raw, server_hostname="127.0.0.1")


def test_plaintext_kafka_on_the_tls_port_is_closed(secure_broker, pki):
    client = SecureClient(secure_broker.listeners["SASL_SSL"])  # no TLS
    client.send(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert socket_closed(client.sock)


@pytest.mark.guarantee("AUTH-2")
def test_auth_2_a_denied_produce_is_refused_and_appends_nothing(secure_broker, pki, topic):
    bob = sasl_client(secure_broker, pki, "bob")
    request = {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch_of([b"bob"])}]}]}
    answer = bob.request(ApiKey.PRODUCE, 9, request)
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    alice = sasl_client(secure_broker, pki, "alice")
    offsets = alice.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    end_before = offsets.topics[0].partitions[0].offset
    assert bob.request(ApiKey.PRODUCE, 9, request).responses[0].partition_responses[0].error_code == \
        ErrorCode.TOPIC_AUTHORIZATION_FAILED
    offsets = alice.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    assert offsets.topics[0].partitions[0].offset == end_before


@pytest.mark.guarantee("AUTH-2")
def test_auth_2_unauthorized_clients_cannot_touch_acls_or_credentials(secure_broker, pki):
    alice = sasl_client(secure_broker, pki, "alice")
    described = alice.request(ApiKey.DESCRIBE_ACLS, 3, {
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1, "principal_filter": None,
        "host_filter": None, "operation": 1, "permission_type": 1})
    assert described.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    created = alice.request(ApiKey.CREATE_ACLS, 3, {"creations": [{**CLUSTER, "principal": "User:alice", "host": "*",
                                                                   "operation": 2, "permission_type": 3}]})
    assert created.results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    altered = alice.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [], "upsertions": [{
        "name": "alice", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 32}]})
    assert altered.results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    deleted = alice.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": "wire"}], "timeout_ms": 1000})
    assert deleted.responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


@pytest.mark.guarantee("AUTH-3")
def test_auth_3_a_client_cannot_fetch_as_a_replica_or_write_transaction_markers(secure_broker, pki, topic):
    alice = sasl_client(secure_broker, pki, "alice")  # may read and write the topic, but is no broker
    fetch = alice.request(ApiKey.FETCH, 12, {
        "replica_id": 7, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""})
    assert fetch.responses[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    markers = alice.request(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": 1, "producer_epoch": 0, "transaction_result": False, "coordinator_epoch": 0,
        "topics": [{"name": topic, "partition_indexes": [0]}]}]})
    assert markers.markers[0].topics[0].partitions[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_internal_topics_cannot_be_deleted_even_by_a_super_user(secure_broker, pki):
    admin = sasl_client(secure_broker, pki)
    admin.request(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})  # creates __consumer_offsets
    deleted = admin.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": "__consumer_offsets"}], "timeout_ms": 1000})
    assert deleted.responses[0].error_code in (ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def test_mtls_principal_is_the_certificate_subject(secure_broker, pki, topic):
    admin = sasl_client(secure_broker, pki)
    create_acl(admin, "User:CN=carol,O=kspec", 2, topic, 8)  # DESCRIBE
    address = secure_broker.listeners["MTLS"]
    carol = SecureClient(address, client_context(pki, pki.client("carol")))
    metadata = {"topics": [{"name": topic}, {"name": "__consumer_offsets"}], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}
    answer = carol.request(ApiKey.METADATA, 12, metadata)
    assert [(t.name, t.error_code) for t in answer.topics] == [
        (topic, ErrorCode.NONE), ("__consumer_offsets", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    anonymous = SecureClient(address, client_context(pki))  # ssl.client.auth=required: no certificate, no TLS
    with pytest.raises((ssl.SSLError, ConnectionError)):
        anonymous.request(ApiKey.METADATA, 12, metadata)


def test_authorized_operations_are_reported_when_asked_for(secure_broker, pki, topic):
    alice = sasl_client(secure_broker, pki, "alice")  # READ and WRITE on the topic (DESCRIBE implied)
    metadata = alice.request(ApiKey.METADATA, 10, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                                   "include_cluster_authorized_operations": True,
                                                   "include_topic_authorized_operations": True})
    assert metadata.topics[0].topic_authorized_operations == (1 << 3) | (1 << 4) | (1 << 8)
    assert metadata.cluster_authorized_operations == 0
    admin = sasl_client(secure_broker, pki)
    cluster = admin.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": True,
                                                        "endpoint_type": 1})
    assert cluster.cluster_authorized_operations == sum(1 << op for op in (5, 9, 10, 11, 12, 7, 8))
