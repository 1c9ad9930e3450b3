"""The replica audit: after the final reads, every replica's log below its high watermark,
read one replica at a time and recorded in the history for the checker (REP-1, REP-2, VIS-2, PRO-1).

Two ways to read a replica, and every read says which it used (extra "method"):

- "follower-fetch" (black-box, any broker): a consumer Fetch v11+ sent straight to the node
  holding the replica. Kafka serves a v11+ consumer fetch from the local replica, leader or
  follower (KIP-392: the request carries client metadata, so FetchParams.fetchOnlyLeader is
  false), up to that replica's own high watermark. Making each replica the leader in turn
  would need a preferred-leader election per replica (ElectLeaders elects only the first of
  the assignment, and reordering needs a reassignment) or stopping the others (with three
  nodes that are also the controller quorum, two stopped nodes stop every election), so the
  audit reads followers where they are.
- "preferred-election" (a broker that refuses follower reads, NOT_LEADER_OR_FOLLOWER): where
  the refused replica is the partition's preferred one (first of its assignment), an
  ElectLeaders PREFERRED for the partition, a wait until Metadata names it leader, and a
  fetch from it. Other refused replicas stay unread; their reads fail and say why.
- "segment-files" (the reference target, white-box): each node's segment files of the
  partition (reference/storage's batch reader), below the high watermark the node last wrote
  to its replication-offset-checkpoint (a lower bound of its high watermark: safe to compare
  below).

A replica read is an op of f "replica-read" (process REPLICA_READ_PROCESS_BASE + n, one per
read) whose one poll mop lists the records read; extra holds the node, the method, the high
watermark, the log start offset, each batch's (base offset, partition leader epoch) and any
error. A record whose key or value is not an 8-byte long (nothing the workload sent) has a
null key or value in the history; extra "foreign" keeps its offset, the first bytes of its
key and value (hex) and a CRC-32 of the whole record, so such records are compared too
(REP-1) and shown as evidence (PRO-1).
"""
from __future__ import annotations

import os
import socket
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from faults.recorder import Recorder
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from reference.protocol.messages import ProtocolDecodeError, decode_response, encode_request
from reference.protocol.records import RecordBatch, iter_batches
from spec.history import Poll, Record

REPLICA_READ_PROCESS_BASE = 1_000_000  # replica reads are processes of their own, never a client's
METADATA_VERSION = 12          # names every partition's leader epoch, replicas and ISR
FETCH_VERSION = 12             # v11+: a follower may serve it (KIP-392); v12 still names topics
FETCH_BYTES_MAX = 1 << 20
SOCKET_TIMEOUT_S = 5.0
READS_PER_REPLICA_MAX = 10_000  # fetches per replica: a bound, far above any fault run's log
CLIENT_ID = "kspec-replica-audit"
FOREIGN_RECORDS_MAX = 10_000   # records kept as bytes per read (see ReplicaLog.foreign)
FOREIGN_BYTES_SHOWN = 32
FOLLOWER_FETCH, SEGMENT_FILES, PREFERRED_ELECTION = "follower-fetch", "segment-files", "preferred-election"
ELECT_LEADERS_VERSION = 1      # v1+: election_type (0 = preferred, KIP-460)
ELECTION_WAIT_S = 15.0         # how long a preferred replica has to become the leader once elected
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"


class WireError(RuntimeError):
    pass


WIRE_ERRORS = (OSError, WireError, ProtocolDecodeError)  # a node down, cut off, or answering what does not decode


def request(address: tuple[str, int], api_key: int, version: int, body: dict,
            properties: dict[str, str] | None = None):
    """One request on a fresh connection; its decoded response. Client properties asking for
    TLS or SASL (--command-config, --secure) connect through conformance/sasl.py."""
    if properties and properties.get("security.protocol", "PLAINTEXT").upper() != "PLAINTEXT":
        from conformance.sasl import connect
        wire = connect(f"{address[0]}:{address[1]}", properties, client_id=CLIENT_ID, timeout_s=SOCKET_TIMEOUT_S)
        try:
            return wire.request(api_key, version, body)
        finally:
            wire.close()
    with socket.create_connection(address, timeout=SOCKET_TIMEOUT_S) as sock:
        sock.settimeout(SOCKET_TIMEOUT_S)
        sock.sendall(encode_request(api_key, version, 1, CLIENT_ID, body))
        (size,) = struct.unpack(">i", _read_exactly(sock, 4))
        return decode_response(api_key, version, _read_exactly(sock, size))[1]


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise WireError("the broker closed the connection")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass
class Metadata:
    brokers: dict[int, tuple[str, int]]
    partitions: list[PartitionInfo]


def metadata(address: tuple[str, int], topics: list[str] | None, properties: dict[str, str] | None = None) -> Metadata:
    """Metadata v12 from one node: brokers' addresses and every partition's leader, epoch, replicas, ISR."""
    response = request(address, ApiKey.METADATA, METADATA_VERSION, {
        "topics": None if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": False}, properties)
    brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
    partitions = [PartitionInfo(t.name, p.partition_index, p.leader_id, p.leader_epoch, tuple(p.replica_nodes),
                                tuple(p.isr_nodes))
                  for t in response.topics if t.error_code == ErrorCode.NONE for p in t.partitions]
    return Metadata(brokers, sorted(partitions, key=lambda p: (p.topic, p.partition)))


def parse_address(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


@dataclass
class ReplicaLog:
    """What one read of one replica found."""
    topic: str
    partition: int
    node: int
    method: str
    high_watermark: int = -1
    log_start_offset: int = 0
    records: list[Record] = field(default_factory=list)
    epochs: list[tuple[int, int]] = field(default_factory=list)   # (base offset, partition leader epoch)
    foreign: list[tuple[int, str, str, int]] = field(default_factory=list)  # (offset, key hex, value hex, crc)
    error: str | None = None

    def add_batches(self, data: bytes | memoryview, below: int) -> int:
        """Take the records of the whole batches in data below offset `below`; returns the next offset."""
        next_offset = None
        for batch in iter_batches(data):
            if not isinstance(batch, RecordBatch) or batch.base_offset >= below:
                break
            if not self.epochs or self.epochs[-1][1] != batch.partition_leader_epoch:
                self.epochs.append((batch.base_offset, batch.partition_leader_epoch))
            if not batch.is_control:
                for r in batch.records():
                    if r.offset < below:
                        self._add(r)
            next_offset = batch.next_offset
        return next_offset

    def _add(self, r) -> None:
        key, value = _long(r.key), _long(r.value)
        if (key is None or value is None) and len(self.foreign) < FOREIGN_RECORDS_MAX:
            whole = zlib.crc32(b"%d:" % len(r.key or b"") + (r.key or b"") + (r.value or b""))  # tells records apart
            self.foreign.append((r.offset, (r.key or b"")[:FOREIGN_BYTES_SHOWN].hex(),
                                 (r.value or b"")[:FOREIGN_BYTES_SHOWN].hex(), whole))
        self.records.append(Record(self.topic, self.partition, key, value, r.offset))

    def record(self, recorder: Recorder, process: int) -> None:
        invocation = recorder.invoke(process, "replica-read", mops=(Poll(),))
        extra = {"node": self.node, "method": self.method, "topic": self.topic, "partition": self.partition,
                 "high_watermark": self.high_watermark, "log_start_offset": self.log_start_offset,
                 "epochs": self.epochs, "foreign": self.foreign}
        if self.error is not None:
            recorder.complete(invocation, "fail", mops=(Poll(),), extra={**extra, "error": self.error})
        else:
            recorder.complete(invocation, "ok", mops=(Poll(tuple(self.records)),), extra=extra)


def _long(data: bytes | None) -> int | None:
    return struct.unpack(">q", data)[0] if data is not None and len(data) == 8 else None


def fetch_replica(address: tuple[str, int], info: PartitionInfo, node: int, version: int = FETCH_VERSION,
                  method: str = FOLLOWER_FETCH, properties: dict[str, str] | None = None) -> ReplicaLog:
    """Read one replica, leader or follower, from its log start to its high watermark (KIP-392)."""
    log = ReplicaLog(info.topic, info.partition, node, method)
    offset = 0
    try:
        for _ in range(READS_PER_REPLICA_MAX):
            response = request(address, ApiKey.FETCH, version, {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": FETCH_BYTES_MAX,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
                "topics": [{"topic": info.topic, "partitions": [{
                    "partition": info.partition, "current_leader_epoch": -1, "fetch_offset": offset,
                    "log_start_offset": -1, "partition_max_bytes": FETCH_BYTES_MAX}]}],
                "forgotten_topics_data": []}, properties)
            answer = response.responses[0].partitions[0]
            if answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and offset < answer.log_start_offset:
                offset = log.log_start_offset = answer.log_start_offset
                continue
            if answer.error_code != ErrorCode.NONE:
                log.error = f"{ErrorCode(answer.error_code).name} from node {node} at offset {offset}"
                return log
            log.high_watermark = answer.high_watermark
            if offset >= answer.high_watermark:
                return log
            next_offset = log.add_batches(answer.records or b"", answer.high_watermark)
            if next_offset is None:
                log.error = f"node {node} returned no batch at offset {offset} below its high watermark"
                return log
            offset = next_offset
        log.error = f"more than {READS_PER_REPLICA_MAX} fetches"
    except WIRE_ERRORS as e:
        log.error = f"node {node} at {address[0]}:{address[1]}: {type(e).__name__}: {e}"
    return log


def read_after_preferred_election(addresses: list[tuple[str, int]], brokers: dict[int, tuple[str, int]],
                                  info: PartitionInfo, version: int,
                                  properties: dict[str, str] | None = None,
                                  high_watermark_at_least: int | None = None) -> ReplicaLog:
    """Make the partition's preferred replica its leader (ElectLeaders PREFERRED) and read it, once
    its high watermark has reached the one its predecessor answered (high_watermark_at_least): a
    new leader learns the high watermark from its followers' next fetches, and until then a read
    below it returns less than the partition holds."""
    preferred = info.replicas[0]
    log = ReplicaLog(info.topic, info.partition, preferred, PREFERRED_ELECTION)
    try:
        response = request(addresses[0], ApiKey.ELECT_LEADERS, ELECT_LEADERS_VERSION, {
            "election_type": 0, "timeout_ms": int(ELECTION_WAIT_S * 1000),
            "topic_partitions": [{"topic": info.topic, "partitions": [info.partition]}]}, properties)
        errors = [r.error_code for t in response.replica_election_results for r in t.partition_result]
        if any(e not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED) for e in errors):
            log.error = f"ElectLeaders PREFERRED: {', '.join(ErrorCode(e).name for e in errors)}"
            return log
        deadline = time.monotonic() + ELECTION_WAIT_S
        while not any(p.partition == info.partition and p.leader == preferred
                      for p in metadata(addresses[0], [info.topic], properties).partitions):
            if time.monotonic() > deadline:
                log.error = f"node {preferred} not the leader {ELECTION_WAIT_S:.0f} s after a preferred election"
                return log
            time.sleep(0.1)
    except WIRE_ERRORS as e:
        log.error = f"ElectLeaders PREFERRED: {type(e).__name__}: {e}"
        return log
    while True:
        log = fetch_replica(brokers[preferred], info, preferred, version, PREFERRED_ELECTION, properties)
        if (log.error is not None or high_watermark_at_least is None or log.high_watermark is None
                or log.high_watermark >= high_watermark_at_least or time.monotonic() > deadline):
            return log
        time.sleep(0.1)


def read_segment_files(data_dir: Path, info: PartitionInfo, node: int) -> ReplicaLog:
    """One replica's log as its node's segment files hold it, below its checkpointed high watermark."""
    log = ReplicaLog(info.topic, info.partition, node, SEGMENT_FILES)
    partition_dir = data_dir / f"{info.topic}-{info.partition}"
    log.high_watermark = checkpointed_high_watermarks(data_dir).get((info.topic, info.partition), -1)
    if not partition_dir.is_dir() or log.high_watermark < 0:
        log.error = f"no partition dir or checkpointed high watermark in {data_dir}"
        return log
    segments = sorted(partition_dir.glob("*.log"), key=lambda p: int(p.stem))
    log.log_start_offset = int(segments[0].stem) if segments else 0
    for segment in segments:
        log.add_batches(segment.read_bytes(), log.high_watermark)
    return log


def checkpointed_high_watermarks(data_dir: Path) -> dict[tuple[str, int], int]:
    """Kafka's replication-offset-checkpoint: version 0, a count, then `topic partition offset` lines."""
    path = data_dir / REPLICATION_OFFSET_CHECKPOINT
    if not path.exists():
        return {}
    lines = path.read_text().split("\n")
    if lines[0] != "0":
        return {}
    found = {}
    for line in lines[2:2 + int(lines[1])]:
        topic, partition, offset = line.split()
        found[(topic, int(partition))] = int(offset)
    return found


def audit(bootstrap: str, topics: list[str] | None, recorder: Recorder,
          data_dirs: dict[int, Path] | None = None, fetch_version: int = FETCH_VERSION,
          properties: dict[str, str] | None = None) -> dict:
    """Read every replica of every partition of topics (None: every topic but the internal ones)
    and record each read; data_dirs (node id -> its data dir) adds the segment-file reads.
    fetch_version below 11 asks as a client without follower reads would (the tests use it to
    take the preferred-election path); properties are the run's client properties. Returns a summary for the run's results."""
    started_s = time.monotonic()
    addresses = [parse_address(a) for a in bootstrap.split(",")]
    found = None
    errors = []
    for address in addresses:
        try:
            found = metadata(address, topics, properties)
            break
        except WIRE_ERRORS as e:
            errors.append(f"{address[0]}:{address[1]}: {e}")
    if found is None:
        return {"methods": [], "error": f"no node answered Metadata: {'; '.join(errors)}"}
    methods = {FOLLOWER_FETCH} | ({SEGMENT_FILES} if data_dirs else set())
    process = REPLICA_READ_PROCESS_BASE
    reads = unread = 0
    for info in found.partitions:
        if topics is None and info.topic.startswith("__"):
            continue
        leader_high_watermark = None
        for node in sorted(info.replicas, key=lambda n: n != info.leader):  # the leader first: a
            # preferred election below moves the leadership away from it
            logs = [fetch_replica(found.brokers[node], info, node, fetch_version, properties=properties)] if node in found.brokers else \
                [ReplicaLog(info.topic, info.partition, node, FOLLOWER_FETCH, error=f"node {node} not in Metadata")]
            if node == info.leader:
                leader_high_watermark = logs[0].high_watermark
            if node == info.replicas[0] and logs[0].error and ErrorCode.NOT_LEADER_OR_FOLLOWER.name in logs[0].error:
                logs.append(read_after_preferred_election(addresses, found.brokers, info, fetch_version, properties,
                                                          leader_high_watermark))
                methods.add(PREFERRED_ELECTION)
            if data_dirs and node in data_dirs:
                logs.append(read_segment_files(data_dirs[node], info, node))
            for log in logs:
                log.record(recorder, process)
                process += 1
                reads += 1
                unread += log.error is not None
    return {"methods": sorted(methods), "partitions": len(found.partitions), "reads": reads, "unread": unread,
            "seconds": round(time.monotonic() - started_s, 3)}


def reference_data_dirs(target) -> dict[int, Path] | None:
    """node id -> data dir, for a reference target whose nodes' dirs are on this machine."""
    dirs = {node.node_id: Path(node.data_dir) for node in target.nodes if hasattr(node, "data_dir")}
    return dirs if dirs and all(os.path.isdir(d) for d in dirs.values()) else None
