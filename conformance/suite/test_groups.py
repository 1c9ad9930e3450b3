"""Consumer groups, classic and KIP-848, and committed offsets (GRP-1, GRP-2, ORD-3), with librdkafka.

Two members of one group share a topic's partitions with no partition owned twice; a
committed offset is what the next member of the group starts from, and what OffsetFetch
(Consumer.committed) reports.
"""
from __future__ import annotations

import time

import pytest

from conformance.capabilities import CLASSIC_GROUP_APIS
from conformance.clients import Record, driver
from conformance.ops import expect

PARTITION_COUNT = 4
ASSIGNMENT_TIMEOUT_S = 60.0
POLL_S = 0.2
PROTOCOLS = ("classic", "consumer")


def _require_protocol(target, protocol: str) -> None:
    caps = target.capabilities
    if protocol == "classic" and not caps.offers_classic_groups:
        caps.require("a classic consumer group", *CLASSIC_GROUP_APIS)
    if protocol == "consumer" and not caps.offers_consumer_groups:
        pytest.skip("KIP-848 consumer groups need ConsumerGroupHeartbeat, which the broker does not offer")


def _consumer(target, group: str, protocol: str, **extra):
    from confluent_kafka import Consumer

    config = target.rdkafka_config(**{"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                      "group.protocol": protocol, **extra})
    if protocol == "classic":
        config["session.timeout.ms"] = 10_000
    return Consumer(config)


def _owned(consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


@pytest.mark.guarantee("GRP-1")
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_two_members_split_the_partitions_without_overlap(protocol, target):
    _require_protocol(target, protocol)
    topic = target.create_topic(f"group-split-{protocol}", partitions=PARTITION_COUNT)
    group = target.new_topic_name(f"group-{protocol}")
    members = [_consumer(target, group, protocol) for _ in range(2)]
    try:
        for member in members:
            member.subscribe([topic])
        deadline = time.monotonic() + ASSIGNMENT_TIMEOUT_S
        owned: list[set[int]] = [set(), set()]
        while time.monotonic() < deadline:
            for i, member in enumerate(members):
                member.poll(POLL_S)
                owned[i] = _owned(member)
            expect(not (owned[0] & owned[1]), "no partition owned by both members at once (GRP-1)",
                   f"member 0 owns {sorted(owned[0])}, member 1 owns {sorted(owned[1])}")
            if owned[0] and owned[1] and owned[0] | owned[1] == set(range(PARTITION_COUNT)):
                break
        expect(owned[0] and owned[1] and owned[0] | owned[1] == set(range(PARTITION_COUNT)),
               f"both members assigned, together all {PARTITION_COUNT} partitions, within {ASSIGNMENT_TIMEOUT_S:.0f} s",
               f"member 0 {sorted(owned[0])}, member 1 {sorted(owned[1])}")
    finally:
        for member in members:
            member.close()


@pytest.mark.guarantee("GRP-2", "ORD-3")
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_committed_offset_is_where_the_next_member_starts(protocol, target):
    from confluent_kafka import TopicPartition

    _require_protocol(target, protocol)
    topic = target.create_topic(f"group-commit-{protocol}")
    driver("confluent-kafka").produce(target.bootstrap, topic,
                                      [Record(0, None, f"v{i}") for i in range(10)], extra=target.properties)
    group = target.new_topic_name(f"commit-{protocol}")
    first = _consumer(target, group, protocol)
    try:
        first.subscribe([topic])
        read = _read(first, 4)
        expect([m.offset() for m in read] == [0, 1, 2, 3], "offsets 0..3 first", [m.offset() for m in read])
        first.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
        committed = first.committed([TopicPartition(topic, 0)], timeout=10)[0]
        expect(committed.offset == 4 and committed.error is None, "OffsetFetch to report the committed offset 4",
               f"offset {committed.offset}, error {committed.error}")
    finally:
        first.close()
    second = _consumer(target, group, protocol)
    try:
        second.subscribe([topic])
        resumed = _read(second, 6)
        expect([m.offset() for m in resumed] == list(range(4, 10)),
               "the next member to start at the committed offset 4 and read 4..9 in order",
               [m.offset() for m in resumed])
    finally:
        second.close()


def _read(consumer, count: int) -> list:
    messages = []
    deadline = time.monotonic() + ASSIGNMENT_TIMEOUT_S
    while len(messages) < count and time.monotonic() < deadline:
        message = consumer.poll(POLL_S)
        if message is not None and message.error() is None:
            messages.append(message)
    return messages
