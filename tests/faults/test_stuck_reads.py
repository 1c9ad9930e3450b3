"""The final reads' evidence of an open transaction (faults/stuck_reads.py), against a real broker:
a transactional producer that never ends its transaction holds the partition's last stable
offset, and a record committed after it is stored but unreadable at read_committed. The
stuck-partitions op names the offset and the record there, and the checker turns it into a
hanging-transaction (TXN-1), the committed record behind it hidden rather than lost."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from faults import stuck_reads
from faults.recorder import Recorder
from faults.workload import decode_long, encode_long
from reference.process import BrokerProcess
from spark_validation import hanging
from spark_validation.options import RunOptions
from spec.history import Record, Send

TOPIC = "t0"
OPEN_VALUE, COMMITTED_VALUE = 1, 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(str(tmp_path_factory.mktemp("stuck") / "data")) as process:
        yield process


def transactional(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 120_000, "log_level": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    return producer


@pytest.mark.timeout(60)
@pytest.mark.guarantee("TXN-1")
def test_a_transaction_left_open_is_recorded_where_the_reads_stuck_and_named_a_hanging_transaction(broker, tmp_path):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)
    left_open = transactional(broker.bootstrap, "left-open")
    left_open.produce(TOPIC, key=encode_long(0), value=encode_long(OPEN_VALUE), partition=0)
    left_open.flush(30)  # stored at offset 0; the transaction is never ended
    committer = transactional(broker.bootstrap, "committer")
    committer.produce(TOPIC, key=encode_long(0), value=encode_long(COMMITTED_VALUE), partition=0)
    committer.commit_transaction(30)  # offset 1, its marker at 2: high watermark 3

    recorder = Recorder(tmp_path)
    sender = recorder.invoke(7, "txn", mops=[Send(Record(TOPIC, 0, 0, OPEN_VALUE))])
    recorder.complete(sender, "info", mops=[Send(Record(TOPIC, 0, 0, OPEN_VALUE))])
    stuck_reads.record(broker.bootstrap, recorder, 9, [(TOPIC, 0, 0, 3)], {}, {"log_level": 0}, decode_long)
    history = recorder.close()

    [op] = [r for r in pq.read_table(history).to_pylist()
            if r["f"] == stuck_reads.STUCK_PARTITIONS and r["type"] == "ok"]
    [[topic, partition, position, stable, high, records]] = json.loads(op["extra"])["partitions"]
    assert (topic, partition, position, stable, high) == (TOPIC, 0, 0, 0, 3)
    assert records[:2] == [[0, OPEN_VALUE], [1, COMMITTED_VALUE]]
    [row] = hanging.check(history, RunOptions())
    # its producer never ended it, and its coordinator may still abort it: reported, not yet a violation
    assert (row["anomaly"], row["violation"], row["values"], row["offsets"]) == (
        "hanging-transaction", False, [OPEN_VALUE], [0, 3])
    assert "(txn, undecided)" in row["detail"] and "may still abort it" in row["detail"]
    left_open.abort_transaction(30)
