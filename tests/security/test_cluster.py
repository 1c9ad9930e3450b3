"""Security on a 3-node cluster: every node serves a SASL_SSL listener beside the PLAINTEXT one
the nodes talk over (its principal, User:ANONYMOUS, is a super user, as a Kafka cluster's
inter-broker principal is); ACLs and SCRAM credentials made through one node are records of the
metadata log that every node replays; Metadata on the SASL_SSL listener names every broker by
its SASL_SSL address."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from reference.process import ClusterProcess
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from tests.security.conftest import JAAS, PASSWORDS, STANDARD_AUTHORIZER, SecureClient, client_context

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory, pki):
    cluster = ClusterProcess(str(tmp_path_factory.mktemp("secure-cluster")), nodes=3, overrides={
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.server_pem_path,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin;User:ANONYMOUS"})
    for node_id, node in cluster.nodes.items():
        node.listen = f"PLAINTEXT://{cluster.addresses[node_id]},SASL_SSL://127.0.0.1:0"
    cluster.start()
    yield cluster
    cluster.stop()


def sasl_config(cluster, pki, node_ids, user: str, password: str | None = None, mechanism: str = "PLAIN") -> dict:
    return {"bootstrap.servers": ",".join(cluster.nodes[n].listeners["SASL_SSL"] for n in node_ids),
            "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password or PASSWORDS[user], "ssl.ca.location": pki.ca_path}


def eventually(check, what: str, timeout_s: float = TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
            if value:
                return value
        except KafkaException:
            pass
        assert time.monotonic() < deadline, f"not within {timeout_s}s: {what}"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def ledger(secure_cluster, pki):
    """A topic, alice's ACLs and the SCRAM user carol, all made through node 1 by the super user."""
    admin = AdminClient(sasl_config(secure_cluster, pki, [1], "admin"))
    for future in admin.create_topics([NewTopic("ledger", 1, 3)]).values():
        future.result(TIMEOUT_S)
    acls = [AclBinding(ResourceType.TOPIC, "ledger", ResourcePatternType.LITERAL, "User:alice", "*", op,
                       AclPermissionType.ALLOW) for op in (AclOperation.READ, AclOperation.WRITE)]
    acls.append(AclBinding(ResourceType.GROUP, "ledger-", ResourcePatternType.PREFIXED, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW))
    for future in admin.create_acls(acls).values():
        future.result(TIMEOUT_S)
    upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"c-pw")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(TIMEOUT_S)
    return "ledger"


def test_acls_and_scram_users_made_on_one_node_hold_on_every_node(secure_cluster, pki, ledger):
    # Through node 3 alone: its Metadata names every broker by its SASL_SSL address, and it knows alice's ACLs.
    alice_admin = AdminClient(sasl_config(secure_cluster, pki, [3], "alice"))
    metadata = eventually(lambda: (m := alice_admin.list_topics("ledger", timeout=5)).topics["ledger"].error is None
                          and m, "alice sees the topic through node 3")
    assert {f"{b.host}:{b.port}" for b in metadata.brokers.values()} == {
        node.listeners["SASL_SSL"] for node in secure_cluster.nodes.values()}
    producer = Producer(sasl_config(secure_cluster, pki, [3], "alice") | {"acks": "all"})
    errors = []
    for i in range(20):
        producer.produce("ledger", f"entry-{i}".encode(), on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(TIMEOUT_S) == 0 and not errors
    consumer = Consumer(sasl_config(secure_cluster, pki, [2], "alice")
                        | {"group.id": "ledger-readers", "auto.offset.reset": "earliest"})
    consumer.subscribe(["ledger"])
    values = []
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while len(values) < 20 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert values == [f"entry-{i}".encode() for i in range(20)]

    # The SCRAM user made through node 1 logs in on node 2; bob is refused everywhere.
    carol = AdminClient(sasl_config(secure_cluster, pki, [2], "carol", "c-pw", "SCRAM-SHA-256"))
    eventually(lambda: carol.list_topics(timeout=5) is not None, "carol authenticates on node 2")
    for node_id in secure_cluster.nodes:
        bob = SecureClient(secure_cluster.nodes[node_id].listeners["SASL_SSL"], client_context(pki))
        assert bob.plain("bob", PASSWORDS["bob"]).error_code == ErrorCode.NONE
        metadata = bob.request(ApiKey.METADATA, 12, {"topics": [{"name": "ledger"}], "allow_auto_topic_creation": False,
                                                     "include_topic_authorized_operations": False})
        assert metadata.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


@pytest.mark.guarantee("AUTH-3")
def test_auth_3_a_client_on_the_sasl_ssl_listener_cannot_fetch_as_a_replica(secure_cluster, pki, ledger):
    leader = eventually(lambda: secure_cluster.leader_of("ledger", 0) > 0 and secure_cluster.leader_of("ledger", 0),
                        "ledger has a leader")
    alice = SecureClient(secure_cluster.nodes[leader].listeners["SASL_SSL"], client_context(pki))
    assert alice.plain("alice", PASSWORDS["alice"]).error_code == ErrorCode.NONE
    fetch = alice.request(ApiKey.FETCH, 12, {
        "replica_id": 2 if leader != 2 else 3, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [{"topic": "ledger", "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 1000, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""})
    assert fetch.responses[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
