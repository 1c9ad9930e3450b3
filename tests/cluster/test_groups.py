"""Consumer groups on a real 3-node cluster: `__consumer_offsets` is replicated, the group's
coordinator is the leader of its offsets partition, and when that node is killed (kill -9)
the group moves to the new leader and resumes at its committed offsets (GRP-2)."""
from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

from reference.config import BrokerConfig
from reference.coordinator.records import CONSUMER_OFFSETS_TOPIC, partition_for

from .conftest import WAIT_S, create_topic, partition_state, produce_acked, wait_until

PARTITIONS = 3
RECORDS_PER_PHASE = 60
CONSUMERS = 3


def consumer(cluster, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                     "log_level": 0})


def consume_until(consumers, seen: list, committed: dict, wanted: set, timeout_s: float) -> None:
    """Poll every consumer in turn, committing each record after it is seen, until `wanted` is seen."""
    deadline = time.monotonic() + timeout_s
    while not wanted <= {value for _, _, value in seen} and time.monotonic() < deadline:
        for client in consumers:
            message = client.poll(0.05)
            if message is None or message.error() is not None:
                continue
            seen.append((message.partition(), message.offset(), message.value()))
            try:
                client.commit(message, asynchronous=False)
                committed[message.partition()] = max(committed.get(message.partition(), 0), message.offset() + 1)
            except KafkaException:
                pass  # e.g. NOT_COORDINATOR during the move, or a rebalance: redelivered from the last commit


def test_a_group_resumes_at_its_committed_offsets_after_its_coordinator_is_killed(start_cluster):
    cluster = start_cluster()
    topic = create_topic(cluster, partitions=PARTITIONS)
    group = "grp-2"
    before = {f"before-{i:03d}".encode() for i in range(RECORDS_PER_PHASE)}
    for partition in range(PARTITIONS):
        produce_acked(cluster, topic, sorted(before)[partition::PARTITIONS], partition)
    consumers = [consumer(cluster, group) for _ in range(CONSUMERS)]
    for client in consumers:
        client.subscribe([topic])
    seen: list[tuple[int, int, bytes]] = []
    committed: dict[int, int] = {}
    consume_until(consumers, seen, committed, before, WAIT_S)
    assert before <= {value for _, _, value in seen}

    offsets_partition = partition_for(group, BrokerConfig().offsets_topic_num_partitions)
    coordinator, replicas, _ = partition_state(cluster, CONSUMER_OFFSETS_TOPIC, offsets_partition)
    assert len(replicas) == 3 and coordinator in replicas, "the offsets topic is replicated on every node"
    committed_at_kill = dict(committed)
    seen_at_kill = len(seen)
    cluster.kill(coordinator)

    after = {f"after-{i:03d}".encode() for i in range(RECORDS_PER_PHASE)}
    for partition in range(PARTITIONS):
        assert len(produce_acked(cluster, topic, sorted(after)[partition::PARTITIONS], partition)) == len(after) // 3
    consume_until(consumers, seen, committed, after, 2 * WAIT_S)
    # A leader id of -1 is truthy, and the metadata may still name the killed coordinator: wait for
    # another one, and for the group's coordinator as described to be it (the admin client may
    # answer from metadata older than ours).
    new_coordinator = wait_until(
        lambda: (leader := partition_state(cluster, CONSUMER_OFFSETS_TOPIC, offsets_partition)[0])
        not in (-1, coordinator) and leader, "the offsets partition has a new leader")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    described = wait_until(lambda: (found := admin.describe_consumer_groups([group])[group].result(WAIT_S))
                           .coordinator.id == new_coordinator and found, "the group's coordinator is the new leader")
    for client in consumers:
        client.close()

    assert new_coordinator != coordinator and described.coordinator.id == new_coordinator
    assert before | after <= {value for _, _, value in seen}, "GRP-2: no record lost"
    delivered_before_kill = {(partition, offset) for partition, offset, _ in seen[:seen_at_kill]}
    redelivered = [(partition, offset) for partition, offset, _ in seen[seen_at_kill:]
                   if (partition, offset) in delivered_before_kill]
    assert all(offset >= committed_at_kill.get(partition, 0) for partition, offset in redelivered), (
        "GRP-2: duplicates only after the last commit", redelivered, committed_at_kill)
