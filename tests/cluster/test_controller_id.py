"""Metadata's ControllerId names a live broker, also while the controller quorum has no leader
(KIP-590: a broker forwards the admin requests clients send it to the active controller; Kafka's
KRaft brokers name a random live one). librdkafka, told -1, asks again only when one of its
connections changes state: its CreateTopics then waited out its whole timeout ("Failed while
waiting for controller") although the quorum had a leader again a second later. Tools that want the
active controller itself (ClusterProcess.controller_id, the fault harness's kill:controller) ask
DescribeQuorum, which names the quorum's leader or none."""
from __future__ import annotations

import os
import signal
import time

from confluent_kafka.admin import AdminClient, NewTopic

from conformance.wire import WireClient
from reference.node.base import METADATA_TOPIC
from reference.process import QUORUM_ASK_TIMEOUT_S, cluster_metadata
from reference.protocol.api_keys import ApiKey

from .conftest import WAIT_S, wait_until

CREATED_AFTER_RESTART_S_MAX = 20.0  # the node's start, an election, the forwarded CreateTopics: seconds
DESCRIBE_QUORUM_WAIT_S = 3.0  # a leader answers at once; a node without one holds it (forwarding)


def has_no_active_controller(address: str) -> bool:
    """DescribeQuorum goes to the active controller; a node that knows none holds it until one
    is elected (or closes the connection once its forwarding wait is over)."""
    try:
        with WireClient(address, timeout_s=DESCRIBE_QUORUM_WAIT_S) as wire:
            wire.request(ApiKey.DESCRIBE_QUORUM, 1, {"topics": [
                {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]})
    except OSError:
        return True
    return False


def test_a_create_topics_sent_while_the_quorum_has_no_leader_completes_once_it_has_one(start_cluster):
    cluster = start_cluster(2)
    controller = wait_until(lambda: max(cluster.controller_id(), 0), "an active controller")
    follower = 3 - controller
    cluster.kill(follower)
    survivor = cluster.addresses[controller]
    wait_until(lambda: has_no_active_controller(survivor), "the controller resigns: it hears from no majority")

    metadata = cluster_metadata(survivor)
    assert metadata is not None and metadata.controller_id in metadata.brokers, metadata and metadata.controller_id
    # the tools that kill "the controller" ask the quorum (DescribeQuorum), which has no leader
    assert cluster.controller_id() == -1
    admin = AdminClient({"bootstrap.servers": survivor})
    # One replica: the restarted node may not be unfenced yet when the CreateTopics runs.
    future = admin.create_topics([NewTopic("after-the-election", 1, 1)], request_timeout=WAIT_S)["after-the-election"]
    cluster.start_node(follower)
    restarted = time.monotonic()
    future.result(WAIT_S)
    assert time.monotonic() - restarted < CREATED_AFTER_RESTART_S_MAX
    leader = wait_until(lambda: max(cluster.controller_id(), 0), "an active controller again")
    with WireClient(survivor, timeout_s=WAIT_S) as wire:
        quorum = wire.request(ApiKey.DESCRIBE_QUORUM, 1, {"topics": [
            {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]})
    assert quorum.topics[0].partitions[0].leader_id == leader


def test_a_paused_node_does_not_hold_up_the_controller_lookup(start_cluster):
    """Every node is asked at once and the first leader named is the answer: a paused node (its
    socket accepts, nothing answers) costs nothing while the others answer."""
    cluster = start_cluster(3)
    controller = wait_until(lambda: max(cluster.controller_id(), 0), "an active controller")
    paused = next(node_id for node_id in cluster.nodes if node_id != controller)
    os.kill(cluster.nodes[paused].process.pid, signal.SIGSTOP)
    try:
        asked = time.monotonic()
        assert cluster.controller_id() == controller  # two of three voters: still the leader
        assert time.monotonic() - asked < QUORUM_ASK_TIMEOUT_S, "waited for the paused node"
    finally:
        os.kill(cluster.nodes[paused].process.pid, signal.SIGCONT)
