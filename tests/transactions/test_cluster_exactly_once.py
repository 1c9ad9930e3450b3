"""Exactly once on a real 3-node cluster (TXN-1, TXN-2): transactional consume-transform-produce
loops with confluent-kafka and kafka-python copy a topic while the transaction coordinator's
node, then a partition leader, is killed with kill -9 and restarted. The copy holds every input
record exactly once, read_committed never returns an aborted record, and a zombie producer
fenced by a newer instance of its transactional id gets nothing visible."""
from __future__ import annotations

import itertools
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka.errors import KafkaError as KafkaPythonError
from kafka.structs import OffsetAndMetadata

from conformance.wire import WireClient
from reference.config import BrokerConfig
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from reference.transaction.records import TRANSACTION_STATE_TOPIC, partition_for

PARTITIONS = 3
RECORDS = 120
RECORDS_PER_TRANSACTION = 10
WAIT_S = 60.0  # bounds on conditions; a loaded 2-core machine can take long
TRANSACTION_TIMEOUT_MS = 20_000
_names = itertools.count()


def wait_until(condition, what: str, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s}s: {what}")


def wait_healthy(cluster) -> None:
    """Every node running, registered, and back in the ISR of every partition it replicates:
    the state each test leaves for the next one in the module."""
    for node_id, node in cluster.nodes.items():
        if not node.running:
            cluster.start_node(node_id)

    def healthy() -> bool:
        metadata = cluster.metadata()
        return (metadata is not None and len(metadata.brokers) == len(cluster.nodes) and all(
            p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas)
            for topic in metadata.topics.values() for p in topic.partitions.values()))
    wait_until(healthy, "all nodes back in every ISR")


def create_topic(cluster, prefix: str) -> str:
    name = f"{prefix}-{next(_names)}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 3)])[name].result(WAIT_S)
    wait_until(lambda: all(cluster.leader_of(name, p) >= 0 for p in range(PARTITIONS)), f"{name} has leaders")
    return name


def fill(cluster, topic: str) -> set[bytes]:
    values = {f"record-{i:04d}".encode() for i in range(RECORDS)}
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "log_level": 0})
    for value in sorted(values):
        producer.produce(topic, value, partition=int(value[-4:]) % PARTITIONS)
    assert producer.flush(WAIT_S) == 0
    return values


def read_committed(cluster, topic: str, expected: int) -> list[bytes]:
    """Every value a read_committed consumer returns from the start of `topic` up to its last
    stable offsets, once at least `expected` were returned."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"reader-{next(_names)}",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False, "log_level": 0})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values, at_end = [], set()
    deadline = time.monotonic() + WAIT_S
    while not (len(values) >= expected and len(at_end) == PARTITIONS) and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error() is None:
            values.append(message.value())
            at_end.discard(message.partition())
        elif message.error().code() == KafkaError._PARTITION_EOF:
            at_end.add(message.partition())
    consumer.close()
    return values


def coordinator_of(cluster, transactional_id: str) -> int:
    partition = partition_for(transactional_id, BrokerConfig().transaction_state_log_num_partitions)
    return wait_until(lambda: max(cluster.leader_of(TRANSACTION_STATE_TOPIC, partition), 0),
                      f"a coordinator for {transactional_id}")


# ---------------------------------------------------------------------------------------------
# confluent-kafka (librdkafka)


def copy_with_confluent(cluster, source: str, sink: str, transactional_id: str, on_progress) -> int:
    """Copy `source` to `sink` in transactions of RECORDS_PER_TRANSACTION, committing the
    consumer's offsets in each; an aborted transaction rewinds to the committed offsets.
    `on_progress(copied)` runs between transactions. Returns how many transactions aborted."""
    group = f"copier-{transactional_id}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest", "log_level": 0})
    assignment = [TopicPartition(source, p) for p in range(PARTITIONS)]
    consumer.assign(assignment)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, "log_level": 0})
    producer.init_transactions(WAIT_S)
    copied, aborted = 0, 0
    deadline = time.monotonic() + 3 * WAIT_S
    while copied < RECORDS and time.monotonic() < deadline:
        messages = [m for m in consumer.consume(RECORDS_PER_TRANSACTION, 0.5) if m.error() is None]
        if not messages:
            continue
        try:
            producer.begin_transaction()
            for message in messages:
                producer.produce(sink, message.value(), partition=message.partition())
            producer.send_offsets_to_transaction(consumer.position(assignment), consumer.consumer_group_metadata(),
                                                 WAIT_S)
            _commit(producer)
            copied += len(messages)
        except KafkaException as e:
            aborted += 1
            if not e.args[0].txn_requires_abort():
                raise
            producer.abort_transaction(WAIT_S)
            for committed in consumer.committed(assignment, WAIT_S):  # rewind to the last committed transaction
                consumer.seek(TopicPartition(source, committed.partition, max(committed.offset, 0)))
        on_progress(copied)
    consumer.close()
    return aborted


def _commit(producer: Producer) -> None:
    """commit_transaction, retried while librdkafka says the outcome is not known yet."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            producer.commit_transaction(WAIT_S)
            return
        except KafkaException as e:
            if not e.args[0].retriable() or time.monotonic() > deadline:
                raise


def test_confluent_copies_exactly_once_while_the_coordinator_is_killed(cluster):
    source, sink = create_topic(cluster, "eos-in"), create_topic(cluster, "eos-out")
    values = fill(cluster, source)
    transactional_id = "eos-confluent"
    killed: list[int] = []

    def kill_then_restart_the_coordinator(copied: int) -> None:
        if copied >= RECORDS // 4 and not killed:
            killed.append(coordinator_of(cluster, transactional_id))
            cluster.kill(killed[0])
        elif copied >= RECORDS // 2 and killed and not cluster.nodes[killed[0]].running:
            cluster.start_node(killed[0])

    try:
        copy_with_confluent(cluster, source, sink, transactional_id, kill_then_restart_the_coordinator)
        assert killed and cluster.nodes[killed[0]].running, "the coordinator was killed and restarted during the copy"
    finally:
        wait_healthy(cluster)
    copy = read_committed(cluster, sink, len(values))
    assert sorted(copy) == sorted(values), "every input record exactly once in the copy (TXN-1)"


# ---------------------------------------------------------------------------------------------
# kafka-python


def test_kafka_python_copies_exactly_once_while_a_partition_leader_is_killed(cluster):
    source, sink = create_topic(cluster, "eos-in"), create_topic(cluster, "eos-out")
    values = fill(cluster, source)
    victim = cluster.leader_of(sink, 0)
    try:
        copy_with_kafka_python(cluster, source, sink, victim)
    finally:
        wait_healthy(cluster)
    copy = read_committed(cluster, sink, len(values))
    assert sorted(copy) == sorted(values), "every input record exactly once in the copy (TXN-1)"


def copy_with_kafka_python(cluster, source: str, sink: str, victim: int) -> None:
    """The same loop with kafka-python; `victim` is killed a quarter of the way, restarted halfway."""
    group = "copier-kafka-python"
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False,
                             isolation_level="read_committed", auto_offset_reset="earliest")
    assignment = [KafkaPythonTopicPartition(source, p) for p in range(PARTITIONS)]
    consumer.assign(assignment)
    # commit_transaction waits for every send: bound each one (kafka-python's default is 120 s).
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id="eos-kafka-python",
                             transaction_timeout_ms=TRANSACTION_TIMEOUT_MS, delivery_timeout_ms=WAIT_S * 1000 // 2,
                             request_timeout_ms=10_000)
    producer.init_transactions()
    copied, killed = 0, False
    deadline = time.monotonic() + 3 * WAIT_S
    while copied < RECORDS and time.monotonic() < deadline:
        if copied >= RECORDS // 4 and not killed:
            cluster.kill(victim)
            killed = True
        elif copied >= RECORDS // 2 and not cluster.nodes[victim].running:
            cluster.start_node(victim)
        batch = [m for records in consumer.poll(500, max_records=RECORDS_PER_TRANSACTION).values() for m in records]
        if not batch:
            continue
        try:
            producer.begin_transaction()
            for message in batch:
                producer.send(sink, message.value, partition=message.partition)
            offsets = {tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in assignment}
            producer.send_offsets_to_transaction(offsets, group)
            producer.commit_transaction()
            copied += len(batch)
        except KafkaPythonError:
            producer.abort_transaction()
            for tp in assignment:  # rewind to the last committed transaction
                consumer.seek(tp, consumer.committed(tp) or 0)
    consumer.close()
    producer.close()
    assert killed and cluster.nodes[victim].running, "the leader was killed and restarted during the copy"


# ---------------------------------------------------------------------------------------------
# Aborts and zombies


def test_read_committed_never_returns_an_aborted_record(cluster):
    topic = create_topic(cluster, "aborted")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "aborter", "log_level": 0})
    producer.init_transactions(WAIT_S)
    committed = []
    for n in range(6):
        producer.begin_transaction()
        values = [f"{'kept' if n % 2 else 'aborted'}-{n}-{p}".encode() for p in range(PARTITIONS)]
        for partition, value in enumerate(values):
            producer.produce(topic, value, partition=partition)
        if n % 2:
            producer.commit_transaction(WAIT_S)
            committed += values
        else:
            producer.abort_transaction(WAIT_S)
    seen = read_committed(cluster, topic, len(committed))
    assert sorted(seen) == sorted(committed), "read_committed returns the committed records only (TXN-2)"


def test_a_fenced_zombie_gets_nothing_visible(cluster):
    topic = create_topic(cluster, "zombie")
    config = {"bootstrap.servers": cluster.bootstrap, "transactional.id": "zombie", "log_level": 0}
    zombie = Producer(config)
    zombie.init_transactions(WAIT_S)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie-before-fence", partition=0)
    assert zombie.flush(WAIT_S) == 0
    successor = Producer(config)
    successor.init_transactions(WAIT_S)  # bumps the epoch: the zombie's open transaction is aborted
    successor.begin_transaction()
    successor.produce(topic, b"successor", partition=0)
    successor.commit_transaction(WAIT_S)
    with pytest.raises(KafkaException) as fenced:
        zombie.produce(topic, b"zombie-after-fence", partition=1)
        zombie.flush(WAIT_S)
        zombie.commit_transaction(WAIT_S)
    assert fenced.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                           KafkaError.INVALID_PRODUCER_EPOCH), fenced.value
    assert read_committed(cluster, topic, 1) == [b"successor"], "nothing the zombie sent is visible"


def test_a_leader_refuses_markers_from_a_replaced_coordinator(cluster):
    """WriteTxnMarkers straight to a partition's leader: once a marker from coordinator epoch 7
    is written, one from epoch 6 (a coordinator since replaced) is TRANSACTION_COORDINATOR_FENCED;
    a node that does not lead the partition answers NOT_LEADER_OR_FOLLOWER."""
    topic = create_topic(cluster, "markers")
    leader = cluster.leader_of(topic, 0)
    producer_id = 1 << 40  # no producer has it: only these markers are written for it

    def write_marker(node_id: int, coordinator_epoch: int) -> ErrorCode:
        with WireClient(cluster.addresses[node_id]) as wire:
            response = wire.request(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
                "producer_id": producer_id, "producer_epoch": 0, "transaction_result": False,
                "coordinator_epoch": coordinator_epoch, "topics": [{"name": topic, "partition_indexes": [0]}]}]})
        (marker,) = response.markers
        (topic_result,) = marker.topics
        (partition,) = topic_result.partitions
        return ErrorCode(partition.error_code)

    assert write_marker(leader, 7) == ErrorCode.NONE
    assert write_marker(leader, 6) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    follower = next(node_id for node_id in cluster.nodes if node_id != leader)
    assert write_marker(follower, 8) == ErrorCode.NOT_LEADER_OR_FOLLOWER
