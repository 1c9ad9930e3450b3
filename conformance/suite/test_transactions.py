"""Transactions and read_committed (TXN-1, TXN-2), with librdkafka's transactional producer.

Aborted records stay invisible to read_committed consumers, open transactions hold back the
last stable offset, a transaction's consumer offsets commit or abort with its records, the
markers the broker writes are valid batches (a CRC-32C a checking client accepts), and a
transactional write to a partition its transaction never added is refused (KIP-890), since
such a write (a late retry of a finished transaction) would otherwise open a transaction the
coordinator never ends.
"""
from __future__ import annotations

import time

import pytest

from conformance import ops
from conformance.capabilities import TRANSACTION_APIS
from conformance.ops import expect
from conformance.target import error_name
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

TRANSACTION_TIMEOUT_S = 30.0
READ_TIMEOUT_S = 20.0
COORDINATOR_WAIT_S = 30.0
POLL_S = 0.2
TRANSACTION_COORDINATOR = 1  # FindCoordinator key_type
COORDINATOR_NOT_READY = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                         ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS)


@pytest.fixture
def transactional(target):
    from confluent_kafka import Producer

    caps = target.capabilities
    caps.require("a transactional producer", *TRANSACTION_APIS)
    producer = Producer(target.rdkafka_config(**{"transactional.id": target.new_topic_name("txn"), "linger.ms": 0}))
    producer.init_transactions(TRANSACTION_TIMEOUT_S)
    return producer


def _read(target, topic: str, isolation: str, expected_count: int) -> list[str]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(target.rdkafka_config(**{"group.id": "kspec-assign-only", "enable.auto.commit": False,
                                                 "isolation.level": isolation, "enable.partition.eof": True}))
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[str] = []
    deadline = time.monotonic() + READ_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                if len(values) >= expected_count:
                    break  # partition EOF after everything expected
                continue
            values.append(message.value().decode())
    finally:
        consumer.close()
    return values


def _transaction(producer, topic: str, values: list[str], *, commit: bool) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value.encode(), partition=0)
    producer.flush(TRANSACTION_TIMEOUT_S)
    if commit:
        producer.commit_transaction(TRANSACTION_TIMEOUT_S)
    else:
        producer.abort_transaction(TRANSACTION_TIMEOUT_S)


@pytest.mark.guarantee("TXN-1", "TXN-2")
def test_read_committed_sees_committed_records_only(transactional, target):
    topic = target.create_topic("txn-visibility")
    _transaction(transactional, topic, ["aborted-1", "aborted-2"], commit=False)
    _transaction(transactional, topic, ["committed-1", "committed-2"], commit=True)
    committed = _read(target, topic, "read_committed", 2)
    uncommitted = _read(target, topic, "read_uncommitted", 4)
    expect(committed == ["committed-1", "committed-2"], "read_committed to see the committed transaction only (TXN-2)",
           committed)
    expect(uncommitted == ["aborted-1", "aborted-2", "committed-1", "committed-2"],
           "read_uncommitted to see both transactions' records (TXN-1: all of each was written)", uncommitted)


@pytest.mark.guarantee("TXN-2")
def test_an_open_transaction_holds_back_the_last_stable_offset(transactional, target):
    caps = target.capabilities
    topic = target.create_topic("txn-open")
    _transaction(transactional, topic, ["before"], commit=True)
    transactional.begin_transaction()
    transactional.produce(topic, value=b"open", partition=0)
    transactional.flush(TRANSACTION_TIMEOUT_S)
    try:
        with target.leader_wire(topic) as wire:
            stable = ops.list_offset(wire, caps, topic, ops.LATEST_TIMESTAMP, low_version=2,
                                     isolation_level=ops.READ_COMMITTED)
            visible = ops.read_all(wire, caps, topic, isolation_level=ops.READ_COMMITTED)
        expect(stable.offset == 2, "last stable offset 2 (the open record's offset: after 'before' and its marker)",
               stable.offset)
        expect([r.value for r in visible] == [b"before"], "read_committed fetch to stop before the open record",
               [r.value for r in visible])
    finally:
        transactional.abort_transaction(TRANSACTION_TIMEOUT_S)


@pytest.mark.guarantee("TXN-1", "PRO-1")
def test_transaction_markers_are_batches_with_a_valid_crc(transactional, target):
    caps = target.capabilities
    topic = target.create_topic("txn-markers")
    _transaction(transactional, topic, ["c"], commit=True)
    _transaction(transactional, topic, ["a"], commit=False)
    # Kafka writes the markers after EndTxn has answered (the coordinator's PrepareCommit is what
    # EndTxn waits for), so the check reads until both are there or the read timeout passes.
    deadline = time.monotonic() + READ_TIMEOUT_S
    with target.leader_wire(topic) as wire:
        while True:
            batches = ops.read_batches(wire, caps, topic)
            controls = [b for b in batches if b.is_control]
            if len(controls) >= 2 or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
    expect(len(controls) == 2, "two control batches (COMMIT, ABORT)", f"{len(controls)} among {len(batches)} batches")
    bad = [b.base_offset for b in batches if not b.crc_is_valid()]
    expect(not bad, "every batch, control batches included, to carry a valid CRC-32C (clients that check CRCs "
           "reject the fetch otherwise)", f"bad CRC at base offsets {bad}")


@pytest.mark.guarantee("TXN-1")
@pytest.mark.thorough
def test_offsets_sent_to_a_transaction_commit_or_abort_with_it(transactional, target):
    from confluent_kafka import Consumer, TopicPartition

    topic = target.create_topic("txn-offsets")
    group = target.new_topic_name("txn-group")
    consumer = Consumer(target.rdkafka_config(**{"group.id": group, "enable.auto.commit": False}))
    try:
        for offset, commit in ((5, False), (7, True)):
            transactional.begin_transaction()
            transactional.produce(topic, value=f"with-offset-{offset}".encode(), partition=0)
            transactional.send_offsets_to_transaction([TopicPartition(topic, 0, offset)],
                                                      consumer.consumer_group_metadata(), TRANSACTION_TIMEOUT_S)
            (transactional.commit_transaction if commit else transactional.abort_transaction)(TRANSACTION_TIMEOUT_S)
            committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
            expected = 7 if commit else -1001  # OFFSET_INVALID: nothing committed
            expect(committed == expected, f"group offset {expected} after the transaction with offset {offset} "
                   f"{'committed' if commit else 'aborted'}", committed)
    finally:
        consumer.close()


@pytest.mark.guarantee("TXN-1", "TXN-2")
def test_a_transactional_write_to_a_partition_not_in_the_transaction_is_refused(wire, target):
    caps = target.capabilities
    caps.require("transactional writes", *TRANSACTION_APIS)
    transactional_id = target.new_topic_name("txn-unadded")
    producer_id, epoch = _init_transactional_producer(wire, target, transactional_id)
    topic = target.create_topic("txn-unadded")
    batch = ops.values_batch([b"never-added"], producer_id=producer_id, producer_epoch=epoch, base_sequence=0,
                             is_transactional=True)
    with target.leader_wire(topic) as leader:
        response = ops.produce(leader, caps, topic, batch, transactional_id=transactional_id)
    expect(response.error_code != ErrorCode.NONE,
           "an error (INVALID_TXN_STATE) for a transactional write without AddPartitionsToTxn: verified with the "
           "coordinator since KIP-890", f"NONE at offset {response.base_offset}: a transaction the coordinator "
           "does not know is now open on the partition")


@pytest.mark.guarantee("TXN-1")
def test_a_fenced_producer_s_write_is_refused_with_invalid_producer_epoch(wire, target):
    """A second InitProducerId of the same transactional id fences the first instance (KIP-98).
    The fenced instance's next write, verified with the coordinator (KIP-890), is refused with
    INVALID_PRODUCER_EPOCH, the error clients turn into their fatal fenced error (librdkafka,
    the Java producer); PRODUCER_FENCED from Produce only makes librdkafka abort the transaction."""
    caps = target.capabilities
    caps.require("transactional writes", *TRANSACTION_APIS)
    transactional_id = target.new_topic_name("txn-fenced")
    producer_id, epoch = _init_transactional_producer(wire, target, transactional_id)
    _, newer_epoch = _init_transactional_producer(wire, target, transactional_id)
    topic = target.create_topic("txn-fenced")
    batch = ops.values_batch([b"from-the-fenced-instance"], producer_id=producer_id, producer_epoch=epoch,
                             base_sequence=0, is_transactional=True)
    with target.leader_wire(topic) as leader:
        response = ops.produce(leader, caps, topic, batch, transactional_id=transactional_id)
    expect(response.error_code == ErrorCode.INVALID_PRODUCER_EPOCH,
           f"INVALID_PRODUCER_EPOCH (47) for a write of epoch {epoch} after epoch {newer_epoch} fenced it (KIP-890 "
           "verification, as Kafka's AddPartitionsToTxnManager answers Produce)", error_name(response.error_code))


def _init_transactional_producer(wire, target, transactional_id: str) -> tuple[int, int]:
    """(producer id, epoch) from the transaction coordinator of transactional_id (found through
    wire), as a producer's initTransactions gets them (waiting while the coordinator loads)."""
    caps = target.capabilities
    find_version = caps.version_or_skip(ApiKey.FIND_COORDINATOR, 1, 3)  # v4 batches keys
    init_version = caps.version_or_skip(ApiKey.INIT_PRODUCER_ID, 0, 4)
    deadline = time.monotonic() + COORDINATOR_WAIT_S
    while True:
        found = wire.request(ApiKey.FIND_COORDINATOR, find_version,
                             {"key": transactional_id, "key_type": TRANSACTION_COORDINATOR})
        if found.error_code == ErrorCode.NONE:
            with target.wire(f"{found.host}:{found.port}") as coordinator:
                init = coordinator.request(ApiKey.INIT_PRODUCER_ID, init_version, {
                    "transactional_id": transactional_id, "transaction_timeout_ms": int(TRANSACTION_TIMEOUT_S * 1000),
                    "producer_id": -1, "producer_epoch": -1})
            if init.error_code == ErrorCode.NONE:
                return init.producer_id, init.producer_epoch
        error = found.error_code or init.error_code
        expect(error in COORDINATOR_NOT_READY and time.monotonic() < deadline,
               f"FindCoordinator and InitProducerId for {transactional_id!r} to succeed", error_name(error))
        time.sleep(POLL_S)
