"""A group write that `__consumer_offsets` refuses leaves nothing behind: the coordinator changes
its state before the records are replicated, and when the acks=all write fails (here
NOT_ENOUGH_REPLICAS: one replica under min.insync.replicas=2, answered COORDINATOR_NOT_AVAILABLE)
that state is dropped and read again from the log, as Kafka's CoordinatorRuntime reverts to its
last committed state. Before, OffsetFetch returned the offset of a commit that had been refused,
and a KIP-848 member kept an assignment whose records were never written."""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from reference.process import BrokerProcess

TOPIC = "refused"
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group has no committed offset


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker whose writes with acks=all all fail: a single replica, min.insync.replicas=2."""
    with BrokerProcess(str(tmp_path_factory.mktemp("refusing") / "broker"),
                       overrides={"min.insync.replicas": "2"}) as started:
        admin = AdminClient({"bootstrap.servers": started.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(10)
        yield started


def test_a_refused_commit_is_not_what_offset_fetch_returns(broker):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "refused-commit", "log_level": 0})
    try:
        with pytest.raises(KafkaException) as refused:
            consumer.commit(offsets=[TopicPartition(TOPIC, 0, 5)], asynchronous=False)
        assert refused.value.args[0].name() == "COORDINATOR_NOT_AVAILABLE"
        [committed] = consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)
        assert committed.offset == NO_OFFSET
    finally:
        consumer.close()


def test_a_kip_848_member_whose_join_was_not_written_gets_no_assignment(broker):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "refused-join",
                         "group.protocol": "consumer", "log_level": 0})
    try:
        consumer.subscribe([TOPIC])
        for _ in range(15):  # 3 s: a heartbeat every few hundred ms, each refused and retried
            consumer.poll(0.2)
        assert consumer.assignment() == []
    finally:
        consumer.close()
