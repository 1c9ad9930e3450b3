"""KIP-951 new-leader hints: a Produce (v10+) or Fetch (v12+) sent to a broker that does not
lead the partition is answered NOT_LEADER_OR_FOLLOWER with the leader and leader epoch that
broker knows, and the leader's endpoint (Produce v10+, Fetch v16+), so a client can go
straight there. (A consumer Fetch v11+ to a follower is served, KIP-392: the hint comes from a
broker holding no replica.) Raw requests over a socket, to a real two-node cluster."""
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


@pytest.fixture(scope="module")
def single_replica_topic(cluster):
    return create_topic(cluster, replication_factor=1)


def fetch(cluster: ClusterProcess, node_id: int, topic: str, version: int, isolation_level: int = 0):
    _, _, topic_id = partition_metadata(cluster, topic)
    fetched = {"topic_id": topic_id} if version >= 13 else {"topic": topic}  # v13+ names topics by id
    response = request(cluster.addresses[node_id], ApiKey.FETCH, version, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1_000_000, "isolation_level": isolation_level,
        "session_id": 0, "session_epoch": -1,
        "topics": [{**fetched, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}]}]})
    (answer,) = response.responses[0].partitions
    return response, answer


@pytest.mark.parametrize("version", [10, 12, 16])
def test_fetch_to_a_broker_that_cannot_serve_it_names_the_leader_from_v12(cluster, topic, single_replica_topic,
                                                                          version):
    """Below v11 a follower serves no consumer fetch; from v11 it does (KIP-392, below), so the
    v12+ hint is asked of a broker that holds no replica of the partition."""
    fetched_topic = topic if version < 11 else single_replica_topic
    leader, epoch, _ = partition_metadata(cluster, fetched_topic)
    response, answer = fetch(cluster, 3 - leader, fetched_topic, version)
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    hinted = (answer.current_leader.leader_id, answer.current_leader.leader_epoch) if version >= 12 else None
    assert hinted == ((leader, epoch) if version >= 12 else None)
    endpoints = [(node.node_id, node.host, node.port) for node in response.node_endpoints] if version >= 16 else []
    assert endpoints == ([(leader, *endpoint(cluster, leader))] if version >= 16 else [])


@pytest.mark.parametrize("version", [11, 12, 16])
def test_a_follower_serves_a_read_uncommitted_consumer_fetch_from_v11(cluster, topic, version):
    """KIP-392: Kafka serves a consumer Fetch v11+ (it carries client metadata) from the local
    replica, follower too, below that replica's high watermark; read_committed is refused here."""
    leader, _, _ = partition_metadata(cluster, topic)
    _, answer = fetch(cluster, 3 - leader, topic, version)
    assert answer.error_code == ErrorCode.NONE and answer.high_watermark >= 0
    _, committed = fetch(cluster, 3 - leader, topic, version, isolation_level=1)
    assert committed.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
