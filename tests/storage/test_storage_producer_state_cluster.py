"""Producer state on a real 3-node reference cluster, over the wire (IDM-1): a retried
idempotent batch is answered as a duplicate with its original offsets, never stored twice and
never OUT_OF_ORDER_SEQUENCE_NUMBER, after its acks=all wait timed out (REQUEST_TIMED_OUT, the
batch was appended) and after a leader change (the new leader's state came from replication).
"""
from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from conformance import ops
from conformance.wire import WireClient
from reference.process import ClusterProcess
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

# A dead leader is fenced, and a new one elected, within seconds; paused followers stay in the ISR.
OVERRIDES = {
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "1500",
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "replica.lag.time.max.ms": "60000",
}
PRODUCE_VERSION = 9
WAIT_S = 60.0
ACKS_ALL_TIMEOUT_MS = 500
TOPIC = "retries"
PRODUCER_ID = 1 << 40   # unknown to the cluster, so accepted from sequence 0 (KIP-360)


def wait_for(condition, what: str):
    deadline = time.monotonic() + WAIT_S
    while (value := condition()) is None or value is False:
        assert time.monotonic() < deadline, f"not within {WAIT_S}s: {what}"
        time.sleep(0.1)
    return value


def produce(cluster: ClusterProcess, node_id: int, base_sequence: int, count: int = 2,
            timeout_ms: int = ops.REQUEST_TIMEOUT_MS):
    batch = ops.values_batch([b"seq-%d" % (base_sequence + i) for i in range(count)], timestamp_ms=1_000,
                             producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=base_sequence)
    with WireClient(cluster.addresses[node_id], timeout_s=WAIT_S) as wire:
        response = wire.request(ApiKey.PRODUCE, PRODUCE_VERSION, ops.produce_body(TOPIC, batch, 0, -1, None, timeout_ms))
    answer = response.responses[0].partition_responses[0]
    return ErrorCode(answer.error_code), answer.base_offset


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ClusterProcess(str(tmp_path_factory.mktemp("producer-state")), 3, overrides=OVERRIDES) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(WAIT_S)
        wait_for(lambda: cluster.leader_of(TOPIC, 0) >= 0, "a leader")
        yield cluster


@pytest.mark.guarantee("IDM-1")
def test_a_retry_after_an_acks_all_timeout_and_after_a_leader_change_is_a_duplicate(cluster):
    leader = cluster.leader_of(TOPIC, 0)
    followers = [node_id for node_id in cluster.nodes if node_id != leader]
    for node_id in followers:
        os.kill(cluster.nodes[node_id].process.pid, signal.SIGSTOP)
    try:
        assert produce(cluster, leader, 0, timeout_ms=ACKS_ALL_TIMEOUT_MS)[0] == ErrorCode.REQUEST_TIMED_OUT
    finally:
        for node_id in followers:
            os.kill(cluster.nodes[node_id].process.pid, signal.SIGCONT)
    assert produce(cluster, leader, 0) == (ErrorCode.NONE, 0), "the appended batch's offsets, once replicated"
    assert produce(cluster, leader, 2) == (ErrorCode.NONE, 2)

    cluster.kill(leader)
    new_leader = wait_for(lambda: (node := cluster.leader_of(TOPIC, 0)) not in (-1, leader) and node, "a new leader")
    assert produce(cluster, new_leader, 0) == (ErrorCode.NONE, 0), "the new leader knows the batch"
    assert produce(cluster, new_leader, 2) == (ErrorCode.NONE, 2)
    assert produce(cluster, new_leader, 5)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(cluster, new_leader, 4) == (ErrorCode.NONE, 4), "nothing was stored twice"
