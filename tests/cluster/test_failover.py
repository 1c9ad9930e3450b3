"""Failover on a real cluster: a follower rejoins the ISR; unclean elections lose exactly the
records the stale replica never had, clean ones keep the partition offline; the controller
quorum survives the loss of its active controller with the metadata intact, and an admin request
whose controller loses the leadership before its records commit is answered, not dropped."""
from __future__ import annotations

import glob
import os
import signal
import time

from confluent_kafka.admin import AdminClient, ConfigResource

from conformance.wire import WireClient
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

from .conftest import WAIT_S, create_topic, partition_state, produce_acked, read_all, wait_until

OFFLINE_CHECK_S = 4.0  # how long an offline partition is watched to stay offline
QUORUM_LOST_S = 3.0  # the other voters' pause: past FAST_FAILOVER's 1.5 s check-quorum timeout (1.5x its fetch timeout)
CONTROLLER_FAILOVER_S_MAX = 5.0


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i:04d}".encode() for i in range(count)]


def segment_bytes(data_dir: str, topic: str) -> bytes:
    return b"".join(open(path, "rb").read() for path in sorted(glob.glob(os.path.join(data_dir, f"{topic}-0", "*.log"))))


def test_a_follower_that_was_down_catches_up_and_reenters_the_isr(start_cluster):
    cluster = start_cluster()
    topic = create_topic(cluster, **{"min.insync.replicas": "2"})
    assert len(produce_acked(cluster, topic, values("before", 50))) == 50
    leader, replicas, _ = partition_state(cluster, topic)
    follower = next(r for r in replicas if r != leader)
    cluster.kill(follower)
    wait_until(lambda: follower not in partition_state(cluster, topic)[2], "the dead follower leaves the ISR")
    assert len(produce_acked(cluster, topic, values("while-down", 200))) == 200  # ISR of 2 >= min.insync.replicas
    cluster.start_node(follower)
    wait_until(lambda: partition_state(cluster, topic)[2] == replicas, "the follower is back in the ISR")
    assert [v for _, v in read_all(cluster, topic)] == values("before", 50) + values("while-down", 200)
    cluster.stop()
    copies = {node_id: segment_bytes(node.data_dir, topic) for node_id, node in cluster.nodes.items()}
    assert len(set(copies.values())) == 1 and copies[follower], "REP-1: every replica holds the same bytes"


def unclean_scenario(start_cluster, unclean: bool):
    """The seeds' scenario on 5 nodes (so the controller quorum outlives three deaths): an
    RF=3 partition's followers die, the leader alone acks more records, the leader dies, and
    a stale follower comes back first."""
    cluster = start_cluster(nodes=5)
    topic = create_topic(cluster, **{"min.insync.replicas": "1",
                                     "unclean.leader.election.enable": str(unclean).lower()})
    acked = produce_acked(cluster, topic, values("replicated", 20))
    leader, replicas, _ = partition_state(cluster, topic)
    stale, other = [r for r in replicas if r != leader]
    cluster.kill(stale)
    cluster.kill(other)
    wait_until(lambda: partition_state(cluster, topic)[2] == [leader], "the ISR shrinks to the leader")
    leader_only = produce_acked(cluster, topic, values("leader-only", 20))
    assert len(leader_only) == 20
    cluster.kill(leader)
    cluster.start_node(stale)
    return cluster, topic, leader, stale, {**acked, **leader_only}


def test_unclean_election_loses_exactly_the_records_the_stale_replica_never_had(start_cluster):
    cluster, topic, leader, stale, acked = unclean_scenario(start_cluster, unclean=True)
    wait_until(lambda: partition_state(cluster, topic)[0] == stale, "the stale replica is elected (unclean)")
    cluster.start_node(leader)
    wait_until(lambda: leader in partition_state(cluster, topic)[2], "the old leader truncates and rejoins")
    read = {value for _, value in read_all(cluster, topic)}
    lost = sorted(value for value in acked if value not in read)
    assert lost == values("leader-only", 20), f"DUR-1 fails as the seeds describe: lost {lost}"


def test_without_unclean_election_the_partition_stays_offline_until_an_isr_member_returns(start_cluster):
    cluster, topic, leader, stale, acked = unclean_scenario(start_cluster, unclean=False)
    wait_until(lambda: stale in getattr(cluster.metadata(), "brokers", {}), "the stale replica is registered again")
    deadline = time.monotonic() + OFFLINE_CHECK_S
    while time.monotonic() < deadline:
        assert partition_state(cluster, topic)[0] in (-1, leader), "only the ISR member may lead (or no node answers)"
        time.sleep(0.2)
    cluster.start_node(leader)
    wait_until(lambda: partition_state(cluster, topic)[0] == leader, "the last ISR member leads again")
    read = {value for _, value in read_all(cluster, topic)}
    assert sorted(value for value in acked if value not in read) == [], "DUR-1"


def test_killing_the_active_controller_elects_another_with_metadata_intact(start_cluster):
    cluster = start_cluster()
    topic = create_topic(cluster, partitions=3, **{"retention.ms": "123456"})
    controller = cluster.controller_id()
    assert controller >= 1
    cluster.kill(controller)
    killed_at = time.monotonic()
    new_controller = wait_until(lambda: (c := cluster.controller_id()) not in (-1, controller) and c, "a new controller")
    failover_s = time.monotonic() - killed_at
    assert failover_s < CONTROLLER_FAILOVER_S_MAX, failover_s
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    metadata = admin.list_topics(topic, timeout=WAIT_S)
    assert len(metadata.topics[topic].partitions) == 3
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(WAIT_S)
    assert configs["retention.ms"].value == "123456"
    after = create_topic(cluster, replication_factor=2)  # the new controller takes commands
    assert cluster.controller_id() != controller and partition_state(cluster, after)[0] >= 1, \
        "on a loaded machine the quorum may have moved on from new_controller since; the killed node is not back"


def test_an_admin_request_whose_controller_loses_the_quorum_before_commit_is_answered(start_cluster):
    """The active controller decides a CreateTopics while the other two voters are paused: its
    records cannot commit, and it resigns once it has not heard from a majority. The request
    is then run on whichever node leads next (Kafka's forwarding retries on NOT_CONTROLLER):
    the client gets an answer, not a closed connection, and the topic exists."""
    cluster = start_cluster()
    controller = cluster.controller_id()
    assert controller >= 1
    others = [node_id for node_id in cluster.nodes if node_id != controller]
    with WireClient(cluster.addresses[controller]) as wire:
        for node_id in others:
            os.kill(cluster.nodes[node_id].process.pid, signal.SIGSTOP)
        try:
            sent = wire.send(ApiKey.CREATE_TOPICS, 5, {"topics": [
                {"name": "decided-without-quorum", "num_partitions": 1, "replication_factor": 3,
                 "assignments": [], "configs": []}], "timeout_ms": 30_000, "validate_only": False})
            time.sleep(QUORUM_LOST_S)
        finally:
            for node_id in others:
                os.kill(cluster.nodes[node_id].process.pid, signal.SIGCONT)
        answer = wire.receive(ApiKey.CREATE_TOPICS, 5, sent, timeout_s=WAIT_S).topics[0]
    assert answer.error_code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS), answer
    wait_until(lambda: partition_state(cluster, "decided-without-quorum")[0] >= 1, "the topic has a leader")
