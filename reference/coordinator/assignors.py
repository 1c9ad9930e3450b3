"""Server-side partition assignors for KIP-848 consumer groups: "uniform" and "range".

An assignor maps each member to the set of (topic id, partition) it should own, given what
each member subscribes to and how many partitions each topic has. Both are pure functions.

- uniform: spreads every subscribed partition so member counts differ by at most one among
  members that could take it, and keeps each member's previous target where that stays
  balanced (sticky), so a rebalance moves few partitions.
- range: per topic, the members subscribed to it (sorted by member id) take consecutive
  ranges of partitions, the first ones one extra when the count does not divide evenly;
  members with the same subscriptions get the same partition numbers of every topic
  (co-partitioning, like the client-side RangeAssignor).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass

TopicIdPartition = tuple[uuid.UUID, int]
Assignment = frozenset[TopicIdPartition]

UNIFORM, RANGE = "uniform", "range"
ASSIGNOR_NAMES = (UNIFORM, RANGE)  # group.consumer.assignors: the first is the default


@dataclass(frozen=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    partition_count: int


def assign(assignor: str, subscriptions: dict[str, set[uuid.UUID]], topics: dict[uuid.UUID, TopicMetadata],
           previous: dict[str, Assignment]) -> dict[str, Assignment]:
    """member id -> target assignment. `subscriptions` holds topic ids that exist."""
    assert assignor in ASSIGNOR_NAMES, assignor
    assert all(topic_id in topics for ids in subscriptions.values() for topic_id in ids)
    result = (_uniform if assignor == UNIFORM else _range)(subscriptions, topics, previous)
    owners: dict[TopicIdPartition, str] = {}
    for member_id, partitions in result.items():
        for partition in partitions:
            assert partition not in owners, f"{partition} given to {owners[partition]} and {member_id}"  # GRP-1
            assert partition[0] in subscriptions[member_id]
            owners[partition] = member_id
    return result


def _range(subscriptions, topics, previous) -> dict[str, Assignment]:
    assigned: dict[str, set[TopicIdPartition]] = {member_id: set() for member_id in subscriptions}
    for topic_id, topic in sorted(topics.items(), key=lambda item: item[1].name):
        members = sorted(member_id for member_id, ids in subscriptions.items() if topic_id in ids)
        if not members:
            continue
        share, extra = divmod(topic.partition_count, len(members))
        start = 0
        for index, member_id in enumerate(members):
            count = share + (1 if index < extra else 0)
            assigned[member_id].update((topic_id, p) for p in range(start, start + count))
            start += count
        assert start == topic.partition_count
    return {member_id: frozenset(partitions) for member_id, partitions in assigned.items()}


def _uniform(subscriptions, topics, previous) -> dict[str, Assignment]:
    all_partitions = sorted(
        ((topic_id, p) for topic_id in {t for ids in subscriptions.values() for t in ids}
         for p in range(topics[topic_id].partition_count)),
        key=lambda tp: (topics[tp[0]].name, tp[1]),
    )
    assigned: dict[str, set[TopicIdPartition]] = {member_id: set() for member_id in subscriptions}
    taken: set[TopicIdPartition] = set()
    # Keep the previous target where it is still valid, but never above the fair share.
    quota = -(-len(all_partitions) // len(subscriptions)) if subscriptions else 0
    for member_id in sorted(subscriptions):
        still_valid = [tp for tp in previous.get(member_id, ())
                       if tp[0] in subscriptions[member_id] and tp[1] < topics[tp[0]].partition_count]
        for partition in sorted(still_valid, key=lambda tp: (topics[tp[0]].name, tp[1])):
            if partition not in taken and len(assigned[member_id]) < quota:
                assigned[member_id].add(partition)
                taken.add(partition)
    for partition in all_partitions:
        if partition in taken:
            continue
        eligible = [m for m in subscriptions if partition[0] in subscriptions[m]]
        chosen = min(eligible, key=lambda m: (len(assigned[m]), m))
        assigned[chosen].add(partition)
        taken.add(partition)
    # Balance: move partitions from the fullest member to an eligible one with two fewer.
    moved = True
    while moved:
        moved = False
        for giver in sorted(assigned, key=lambda m: (-len(assigned[m]), m)):
            for partition in sorted(assigned[giver], key=lambda tp: (topics[tp[0]].name, tp[1])):
                receivers = [m for m in subscriptions
                             if partition[0] in subscriptions[m] and len(assigned[m]) + 1 < len(assigned[giver])]
                if receivers:
                    receiver = min(receivers, key=lambda m: (len(assigned[m]), m))
                    assigned[giver].remove(partition)
                    assigned[receiver].add(partition)
                    moved = True
                    break
            if moved:
                break
    return {member_id: frozenset(partitions) for member_id, partitions in assigned.items()}
