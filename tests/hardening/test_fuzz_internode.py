"""PRO-1 on the inter-node path: Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch of
`__cluster_metadata`, BrokerRegistration, BrokerHeartbeat, AlterPartition and Envelope frames
(well formed with ids and epochs drawn around the real ones, or flipped, cut short, at versions
not served, under another key; internode.py) sent to every node of a real three-node cluster.
No node crashes, each answers or closes; afterwards a confluent-kafka producer and consumer
are served, no handler failed, and with the cluster stopped every replica of the data topic and
of the metadata log is whole, the replicas agree, and every acknowledged record is there.
The million-frame run is benchmarks/bench_fuzz.py."""
from __future__ import annotations

import random
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from reference.process import ClusterProcess
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from tests.broker.conftest import RawClient

from .internode import cluster_view, internal_errors, internode_frame, log_problems, send_burst, serves_a_client

TOPIC = "internode-data"
NODES = 3
FRAMES = 3_000
FRAMES_PER_BURST = 50
SEED = 17
WAIT_S = 40.0
HANG_S = 10.0  # a fresh connection's ApiVersions answered within this, or the node hangs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base_dir = tmp_path_factory.mktemp("fuzz-internode")
    with ClusterProcess(str(base_dir), NODES, overrides={"min.insync.replicas": "2"}) as running:
        admin = AdminClient({"bootstrap.servers": running.bootstrap})  # must outlive its futures
        admin.create_topics([NewTopic(TOPIC, 1, NODES)])[TOPIC].result(WAIT_S)
        yield running


def test_a_request_for_billions_of_partitions_is_refused_at_once(cluster):
    """Found by the fuzz: a forwarded CreatePartitions whose count had a flipped byte made the
    active controller build two billion partition records on its event loop (a hang). A
    cluster's controller now bounds partitions per topic as a single node does."""
    client = RawClient(cluster.addresses[cluster.broker_ids[0]])
    created = client.request(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": "too-many", "num_partitions": (1 << 31) - 1, "replication_factor": 1, "assignments": [],
         "configs": []}], "timeout_ms": 5000, "validate_only": False})
    assert created.topics[0].error_code == ErrorCode.INVALID_PARTITIONS
    grown = client.request(ApiKey.CREATE_PARTITIONS, 3, {"topics": [
        {"name": TOPIC, "count": (1 << 31) - 1, "assignments": None}], "timeout_ms": 5000, "validate_only": False})
    assert grown.results[0].error_code == ErrorCode.INVALID_PARTITIONS
    client.close()


def test_inter_node_frames_leave_every_node_serving_and_every_log_whole(cluster):
    acked = [b"before-%d" % i for i in range(20)]
    assert serves_a_client(cluster.bootstrap, TOPIC, acked, time.monotonic() + WAIT_S) is None
    view = cluster_view(cluster, [TOPIC])
    rng = random.Random(SEED)
    answered = probes = 0
    for burst_index in range(FRAMES // FRAMES_PER_BURST):
        node_id = cluster.broker_ids[burst_index % NODES]
        frames = [internode_frame(rng, view, may_close=index == FRAMES_PER_BURST - 1)
                  for index in range(FRAMES_PER_BURST)]
        handled, survived = send_burst(cluster.addresses[node_id], frames)
        answered, probes = answered + handled, probes + survived
        assert cluster.nodes[node_id].running, f"node {node_id} ended after burst {burst_index} (seed {SEED})"
        assert survived or send_burst(cluster.addresses[node_id], [], HANG_S)[1], \
            f"node {node_id} hangs after burst {burst_index} (seed {SEED})"
    assert answered >= FRAMES // 2, f"only {answered} of {FRAMES} frames answered"
    after = [b"after-%d" % i for i in range(20)]
    problem = serves_a_client(cluster.bootstrap, TOPIC, after, time.monotonic() + WAIT_S)
    assert problem is None, f"the cluster does not serve a client after the fuzz: {problem}"
    assert not internal_errors(cluster)
    cluster.stop()
    assert log_problems(cluster, TOPIC, acked + after) == []
