"""`kspec topics describe` shows the log end offset apart from the high watermark.

A 3-node reference cluster with one follower paused (SIGSTOP: alive, in the ISR, not
fetching): records produced with acks=1 are on the leader's log but not below the high
watermark, so LOG-END-OFFSET (ListOffsets with replica_id -2, answered by
reference/handlers/offsets.py) runs ahead of HIGH-WATERMARK until the follower fetches again.
"""
from __future__ import annotations

import signal
import time

import pytest
from kafka import KafkaProducer

from reference.process import ClusterProcess

from .helpers import Target, kspec, unique_topic
from .test_topics import described_partitions, table_rows

# The paused follower must stay in the ISR for the whole check, however loaded the machine.
SLOW_FAILURE_DETECTION = {"broker.session.timeout.ms": "120000", "replica.lag.time.max.ms": "120000"}
CATCH_UP_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ClusterProcess(str(tmp_path_factory.mktemp("leo-cluster")), 3, overrides=SLOW_FAILURE_DETECTION) as running:
        yield running


def produce(bootstrap: str, topic: str, count: int, acks: int | str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks=acks)
    for i in range(count):
        producer.send(topic, value=b"record-%d" % i, partition=0)
    producer.flush()
    producer.close()


def offsets_row(bootstrap: str, topic: str) -> dict[str, str]:
    run = kspec("topics", "describe", topic, "-b", bootstrap)
    assert run.returncode == 0, run.stderr
    header = ["PARTITION", "LEADER", "REPLICAS", "ISR", "LEADER-EPOCH", "LOG-START-OFFSET", "LOG-END-OFFSET",
              "HIGH-WATERMARK", "LAST-STABLE-OFFSET"]
    assert run.stdout.splitlines()[1].split() == header
    (row,) = table_rows(run.stdout, "PARTITION")
    return dict(zip(header, row))


def test_log_end_offset_runs_ahead_of_the_high_watermark_while_a_follower_lags(cluster):
    topic = unique_topic("leo")
    assert kspec("topics", "create", topic, "-b", cluster.bootstrap, "--replication-factor", "3").returncode == 0
    produce(cluster.bootstrap, topic, 3, "all")
    partition = described_partitions(Target("cluster", cluster.bootstrap, 3), topic)[0]
    leader = partition["leader_id"]
    # Not the active controller: admin calls that go to it would wait out its re-election.
    controller = cluster.controller_id()
    follower = next(r for r in partition["replica_nodes"] if r not in (leader, controller))
    leader_address = cluster.addresses[leader]
    process = cluster.nodes[follower].process
    process.send_signal(signal.SIGSTOP)
    try:
        produce(leader_address, topic, 4, 1)
        row = offsets_row(leader_address, topic)
        assert (row["LOG-END-OFFSET"], row["HIGH-WATERMARK"]) == ("7", "3"), row
        assert str(follower) in row["ISR"].split(",")
    finally:
        process.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while (row := offsets_row(leader_address, topic))["HIGH-WATERMARK"] != "7":
        assert time.monotonic() < deadline, f"the follower catches up and the high watermark reaches 7: {row}"
        time.sleep(0.2)
    assert row["LOG-END-OFFSET"] == "7"
