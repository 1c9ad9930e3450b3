"""Transactional produce throughput against plain idempotent produce, in the same run.

A confluent-kafka producer writes 100 B records (acks=all, linger.ms=5) to a 3-partition topic
on a real kspec cluster (one `kspec broker` process per node, `--nodes 3` by default, RF 3),
in transactions of 10, 100 and 1,000 records spread over the partitions: each transaction is
begin, produce, commit_transaction, which waits for EndTxn and so for PrepareCommit to be
replicated. The markers that follow are written by the coordinator in the background. The
non-transactional figure is the same producer settings with idempotence only, the same
number of records, one flush at the end. For each size the script repeats the timed run
and reports the median (p50) transactions/s and records/s with the range.

    .venv/bin/python benchmarks/bench_transactions.py [--nodes 3] [--records 10000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from reference.process import ClusterProcess

PARTITIONS = 3
RECORD_VALUE_BYTES = 100
RECORDS_PER_TRANSACTION = (10, 100, 1000)
TIMEOUT_S = 60.0


def producer_config(bootstrap: str) -> dict:
    return {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True,
            "log_level": 0}


def create_topic(bootstrap: str, name: str, replication_factor: int) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, replication_factor)])[name].result(TIMEOUT_S)
    return name


def plain_records_per_s(bootstrap: str, topic: str, records: int) -> float:
    producer = Producer(producer_config(bootstrap))
    value = b"x" * RECORD_VALUE_BYTES
    producer.produce(topic, value)  # connections and metadata before the clock starts, as init_transactions does
    assert producer.flush(TIMEOUT_S) == 0
    started = time.monotonic()
    for i in range(records):
        producer.produce(topic, value, partition=i % PARTITIONS)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0, "every record delivered"
    return records / (time.monotonic() - started)


def transactional_rates(bootstrap: str, topic: str, records: int, per_transaction: int,
                        transactional_id: str) -> tuple[float, float]:
    """(transactions/s, records/s) for `records` records in transactions of `per_transaction`."""
    producer = Producer(producer_config(bootstrap) | {"transactional.id": transactional_id})
    producer.init_transactions(TIMEOUT_S)
    value = b"x" * RECORD_VALUE_BYTES
    transactions = max(1, records // per_transaction)
    started = time.monotonic()
    for _ in range(transactions):
        producer.begin_transaction()
        for i in range(per_transaction):
            producer.produce(topic, value, partition=i % PARTITIONS)
            producer.poll(0)
        producer.commit_transaction(TIMEOUT_S)
    elapsed = time.monotonic() - started
    return transactions / elapsed, transactions * per_transaction / elapsed


def spread(values: list[float], unit: str) -> str:
    return f"{statistics.median(values):,.0f} {unit} ({min(values):,.0f}-{max(values):,.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--records", type=int, default=10_000, help="records per timed run")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir, ClusterProcess(data_dir, args.nodes) as cluster:
        bootstrap = cluster.bootstrap
        topic = create_topic(bootstrap, "bench-transactions", min(3, args.nodes))
        transactional_rates(bootstrap, topic, 10, 10, "warm-up")  # creates __transaction_state
        plain, by_size = [], {size: ([], []) for size in RECORDS_PER_TRANSACTION}
        for repeat in range(args.repeats):
            plain.append(plain_records_per_s(bootstrap, topic, args.records))
            for size in RECORDS_PER_TRANSACTION:
                records = min(args.records, size * 100)  # at most 100 transactions per timed run
                per_s, records_per_s = transactional_rates(bootstrap, topic, records, size, f"bench-{size}-{repeat}")
                by_size[size][0].append(per_s)
                by_size[size][1].append(records_per_s)
        print(f"{args.nodes} node(s), {RECORD_VALUE_BYTES} B records, acks=all, p50 of {args.repeats} (range)")
        print(f"non-transactional (idempotent): {spread(plain, 'records/s')}")
        for size, (per_s, records_per_s) in by_size.items():
            ratio = statistics.median(records_per_s) / statistics.median(plain)
            print(f"{size:>5} records/transaction: {spread(per_s, 'transactions/s')}, "
                  f"{spread(records_per_s, 'records/s')}, {ratio:.2f} of non-transactional")


if __name__ == "__main__":
    main()
