"""KIP-951 new-leader hints: a Produce (v10+) or Fetch (v12+) sent to a broker that does not
lead the partition is answered NOT_LEADER_OR_FOLLOWER with the leader and leader epoch that
broker knows, and the leader's endpoint (Produce v10+, Fetch v16+), so a client can go
straight there. Raw requests over a socket, to a real two-node cluster."""
from __future__ import annotations

import pytest

from conformance.wire import WireClient
from reference.process import FAST_FAILOVER, ClusterProcess
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

from .conftest import WAIT_S, agreed_state, create_topic, wait_until

NO_LEADER = -1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = ClusterProcess(str(tmp_path_factory.mktemp("leader-hints")), 2, overrides=FAST_FAILOVER)
    started.start()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def topic(cluster):
    name = create_topic(cluster, replication_factor=2)
    wait_until(lambda: (agreed_state(cluster, name) or (None, ()))[1] == (1, 2),
               "both brokers: both replicas in the ISR")
    return name


def request(address: str, api_key: int, version: int, body: dict):
    with WireClient(address, client_id="kspec-leader-hints", timeout_s=WAIT_S) as wire:
        return wire.request(api_key, version, body)


def partition_metadata(cluster: ClusterProcess, topic: str):
    """(leader, leader epoch, topic id) from a Metadata v12 answer (confluent-kafka does not show epochs)."""
    response = request(cluster.bootstrap.split(",")[0], ApiKey.METADATA, 12, {
        "topics": [{"name": topic}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})
    (described,) = response.topics
    (partition,) = described.partitions
    return partition.leader_id, partition.leader_epoch, described.topic_id


def endpoint(cluster: ClusterProcess, node_id: int) -> tuple[str, int]:
    host, port = cluster.addresses[node_id].rsplit(":", 1)
    return host, int(port)


@pytest.mark.parametrize("version", [9, 10, 13])
def test_produce_to_a_follower_names_the_leader_from_v10(cluster, topic, version):
    leader, epoch, topic_id = partition_metadata(cluster, topic)
    follower = 3 - leader
    topic_data = {"name": topic, "partition_data": [{"index": 0, "records": b""}]}
    if version >= 13:
        topic_data = {"topic_id": topic_id, "partition_data": [{"index": 0, "records": b""}]}
    response = request(cluster.addresses[follower], ApiKey.PRODUCE, version,
                       {"acks": -1, "timeout_ms": 5000, "topic_data": [topic_data]})
    (answer,) = response.responses[0].partition_responses
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    if version < 10:
        return
    assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (leader, epoch)
    assert [(node.node_id, node.host, node.port) for node in response.node_endpoints] == [
        (leader, *endpoint(cluster, leader))]


@pytest.mark.parametrize("version", [11, 12, 16])
def test_fetch_from_a_follower_names_the_leader_from_v12(cluster, topic, version):
    leader, epoch, topic_id = partition_metadata(cluster, topic)
    follower = 3 - leader
    fetched = {"topic_id": topic_id} if version >= 13 else {"topic": topic}  # v13+ names topics by id
    response = request(cluster.addresses[follower], ApiKey.FETCH, version, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1_000_000, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1,
        "topics": [{**fetched, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}]}]})
    (answer,) = response.responses[0].partitions
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    hinted = (answer.current_leader.leader_id, answer.current_leader.leader_epoch) if version >= 12 else None
    assert hinted == ((leader, epoch) if version >= 12 else None)
    endpoints = [(node.node_id, node.host, node.port) for node in response.node_endpoints] if version >= 16 else []
    assert endpoints == ([(leader, *endpoint(cluster, leader))] if version >= 16 else [])
