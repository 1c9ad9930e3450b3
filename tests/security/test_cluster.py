"""Security on a 3-node cluster started as a user would, `kspec cluster --nodes 3 --secure`:
every node serves a SASL_SSL listener, which the brokers also replicate over, and a SASL_SSL
controller listener for the quorum (the nodes authenticate as the admin, a super user, as a
Kafka cluster's inter-broker principal is); no listener is plaintext;
ACLs and SCRAM credentials made through one node are records of the metadata log that every
node replays; Metadata on the SASL_SSL listener names every broker by its SASL_SSL address."""
from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from conformance.sasl import authenticate
from reference.config import read_properties_file
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from tests.security.conftest import SecureClient, socket_closed

TIMEOUT_S = 30
START_TIMEOUT_S = 90
# A Vote as a candidate would send it (KIP-595, KIP-996): an RPC between the nodes only.
VOTE = {"cluster_id": None, "voter_id": 1, "topics": [{"topic_name": "__cluster_metadata", "partitions": [
    {"partition_index": 0, "replica_epoch": 99, "replica_id": 2, "last_offset_epoch": 99, "last_offset": 1 << 40,
     "pre_vote": False}]}]}
USERS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}  # SCRAM-SHA-256 users the admin makes


class SecureCluster:
    def __init__(self, process: subprocess.Popen, sasl_addresses: list[str], properties: dict[str, str]) -> None:
        self.process = process
        self.sasl_addresses = sasl_addresses  # node 1, 2, 3
        self.properties = properties  # the admin's client properties, as printed

    def config(self, node_numbers, user: str | None = None) -> dict:
        config = {**self.properties, "bootstrap.servers": ",".join(self.sasl_addresses[n - 1] for n in node_numbers)}
        if user is not None:
            config.update({"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": USERS[user]})
        return config

    def scram_client(self, node: int, user: str) -> SecureClient:
        client = SecureClient(self.sasl_addresses[node - 1],
                              ssl.create_default_context(cafile=self.properties["ssl.ca.location"]))
        authenticate(client, "SCRAM-SHA-256", user, USERS[user])
        return client


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("secure-cluster"))
    process = subprocess.Popen([sys.executable, "-m", "kspec.cli", "cluster", "--nodes", "3", "--secure",
                                "--data-dir", data_dir], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ready = _ready_line(process)
        sasl_addresses = ready.split("bootstrap=", 1)[1].split()[0].split(",")
        properties = read_properties_file(os.path.join(data_dir, "client.properties"))
        assert properties["security.protocol"] == "SASL_SSL" and len(sasl_addresses) == 3
        yield SecureCluster(process, sasl_addresses, properties)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def _ready_line(process: subprocess.Popen) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    for line in process.stdout:
        if line.startswith("kspec cluster ready"):
            return line
        assert time.monotonic() < deadline, "no ready line from kspec cluster --secure"
    raise AssertionError(f"kspec cluster --secure ended with {process.wait()}")


def eventually(check, what: str, timeout_s: float = TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
            if value:
                return value
        except (KafkaException, ConnectionError):  # not replicated to that node yet
            pass
        assert time.monotonic() < deadline, f"not within {timeout_s}s: {what}"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def ledger(secure_cluster):
    """A topic, alice's ACLs and three SCRAM users, all made through node 1 by the admin."""
    admin = AdminClient(secure_cluster.config([1]))
    for future in admin.create_topics([NewTopic("ledger", 1, 3)]).values():
        future.result(TIMEOUT_S)
    acls = [AclBinding(ResourceType.TOPIC, "ledger", ResourcePatternType.LITERAL, "User:alice", "*", op,
                       AclPermissionType.ALLOW) for op in (AclOperation.READ, AclOperation.WRITE)]
    acls.append(AclBinding(ResourceType.GROUP, "ledger-", ResourcePatternType.PREFIXED, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW))
    for future in admin.create_acls(acls).values():
        future.result(TIMEOUT_S)
    upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                            password.encode()) for user, password in USERS.items()]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(TIMEOUT_S)
    return "ledger"


def test_acls_and_scram_users_made_on_one_node_hold_on_every_node(secure_cluster, ledger):
    # Through node 3 alone: its Metadata names every broker by its SASL_SSL address, and it knows alice.
    alice_admin = AdminClient(secure_cluster.config([3], "alice"))
    metadata = eventually(lambda: (m := alice_admin.list_topics("ledger", timeout=5)).topics["ledger"].error is None
                          and m, "alice sees the topic through node 3")
    assert {f"{b.host}:{b.port}" for b in metadata.brokers.values()} == set(secure_cluster.sasl_addresses)
    producer = Producer(secure_cluster.config([3], "alice") | {"acks": "all"})
    errors = []
    for i in range(20):
        producer.produce(ledger, f"entry-{i}".encode(), on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(TIMEOUT_S) == 0 and not errors
    consumer = Consumer(secure_cluster.config([2], "alice") | {"group.id": "ledger-readers",
                                                                "auto.offset.reset": "earliest"})
    consumer.subscribe([ledger])
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
    # bob, a SCRAM user without ACLs, authenticates on every node and is refused the topic there.
    for node in (1, 2, 3):
        bob = eventually(lambda: secure_cluster.scram_client(node, "bob"), f"bob authenticates on node {node}")
        answer = bob.request(ApiKey.METADATA, 12, {"topics": [{"name": ledger}], "allow_auto_topic_creation": False,
                                                   "include_topic_authorized_operations": False})
        assert answer.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


@pytest.mark.guarantee("AUTH-3")
def test_auth_3_a_client_on_the_sasl_ssl_listener_cannot_fetch_as_a_replica(secure_cluster, ledger):
    alice = eventually(lambda: secure_cluster.scram_client(1, "alice"), "alice authenticates on node 1")
    metadata = alice.request(ApiKey.METADATA, 12, {"topics": [{"name": ledger}], "allow_auto_topic_creation": False,
                                                   "include_topic_authorized_operations": False})
    leader = metadata.topics[0].partitions[0].leader_id
    alice = secure_cluster.scram_client(leader, "alice")
    fetch = alice.request(ApiKey.FETCH, 12, {
        "replica_id": 2 if leader != 2 else 3, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [{"topic": ledger, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 1000, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""})
    assert fetch.responses[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    # Nor may it send the nodes' own RPCs: a Vote from a client closes its connection,
    # as it does from a connection not yet authenticated (whose principal would be User:ANONYMOUS).
    alice.send(ApiKey.VOTE, 2, VOTE)
    assert socket_closed(alice.sock)
    stranger = SecureClient(secure_cluster.sasl_addresses[leader - 1],
                            ssl.create_default_context(cafile=secure_cluster.properties["ssl.ca.location"]))
    stranger.send(ApiKey.VOTE, 2, VOTE)
    assert socket_closed(stranger.sock)
