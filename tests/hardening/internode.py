"""Frames of the RPCs only nodes send one another, for fuzzing a cluster (PRO-1 on the inter-node
path): KRaft's Vote, BeginQuorumEpoch, EndQuorumEpoch and Fetch of `__cluster_metadata`
(KIP-595), and the controller's BrokerRegistration, BrokerHeartbeat (KIP-631), AlterPartition
(KIP-497) and Envelope (KIP-590, a forwarded admin request inside).

`internode_frame` draws one from a seeded generator: a well-formed request whose ids, epochs
and offsets are drawn around the cluster's real ones (so some are accepted and act on the
quorum, as a confused or stale peer's would) or anywhere in their range, a wrong cluster id,
bytes flipped, a frame cut short, a version the node does not serve, another RPC's body under
this RPC's key. Sent without credentials to a cluster whose listeners need none, these are what
any peer could send: the nodes must answer or close the connection, never crash, hang or
store something torn, and the cluster must serve clients again once they stop.

What a peer may legitimately ask is asked only so far as the cluster can come back from it: a
BrokerHeartbeat asking for a controlled shutdown with the broker's own epoch stops that
broker, as Kafka does on the controller's word (want_shut_down is false in the well-formed
ones; a flipped byte may still set it, the epoch must then match too), and well-formed epochs
stay below 2**30 (see Fields.epoch). Kafka's defence against a peer that lies is that only
CLUSTER_ACTION principals may send these (AUTH-3); here the listeners need no credentials.
"""
from __future__ import annotations

import os
import random
import socket
import struct
import time
import uuid
from dataclasses import dataclass

from faults.malformed import probe_frame, read_frames
from reference.process import ClusterProcess
from reference.protocol.api_keys import ApiKey
from reference.protocol.messages import decode_response, encode_request
from reference.protocol.records import RecordBatch, iter_batches
from reference.security.principal import KafkaPrincipal
from reference.server.quorum_controller import client_host_address, write_principal
from reference.storage.config import LogConfig
from reference.storage.log import Log

METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = uuid.UUID(int=1)
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
VERSIONS = {ApiKey.VOTE: (0, 2), ApiKey.BEGIN_QUORUM_EPOCH: (0, 1), ApiKey.END_QUORUM_EPOCH: (0, 1),
            ApiKey.FETCH: (13, 18), ApiKey.BROKER_REGISTRATION: (0, 4), ApiKey.BROKER_HEARTBEAT: (0, 1),
            ApiKey.ALTER_PARTITION: (2, 3), ApiKey.ENVELOPE: (0, 0)}
CLOSING_P = 0.45  # the share of frames of the kinds that may close the connection, when allowed


@dataclass(frozen=True)
class ClusterView:
    """What a peer knows of the cluster it talks to."""

    cluster_id: str
    voter_ids: tuple[int, ...]
    broker_ids: tuple[int, ...]
    topic_ids: tuple[uuid.UUID, ...]  # the data topics' ids, for AlterPartition
    fuzz_topic_prefix: str = "fuzz-internode-"  # what forwarded CreateTopics may create


class Fields:
    """Values around the real ones, or anywhere in the field's range."""

    def __init__(self, rng: random.Random, view: ClusterView) -> None:
        self.rng, self.view = rng, view

    def node_id(self) -> int:
        rng = self.rng
        return rng.choice([*self.view.voter_ids, *self.view.broker_ids, -1, 0, 1000, rng.randint(-(1 << 31), INT32_MAX)])

    def epoch(self) -> int:
        """Mostly near the quorum's; now and then far ahead, but never near INT32_MAX: a
        well-formed Vote or BeginQuorumEpoch with the right cluster id is obeyed, and a quorum
        whose epoch reached 2**31 - 1 can never elect again (reference/controller/raft_elections.py)."""
        rng = self.rng
        return rng.randint(-1, 12) if rng.random() < 0.95 else rng.choice([-(1 << 31), rng.randint(0, 1 << 30)])

    def offset(self) -> int:
        rng = self.rng
        return rng.randint(-1, 200) if rng.random() < 0.9 else rng.choice([INT64_MAX, -(1 << 63), rng.randint(0, INT64_MAX)])

    def cluster_id(self) -> str | None:
        rng = self.rng
        return self.view.cluster_id if rng.random() < 0.85 else rng.choice([None, "", "x" * 22, str(uuid.uuid4())])

    def partition(self, **fields) -> dict:
        return {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": self.rng.choice([0, 0, 0, 1, -1]),
                                                             **fields}]}


def _vote(f: Fields) -> dict:
    return {"cluster_id": f.cluster_id(), "voter_id": f.node_id(), "topics": [f.partition(
        replica_epoch=f.epoch(), replica_id=f.node_id(), last_offset_epoch=f.epoch(), last_offset=f.offset(),
        pre_vote=f.rng.random() < 0.5, replica_directory_id=uuid.UUID(int=0))]}


def _begin_quorum_epoch(f: Fields) -> dict:
    return {"cluster_id": f.cluster_id(), "voter_id": f.node_id(), "topics": [f.partition(
        leader_id=f.node_id(), leader_epoch=f.epoch())]}


def _end_quorum_epoch(f: Fields) -> dict:
    return {"cluster_id": f.cluster_id(), "topics": [f.partition(
        leader_id=f.node_id(), leader_epoch=f.epoch(), preferred_successors=[f.node_id()])]}


def _metadata_fetch(f: Fields) -> dict:
    return {"cluster_id": f.cluster_id(), "replica_id": f.node_id(),
            "replica_state": {"replica_id": f.node_id(), "replica_epoch": -1},
            "max_wait_ms": f.rng.choice([0, 0, 0, 5, 50]), "min_bytes": 0, "max_bytes": f.rng.choice([0, 1 << 16, 1 << 20]),
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic_id": METADATA_TOPIC_ID, "partitions": [{
                "partition": 0, "current_leader_epoch": f.epoch(), "fetch_offset": f.offset(),
                "last_fetched_epoch": f.epoch(), "log_start_offset": -1, "partition_max_bytes": 1 << 16,
                "high_watermark": f.offset()}]}]}


def _broker_registration(f: Fields) -> dict:
    return {"broker_id": f.node_id(), "cluster_id": f.cluster_id() or "", "incarnation_id": uuid.uuid4(),
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": f.rng.randint(0, 65535),
                           "security_protocol": 0}],
            "features": [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 30}]
            if f.rng.random() < 0.5 else [],
            "rack": None, "is_migrating_zk_broker": False, "log_dirs": [uuid.uuid4()], "previous_broker_epoch": f.offset()}


def _broker_heartbeat(f: Fields) -> dict:
    return {"broker_id": f.node_id(), "broker_epoch": f.offset(), "current_metadata_offset": f.offset(),
            "want_fence": f.rng.random() < 0.5, "want_shut_down": False, "offline_log_dirs": []}


def _alter_partition(f: Fields) -> dict:
    rng = f.rng
    return {"broker_id": f.node_id(), "broker_epoch": f.offset(), "topics": [{
        "topic_id": rng.choice([*f.view.topic_ids, uuid.uuid4(), uuid.UUID(int=0)]), "partitions": [{
            "partition_index": rng.choice([0, 0, 1, -1, 99]), "leader_epoch": f.epoch(),
            "new_isr": [f.node_id() for _ in range(rng.randint(0, 4))],
            "new_isr_with_epochs": [{"broker_id": f.node_id(), "broker_epoch": f.offset()}
                                    for _ in range(rng.randint(0, 4))],
            "leader_recovery_state": rng.choice([0, 0, 1, 7]), "partition_epoch": f.epoch()}]}]}


def _forwarded(f: Fields) -> bytes:
    """The request inside an Envelope: an admin request a broker forwards (without its size prefix)."""
    rng = f.rng
    name = f.view.fuzz_topic_prefix + str(rng.randrange(50))
    kind = rng.randrange(3)
    if kind == 0:
        inner = encode_request(ApiKey.CREATE_TOPICS, 7, 1, "fuzz", {"topics": [
            {"name": name, "num_partitions": rng.choice([1, 2, -1, 0]), "replication_factor": rng.choice([1, 3, -1, 5]),
             "assignments": [], "configs": []}], "timeout_ms": 1000, "validate_only": rng.random() < 0.3})
    elif kind == 1:
        inner = encode_request(ApiKey.CREATE_PARTITIONS, 3, 1, "fuzz", {"topics": [
            {"name": name, "count": rng.randint(-1, 4), "assignments": None}], "timeout_ms": 1000,
            "validate_only": False})
    else:
        inner = encode_request(ApiKey.METADATA, 12, 1, "fuzz", {"topics": None, "allow_auto_topic_creation": False})
    inner = bytearray(inner[4:])
    if rng.random() < 0.3:
        for _ in range(rng.randint(1, 3)):
            inner[rng.randrange(len(inner))] = rng.randrange(256)
    return bytes(inner)


def _envelope(f: Fields) -> dict:
    rng = f.rng
    principal = (write_principal(KafkaPrincipal("User", rng.choice(["ANONYMOUS", "admin", ""])))
                 if rng.random() < 0.9 else rng.randbytes(rng.randint(0, 12)))
    host = client_host_address("127.0.0.1") if rng.random() < 0.9 else rng.randbytes(rng.choice([0, 3, 4, 16, 7]))
    return {"request_data": _forwarded(f), "request_principal": principal, "client_host_address": host}


BODIES = {ApiKey.VOTE: _vote, ApiKey.BEGIN_QUORUM_EPOCH: _begin_quorum_epoch, ApiKey.END_QUORUM_EPOCH: _end_quorum_epoch,
          ApiKey.FETCH: _metadata_fetch, ApiKey.BROKER_REGISTRATION: _broker_registration,
          ApiKey.BROKER_HEARTBEAT: _broker_heartbeat, ApiKey.ALTER_PARTITION: _alter_partition,
          ApiKey.ENVELOPE: _envelope}


def well_formed(rng: random.Random, view: ClusterView, api_key: ApiKey | None = None) -> bytes:
    """One inter-node request, well formed, at the version the nodes send (or any they serve)."""
    api_key = api_key if api_key is not None else rng.choice(list(BODIES))
    low, high = VERSIONS[api_key]
    version = high if rng.random() < 0.7 else rng.randint(low, high)
    return encode_request(api_key, version, rng.randrange(1 << 30), rng.choice(["kspec-raft-1", "fuzz", None]),
                          BODIES[api_key](Fields(rng, view)))


def internode_frame(rng: random.Random, view: ClusterView, *, may_close: bool) -> bytes:
    """One frame; unless `may_close`, a well-formed request (which the node answers)."""
    frame = bytearray(well_formed(rng, view))
    if not may_close or rng.random() >= CLOSING_P:
        return bytes(frame)
    match rng.randrange(5):
        case 0:  # bytes flipped after the size
            for _ in range(rng.randint(1, 4)):
                frame[rng.randrange(4, len(frame))] = rng.randrange(256)
        case 1:  # cut short, the size made to fit
            frame = frame[: rng.randint(6, len(frame))]
            struct.pack_into(">i", frame, 0, len(frame) - 4)
        case 2:  # a version the nodes do not serve
            struct.pack_into(">h", frame, 6, rng.choice([-1, 5, 19, 100, rng.randrange(1 << 15)]))
        case 3:  # another RPC's body under this key
            struct.pack_into(">h", frame, 4, rng.choice(list(VERSIONS)))
        case 4:  # a size that lies
            struct.pack_into(">i", frame, 0, rng.choice([-1, 0, len(frame), len(frame) + 100, 1 << 30]))
    return bytes(frame)


# ------------------------------------------------------------ sending, and what must hold afterwards

def send_burst(address: str, frames: list[bytes], timeout_s: float = 2.0) -> tuple[int, bool]:
    """The frames on one connection, then an ApiVersions probe, then the sending side shut (a frame
    whose size lies ends at EOF): (frames answered, whether the probe came back)."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(b"".join(frames) + probe_frame())
            sock.shutdown(socket.SHUT_WR)
            answers, survived = read_frames(sock)
    except OSError:
        return 0, False
    return len(answers) - survived, survived


def cluster_view(cluster: ClusterProcess, topics: list[str]) -> ClusterView:
    """The cluster id (meta.properties), the voters, the brokers and the topics' ids (Metadata v12)."""
    node = cluster.nodes[cluster.broker_ids[0]]
    with open(os.path.join(node.data_dir, "meta.properties"), encoding="utf-8") as properties:
        cluster_id = dict(line.strip().split("=", 1) for line in properties if "=" in line)["cluster.id"]
    host, port = cluster.addresses[cluster.broker_ids[0]].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(encode_request(ApiKey.METADATA, 12, 1, "fuzz", {
            "topics": [{"name": topic, "topic_id": uuid.UUID(int=0)} for topic in topics],
            "allow_auto_topic_creation": False}))
        sock.settimeout(10)
        response = decode_response(ApiKey.METADATA, 12, read_frames_until_one(sock))[1]
    voters = tuple(cluster.controller_ids or cluster.broker_ids)
    return ClusterView(cluster_id, voters, tuple(cluster.broker_ids), tuple(t.topic_id for t in response.topics))


def read_frames_until_one(sock: socket.socket) -> bytes:
    buffer = b""
    while len(buffer) < 4 or len(buffer) - 4 < struct.unpack_from(">i", buffer)[0]:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("closed before an answer")
        buffer += chunk
    return buffer[4:4 + struct.unpack_from(">i", buffer)[0]]


def serves_a_client(bootstrap: str, topic: str, values: list[bytes], deadline_s: float) -> str | None:
    """None once a confluent-kafka producer (acks=all) and a consumer have written and read back
    `values` on `topic` before the deadline (the cluster may still be settling after the fuzz:
    retried until then); else what went wrong."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as ClientPartition

    error = "not tried"
    while time.monotonic() < deadline_s:
        delivered: list = []
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "message.timeout.ms": 10_000})
        for value in values:
            producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: delivered.append((err, msg)))
        producer.flush(15)
        failed = [err for err, _ in delivered if err is not None]
        if len(delivered) == len(values) and not failed:
            first = min(msg.offset() for _, msg in delivered)
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fuzz-check-{first}",
                                 "enable.auto.commit": False})
            consumer.assign([ClientPartition(topic, 0, first)])
            read: list[bytes] = []
            while len(read) < len(values) and time.monotonic() < deadline_s:
                read += [m.value() for m in consumer.consume(len(values), timeout=1) if m.error() is None]
            consumer.close()
            if read[:len(values)] == values:
                return None
            error = f"read back {read[:len(values)]!r}, not the values written"
        else:
            error = f"{len(delivered)}/{len(values)} delivered, errors {failed[:3]}"
        time.sleep(1)
    return error


def stored_batches(partition_dir: str) -> list[RecordBatch]:
    """Every batch of a replica's log, opened as the broker opens it; whole and in offset order."""
    log = Log(partition_dir, LogConfig(), now_ms=int(time.time() * 1000))
    batches, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        read = log.read(offset, 1 << 20)
        found = [RecordBatch(bytes(b.buffer)) for b in iter_batches(read.records)]
        assert found, f"{partition_dir}: nothing readable at {offset} below the end {log.log_end_offset}"
        for found_batch in found:
            assert found_batch.crc_is_valid() and found_batch.base_offset >= offset, (partition_dir, offset)
            offset = found_batch.next_offset
        batches += found
    return batches


def log_problems(cluster: ClusterProcess, topic: str, acked: list[bytes]) -> list[str]:
    """With the cluster stopped: every node's replica of `topic` and of the metadata log is whole
    (valid batches, offsets only growing), the replicas agree record for record below their common
    end (REP-1; the metadata log's batches are cut differently on each voter, its records are
    not), and every acknowledged value of `topic` is on each replica."""
    problems = []
    replicas: dict[str, dict[int, list[tuple]]] = {topic: {}, METADATA_TOPIC: {}}
    for node_id, node in cluster.nodes.items():
        for name in replicas:
            try:
                batches = stored_batches(os.path.join(node.data_dir, f"{name}-0"))
            except AssertionError as e:
                problems.append(f"node {node_id}: {name} is torn: {e}")
                continue
            replicas[name][node_id] = [(b.base_offset + i, b.partition_leader_epoch, r.key, r.value)
                                       for b in batches for i, r in enumerate(b.records())]
    for node_id, records in replicas[topic].items():
        values = {value for *_, value in records}
        if missing := [value for value in acked if value not in values]:
            problems.append(f"node {node_id}: {len(missing)} acknowledged values of {topic} missing, e.g. {missing[0]!r}")
    for name, by_node in replicas.items():
        nodes = sorted(by_node)
        for node_id in nodes[1:]:
            shared = min(len(by_node[node_id]), len(by_node[nodes[0]]))
            if by_node[node_id][:shared] != by_node[nodes[0]][:shared]:
                problems.append(f"{name}: nodes {nodes[0]} and {node_id} disagree below their common end (REP-1)")
    return problems


def internal_errors(cluster: ClusterProcess) -> list[str]:
    """Handler exceptions and tracebacks in the nodes' logs."""
    found = []
    for node_id, node in cluster.nodes.items():
        with open(node.stderr_path, encoding="utf-8", errors="replace") as log:
            found += [f"node {node_id}: {line.strip()}" for line in log
                      if "internal error" in line or line.startswith("Traceback")]
    return found
