"""Checks of CreateTopics, DeleteTopics and CreatePartitions apart from the request, as Kafka's
controller (ReplicationControlManager) makes them before it writes records: a topic named
twice in one request, and replica assignments that must fit the live brokers (here: this
node), else INVALID_REPLICATION_FACTOR / INVALID_REPLICATION_ASSIGNMENT.
"""
from __future__ import annotations

from collections import Counter

from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode, KafkaError

DEFAULT = -1  # num_partitions / replication_factor: the broker default (KIP-464)


def refuse_duplicate(counts: Counter, name_or_id) -> None:
    """A topic named (or, in DeleteTopics v6+, identified) twice in one request is refused both
    times, as Kafka's controller does: the second change would be decided from the state the
    first has not changed yet."""
    if counts[name_or_id] > 1:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"topic {name_or_id!r} appears more than once")


def partitions_and_replication(broker: BrokerNode, wanted) -> tuple[int, int]:
    """(num_partitions, replication_factor) of a CreatableTopic, checking a manual assignment."""
    if not wanted.assignments:
        return wanted.num_partitions, wanted.replication_factor
    if wanted.num_partitions != DEFAULT or wanted.replication_factor != DEFAULT:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         "with a replica assignment, num_partitions and replication_factor must be -1")
    indexes = sorted(assignment.partition_index for assignment in wanted.assignments)
    if indexes != list(range(len(indexes))):
        raise KafkaError(ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
                         f"partition indexes {indexes} are not 0..{len(indexes) - 1}")
    for assignment in wanted.assignments:
        check_replicas(broker, assignment.broker_ids)
    return len(indexes), len(wanted.assignments[0].broker_ids)


def check_new_partition_assignments(broker: BrokerNode, topic: str, count: int, assignments) -> None:
    """CreatePartitions: one assignment per new partition (if any are given), each fitting."""
    if assignments is None:
        return
    added = count - broker.topic(topic).partition_count
    if len(assignments) != added:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_ASSIGNMENT, f"{len(assignments)} assignments for {added} new partitions")
    for assignment in assignments:
        check_replicas(broker, assignment.broker_ids)


def check_replicas(broker: BrokerNode, broker_ids) -> None:
    if list(broker_ids) != [broker.config.node_id]:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
                         f"replicas {list(broker_ids)}: the only live broker is {broker.config.node_id}")
