"""Topics on a two-node cluster whose default.replication.factor is 3: the default is capped at
the live brokers, an explicit factor above them is refused with a clear error, and records
deleted on a leader (DeleteRecords) stay deleted when its follower takes over."""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from reference.process import ClusterProcess
from reference.storage.log import LOG_START_OFFSET_FILE

from .conftest import FAST_FAILOVER, WAIT_S, partition_state, produce_acked, wait_until


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    cluster = ClusterProcess(str(tmp_path_factory.mktemp("two-nodes")), 2,
                             overrides={**FAST_FAILOVER, "default.replication.factor": "3"})
    cluster.start()
    yield cluster
    cluster.stop()


def create(cluster: ClusterProcess, topic: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([topic])[topic.topic].result(WAIT_S)


def test_the_default_replication_factor_is_capped_at_the_live_brokers(two_nodes):
    create(two_nodes, NewTopic("default-factor", 1))
    leader, replicas, isr = wait_until(lambda: (state := partition_state(two_nodes, "default-factor"))[0] >= 0
                                       and state, "a leader")
    assert replicas == [1, 2] and isr == [1, 2]


def test_a_replication_factor_above_the_live_brokers_is_refused_with_the_reason(two_nodes):
    with pytest.raises(Exception) as refused:
        create(two_nodes, NewTopic("too-many-replicas", 1, 3))
    error = refused.value.args[0]
    assert error.name() == "INVALID_REPLICATION_FACTOR"
    assert "needs 3 live brokers; 2 are registered and unfenced" in error.str()


def test_records_deleted_on_the_leader_stay_deleted_after_its_follower_takes_over(two_nodes):
    create(two_nodes, NewTopic("deleted-records", 1, 2))
    wait_until(lambda: partition_state(two_nodes, "deleted-records")[2] == [1, 2], "both replicas in the ISR")
    assert len(produce_acked(two_nodes, "deleted-records", [b"%d" % i for i in range(10)])) == 10
    admin = AdminClient({"bootstrap.servers": two_nodes.bootstrap})
    deleted = admin.delete_records([TopicPartition("deleted-records", 0, 6)])
    assert next(iter(deleted.values())).result(WAIT_S).low_watermark == 6
    leader = partition_state(two_nodes, "deleted-records")[0]
    follower = 3 - leader
    try:
        wait_until(lambda: _watermarks(two_nodes.bootstrap) == (6, 10), "the leader's low watermark")
        wait_until(lambda: _log_start_offset_of(two_nodes, follower) == 6, "the follower's log start offset")
        two_nodes.stop_node(leader)                  # controlled shutdown: the follower leads
        wait_until(lambda: partition_state(two_nodes, "deleted-records")[0] == follower, "the follower leads")
        wait_until(lambda: _watermarks(two_nodes.bootstrap) == (6, 10), "the new leader's low watermark")
    finally:
        two_nodes.start_node(leader)


def _watermarks(bootstrap: str) -> tuple[int, int] | None:
    """ListOffsets earliest and latest, asked by a new client each time, so the answer comes
    from the leader Metadata names now. (With one client kept across the leader's stop, a
    loaded CI run saw no (6, 10) for 60 s after Metadata named the new leader; the client's
    cached leader is its own business, not the broker's.)"""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "low-watermark", "log_level": 0})
    try:
        return consumer.get_watermark_offsets(TopicPartition("deleted-records", 0), timeout=2)
    except KafkaException:
        return None
    finally:
        consumer.close()


def _log_start_offset_of(cluster: ClusterProcess, node_id: int) -> int:
    """The follower's log start offset as its `log-start-offset` file holds it (0 before any move)."""
    try:
        with open(f"{cluster.nodes[node_id].data_dir}/deleted-records-0/{LOG_START_OFFSET_FILE}") as f:
            return int(f.read())
    except FileNotFoundError:
        return 0
