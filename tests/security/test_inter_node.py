"""The traffic between nodes on secured listeners: three combined-mode nodes whose controller
quorum talks on a SASL_SSL controller listener (controller.listener.names=CONTROLLER, PLAIN with
each node's own credentials) and whose replicas fetch on an SSL inter-broker listener
(inter.broker.listener.name=REPLICATION); clients have a PLAINTEXT listener of their own. No
plaintext listener carries any RPC between nodes, so a quorum that elects, a forwarded
CreateTopics and acks=all with min.insync.replicas=3 show the secured paths work. The controller
listener refuses clients' requests, and a broker listener refuses the controller's RPCs."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from conformance.sasl import authenticate
from reference.process import BrokerProcess, cluster_metadata, cluster_ready, free_ports
from reference.protocol.api_keys import ApiKey
from reference.security.jaas import PLAIN_LOGIN_MODULE
from tests.broker.conftest import RawClient
from tests.security.conftest import SecureClient, client_context, socket_closed

NODES = (1, 2, 3)
NODE_PASSWORD = "node-secret"
READY_S = 60
VOTE = {"cluster_id": None, "voter_id": 1, "topics": [{"topic_name": "__cluster_metadata", "partitions": [
    {"partition_index": 0, "replica_epoch": 99, "replica_id": 2, "last_offset_epoch": 99, "last_offset": 1 << 40,
     "pre_vote": True}]}]}


@pytest.fixture(scope="module")
def secured_nodes(tmp_path_factory, pki):
    base = tmp_path_factory.mktemp("inter-node")
    ports = free_ports(3 * len(NODES))
    controller, replication, client = ports[0:3], ports[3:6], ports[6:9]
    jaas = f'{PLAIN_LOGIN_MODULE} required username="node" password="{NODE_PASSWORD}" user_node="{NODE_PASSWORD}";'
    overrides = {
        "controller.quorum.voters": ",".join(f"{n}@127.0.0.1:{controller[n - 1]}" for n in NODES),
        "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "REPLICATION",
        "listener.security.protocol.map": "CONTROLLER:SASL_SSL,REPLICATION:SSL,CLIENT:PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.server_pem_path,
        "ssl.truststore.location": pki.ca_path,
        "broker.heartbeat.interval.ms": "250", "broker.session.timeout.ms": "3000",
    }
    nodes = {n: BrokerProcess(str(base / f"node{n}"), node_id=n, overrides=overrides,
                              listen=f"CONTROLLER://127.0.0.1:{controller[n - 1]},"
                                     f"REPLICATION://127.0.0.1:{replication[n - 1]},CLIENT://127.0.0.1:{client[n - 1]}")
             for n in NODES}
    try:
        for node in nodes.values():
            node.start()
        bootstrap = ",".join(f"127.0.0.1:{port}" for port in client)
        deadline = time.monotonic() + READY_S
        while not cluster_ready(cluster_metadata(bootstrap), len(NODES)):
            assert time.monotonic() < deadline, "the secured cluster did not form; see the nodes' stderr logs"
            time.sleep(0.2)
        yield {"bootstrap": bootstrap, "controller": [f"127.0.0.1:{p}" for p in controller],
               "client": [f"127.0.0.1:{p}" for p in client]}
    finally:
        for node in nodes.values():
            if node.running:
                node.stop()


def test_the_quorum_forwarding_and_replication_run_on_the_secured_listeners(secured_nodes):
    admin = AdminClient({"bootstrap.servers": secured_nodes["bootstrap"]})
    for future in admin.create_topics([NewTopic("secured", 1, 3, config={"min.insync.replicas": "3"})]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": secured_nodes["bootstrap"], "acks": "all", "message.timeout.ms": 30000})
    acked = []
    for i in range(20):
        producer.produce("secured", f"r{i}".encode(), on_delivery=lambda err, msg: acked.append(err is None))
    producer.flush(40)
    assert acked == [True] * 20, "acks=all with min.insync.replicas=3: every follower fetched over SSL"
    consumer = Consumer({"bootstrap.servers": secured_nodes["bootstrap"], "group.id": "secured-readers",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["secured"])
    values, deadline = [], time.monotonic() + 30
    while len(values) < 20 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert values == [f"r{i}".encode() for i in range(20)]


def test_the_controller_listener_serves_the_controller_only(secured_nodes, pki):
    """Kafka's controller listener lists and answers the controller's APIs and the RPCs between
    nodes, and closes on a client's request."""
    wire = SecureClient(secured_nodes["controller"][0], client_context(pki))
    authenticate(wire, "PLAIN", "node", NODE_PASSWORD)
    versions = wire.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    listed = {entry.api_key for entry in versions.api_keys}
    assert versions.error_code == 0 and {ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH,
                                         ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT, ApiKey.ALTER_PARTITION,
                                         ApiKey.ENVELOPE, ApiKey.FETCH, ApiKey.CREATE_TOPICS} <= listed
    assert ApiKey.PRODUCE not in listed and ApiKey.METADATA not in listed
    wire.send(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False})
    assert socket_closed(wire.sock)


def test_a_broker_listener_refuses_the_controllers_rpcs(secured_nodes):
    """A broker listener's ApiVersions lists no RPC between nodes, and a Vote (a pre-vote that would disturb nobody) on the clients' listener closes the connection:
    with controller.listener.names set, the quorum's RPCs are served on the controller listener only."""
    wire = RawClient(secured_nodes["client"][0])
    versions = wire.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    listed = {entry.api_key for entry in versions.api_keys}
    assert ApiKey.PRODUCE in listed and not listed & {ApiKey.VOTE, ApiKey.BROKER_HEARTBEAT, ApiKey.ENVELOPE}
    wire.send(ApiKey.VOTE, 2, VOTE)
    assert socket_closed(wire.sock)
