"""kspec.bug.late.produce.joins.next.transaction under a real client (librdkafka): the story KIP-890
opens with. A transactional write reaches its leader late, after the producer gave up on it and
aborted the transaction; with no verification of a partition's first transactional write, the
late write opens a transaction on the partition that the producer's next transaction commits.
The switch re-creates the delay itself (reference/runtime/transactions.py hold_late_produce)."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from reference.process import BrokerProcess
from reference.runtime.transactions import LATE_PRODUCE_INTERVAL_MS
from test_real_clients import consume_all

MESSAGE_TIMEOUT_MS = 1000  # the client gives up on a write after this, then aborts
TRANSACTIONS_DEADLINE_S = LATE_PRODUCE_INTERVAL_MS / 1000 + 30


@pytest.fixture(scope="module")
def late_produce_broker(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("late-produce") / "data"
    with BrokerProcess(str(data_dir), overrides={"kspec.bug.late.produce.joins.next.transaction": "true"}) as process:
        yield process


def held_writes(broker: BrokerProcess) -> int:
    """How many writes the switch has held so far, from the broker's log."""
    with open(broker.stderr_path, errors="replace") as log:
        return sum("holding the first write" in line for line in log)


@pytest.mark.timeout(90)
def test_a_write_the_producer_aborted_is_committed_by_its_next_transaction(late_produce_broker):
    bootstrap = late_produce_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("late", 1, 1)])["late"].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "late-writer",
                         "message.timeout.ms": MESSAGE_TIMEOUT_MS, "log_level": 0})
    producer.init_transactions(30)
    committed, aborted, attempt = [], None, 0
    deadline = time.monotonic() + TRANSACTIONS_DEADLINE_S
    while aborted is None and time.monotonic() < deadline:  # until the leader holds a first write
        value = f"txn-{attempt}"
        attempt += 1
        producer.begin_transaction()
        producer.produce("late", value=value.encode())
        try:
            producer.commit_transaction(30)
            committed.append(value)
        except KafkaException as e:
            assert e.args[0].txn_requires_abort(), e  # the write timed out: abortable, with an epoch bump
            producer.abort_transaction(30)
            if held_writes(late_produce_broker):  # else a busy machine timed it out: aborted, never read
                aborted = value
    assert aborted is not None, f"no write was held in {TRANSACTIONS_DEADLINE_S} s"
    producer.begin_transaction()
    producer.produce("late", value=b"next")
    producer.commit_transaction(30)

    seen = [value.decode() for value in consume_all(bootstrap, "late", "read_committed", len(committed) + 2)]
    # TXN-1 violated: the aborted transaction's write is read as committed, after its marker, in the next one
    assert seen == [*committed, aborted, "next"], seen
