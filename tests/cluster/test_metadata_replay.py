"""Every node replays every committed metadata record, or stops.

A CreatePartitions naming a topic twice is refused (its second half, decided from the state
the first had not changed yet, added the same partitions again: every node's replay failed
there). A node that cannot replay a committed record stops, loudly (Kafka's fatal fault
handler), instead of skipping the rest of the batch and serving a view that diverged for good:
the record is written into a stopped node's metadata log the way its Raft leader writes one,
past the active controller's check, as an older kspec committed a second TopicRecord for a
name on concurrent auto-creations. Each node is a real `kspec broker` process, the only voter
of its quorum, so it commits a record as soon as it is elected.
"""
from __future__ import annotations

import os
import uuid

from conformance.wire import WireClient
from reference.controller.raft import RaftConfig
from reference.controller.state import TOPIC_RESOURCE
from reference.node.broker import METADATA_PARTITION_DIR
from reference.node.replay import METADATA_REPLAY_FAILED_EXIT_STATUS
from reference.node.quorum import DurableRaftNode
from reference.process import BrokerNotReady, ClusterProcess
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

from .conftest import WAIT_S, create_topic, partition_state, wait_until

ELECTION_MS = 5_000  # past the election timeout with its jitter
CREATE_PARTITIONS_VERSION = 3


def create_partitions(cluster: ClusterProcess, counts: list[tuple[str, int]]) -> list[int]:
    """One CreatePartitions request over the wire; the error code of each topic's result."""
    with WireClient(cluster.bootstrap) as wire:
        response = wire.request(ApiKey.CREATE_PARTITIONS, CREATE_PARTITIONS_VERSION, {
            "topics": [{"name": name, "count": count, "assignments": None} for name, count in counts],
            "timeout_ms": int(WAIT_S * 1000), "validate_only": False})
    return [result.error_code for result in response.results]


def test_a_create_partitions_naming_a_topic_twice_is_refused_and_the_node_replays_on(tmp_path):
    with ClusterProcess(str(tmp_path), nodes=1) as cluster:
        topic = create_topic(cluster, replication_factor=1)
        assert create_partitions(cluster, [(topic, 3), (topic, 3)]) == [ErrorCode.INVALID_REQUEST] * 2
        assert create_partitions(cluster, [(topic, 3)]) == [ErrorCode.NONE]
        wait_until(lambda: all(partition_state(cluster, topic, index)[0] == 1 for index in range(3)),
                   f"{topic} has 3 partitions with leaders")


def write_as_leader(data_dir: str, node_id: int, records: list[dict]) -> None:
    """Append records to a stopped single-voter node's metadata log, as its Raft leader would."""
    raft = DurableRaftNode.open(os.path.join(data_dir, METADATA_PARTITION_DIR), node_id, (node_id,),
                                RaftConfig(), now_ms=0)
    for now_ms in (0, ELECTION_MS):  # the first tick starts the election timer, the second runs it out
        raft.tick(now_ms)
    raft.propose(records)
    raft.persist(ELECTION_MS)
    raft.close()


def test_a_node_that_cannot_replay_a_committed_record_exits_naming_it(tmp_path):
    cluster = ClusterProcess(str(tmp_path), nodes=1)
    cluster.start()
    try:
        topic = create_topic(cluster, replication_factor=1)
        node = cluster.nodes[1]
        assert node.stop() == 0
        duplicate = {"type": "TopicRecord", "name": topic, "topic_id": str(uuid.uuid4())}
        write_as_leader(node.data_dir, 1, [duplicate, {"type": "ConfigRecord", "resource_type": TOPIC_RESOURCE,
                                                       "resource_name": topic, "name": "retention.ms", "value": "1"}])
        try:
            node.start()
        except BrokerNotReady:
            pass  # it stopped before its ready line: the exit status below tells why
        wait_until(lambda: node.process.poll() is not None, "the node exits", WAIT_S)
    finally:
        cluster.stop()
    assert node.process.returncode == METADATA_REPLAY_FAILED_EXIT_STATUS
    with open(node.stderr_path, encoding="utf-8") as stderr:
        logged = stderr.read()
    assert "failed to replay; stopping this node" in logged and duplicate["topic_id"] in logged, logged[-3000:]
    assert "AssertionError" in logged  # the exception, with its traceback
