"""PRO-1 on a cluster: frames that lie, sent through Kafka's public API keys to the nodes of a
real three-node cluster (the leader and the followers of a replicated partition), never
corrupt a log. Replica Fetches (Fetch with a replica_id, as a follower sends them) with
replica ids, offsets and epochs drawn at random, OffsetForLeaderEpoch with any epochs,
Produce of batches whose counts lie or that expand past max.message.bytes, and byte-flipped
versions of all of them: each connection gets answers or is closed. Afterwards the cluster
serves, every replica's log is whole (valid batches, increasing offsets), the replicas agree
batch for batch on what they share, and every acknowledged record is on each of them."""
from __future__ import annotations

import os
import socket
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference.process import ClusterProcess
from reference.protocol.api_keys import ApiKey
from reference.protocol.compression import CompressionType
from reference.protocol.errors import ErrorCode
from reference.protocol.messages import encode_request
from tests.broker.conftest import RawClient
from tests.broker.helpers import batch_of, fetch_request, produce

from .batches import batch, record
from .internode import stored_batches

TOPIC = "fuzz-replicated"
NODES = 3
ACKED = [[b"acked-%d-%d" % (n, i) for i in range(3)] for n in range(5)]
WAIT_S = 30.0
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base_dir = tmp_path_factory.mktemp("fuzz-cluster")
    with ClusterProcess(str(base_dir), NODES, overrides={"min.insync.replicas": "2"}) as running:
        admin = AdminClient({"bootstrap.servers": running.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, NODES)])[TOPIC].result(WAIT_S)
        deadline = time.monotonic() + WAIT_S
        while running.leader_of(TOPIC, 0) < 0:
            assert time.monotonic() < deadline, "the partition gets a leader"
            time.sleep(0.1)
        leader = RawClient(running.addresses[running.leader_of(TOPIC, 0)])
        for values in ACKED:
            assert produce(leader, TOPIC, batch_of(values), acks=-1).error_code == ErrorCode.NONE
        leader.close()
        yield running


def replica_fetch(replica_id: int, fetch_offset: int, last_fetched_epoch: int, current_leader_epoch: int,
                  max_bytes: int) -> bytes:
    body = fetch_request(TOPIC, 0)
    body["replica_id"] = replica_id
    body["topics"][0]["partitions"][0].update(fetch_offset=fetch_offset, last_fetched_epoch=last_fetched_epoch,
                                              current_leader_epoch=current_leader_epoch,
                                              partition_max_bytes=max_bytes)
    return encode_request(ApiKey.FETCH, 12, 1, "fuzz", body)


def epoch_query(replica_id: int, current_leader_epoch: int, leader_epoch: int) -> bytes:
    return encode_request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, 2, "fuzz", {"replica_id": replica_id, "topics": [
        {"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": current_leader_epoch,
                                         "leader_epoch": leader_epoch}]}]})


def lying_produce(records_count: int, bomb: bool, acks: int) -> bytes:
    records = [record(0, value=b"\x00" * (4 << 20))] if bomb else [record(0), record(1)]
    body = batch(records, records_count=records_count, compression=CompressionType.ZSTD if bomb else 0)
    return encode_request(ApiKey.PRODUCE, 9, 3, "fuzz", {"acks": acks, "timeout_ms": 1000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": body}]}]})


frames = st.one_of(
    st.builds(replica_fetch, st.sampled_from([-1, 1, 2, 3, 99]), st.one_of(st.integers(-2, 40), INT64),
              st.one_of(st.integers(-1, 5), INT32), st.one_of(st.integers(-1, 5), INT32), st.integers(-1, 1 << 20)),
    st.builds(epoch_query, st.sampled_from([-2, -1, 1, 2, 3]), st.one_of(st.integers(-1, 5), INT32),
              st.one_of(st.integers(-1, 5), INT32)),
    st.builds(lying_produce, st.integers(-1, 5), st.booleans(), st.sampled_from([-1, 0, 1])),
)


@st.composite
def flipped(draw, frame_strategy):
    frame = bytearray(draw(frame_strategy))
    for _ in range(draw(st.integers(1, 3))):
        frame[draw(st.integers(4, len(frame) - 1))] = draw(st.integers(0, 255))
    return bytes(frame)


def send_and_drain(address: str, frame: bytes) -> None:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(frame)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(2)
        try:
            while sock.recv(65536):
                pass
        except (socket.timeout, ConnectionResetError):
            pass


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(frames, flipped(frames)), st.integers(1, NODES))
def test_each_node_answers_or_closes_lying_frames(cluster, frame, node_id):
    send_and_drain(cluster.addresses[node_id], frame)


def test_after_the_fuzzing_every_replica_log_is_whole_the_replicas_agree_and_keep_what_was_acked(cluster):
    # The metadata may name no leader (-1) or one that just moved: ask again until one takes it.
    deadline = time.monotonic() + WAIT_S
    while True:
        leader_id = cluster.leader_of(TOPIC, 0)
        if leader_id >= 1:
            leader = RawClient(cluster.addresses[leader_id])
            error = produce(leader, TOPIC, batch_of([b"after"]), acks=-1).error_code
            leader.close()
            if error == ErrorCode.NONE:
                break
        assert time.monotonic() < deadline, "a leader takes a record after the fuzzing"
        time.sleep(0.1)
    for node in cluster.nodes.values():
        with open(node.stderr_path, encoding="utf-8", errors="replace") as log:
            assert "internal error" not in log.read(), node.stderr_path
    cluster.stop()
    replicas = {node_id: stored_batches(os.path.join(node.data_dir, f"{TOPIC}-0"))
                for node_id, node in cluster.nodes.items()}
    for node_id, batches in replicas.items():
        values = [r.value for b in batches for r in b.records()]
        assert [v for acked in ACKED for v in acked] == values[:15], f"node {node_id} keeps every acked record"
    reference = replicas[1]
    for node_id, batches in replicas.items():
        shared = min(len(batches), len(reference))
        assert [bytes(b.buffer) for b in batches[:shared]] == [bytes(b.buffer) for b in reference[:shared]], \
            f"node {node_id} and node 1 disagree below their common end (REP-1)"

