"""Fuzz a real `kspec broker`, then a real three-node cluster, with over a million frames and report what broke.

Frames are valid requests (ApiVersions, Metadata, Produce of uncompressed and compressed
batches, Fetch, ListOffsets, CreateTopics), mutated by a seeded generator: bytes flipped in
the frame, in the batch's records (with the CRC made right again, so the record walk is what
is tested) or in the compressed stream, sizes and counts that lie, truncations, random api
keys and versions, pure noise. They are sent in bursts of FRAMES_PER_BURST on one connection
(only the last of a burst may be of a kind that closes it, so most frames are handled),
with an ApiVersions probe after each burst, then the sending side is shut (so a frame whose
size lies ends at EOF instead of being waited for); the broker answers what it can and closes
the connection at the first frame it cannot. (tests/hardening/test_fuzz_records.py and
tests/broker/test_fuzz.py drive the same paths with hypothesis, small, in `make test`; this
uses a seeded generator because a million hypothesis examples would take hours.)

Then a three-node cluster (combined mode: every node's listener serves clients and the
controller's RPCs) gets --cluster-frames more, in bursts to each node in turn: half are the
frames above (to replicated topics), half are the RPCs only nodes send each other (Vote,
BeginQuorumEpoch, EndQuorumEpoch, the metadata Fetch, BrokerRegistration, BrokerHeartbeat,
AlterPartition, Envelope; tests/hardening/internode.py), well formed around the real ids and
epochs or broken. A node that ends is a crash (and is started again), a node whose fresh
connection gets no ApiVersions answer within HANG_S a hang. At the end a confluent-kafka
producer (acks=all) and consumer must be served, and with the cluster stopped every replica of
the replicated topic and of the metadata log must be whole, agree with the others, and hold
every value acknowledged before and after the fuzz.

It prints, for each part, at the end, and exits 1 if any is non-zero:
- crashes: the broker process ended;
- hangs: a fresh connection's ApiVersions not answered within HANG_S (checked after every
  burst whose probe did not come back);
- internal errors: handler exceptions in the broker's log (a bug, though the broker lives);
- log corruption: after a clean restart, a stored batch that is torn, fails its CRC or its
  record walk, offsets that go backwards, or a record acknowledged to the fuzzer missing.

The cluster part is smaller than the single node's: each cluster frame costs three processes'
work (replication, the metadata log), about 90-180 frames/s on the shared 2-core machine, so
50,000 take 5-10 minutes; 1,050,000 frames in all.

    python benchmarks/bench_fuzz.py [--frames 1000000] [--cluster-frames 50000] [--seed 1]
"""
from __future__ import annotations

import argparse
import random
import signal
import socket
import struct
import sys
import tempfile
import time

from confluent_kafka.admin import AdminClient, NewTopic

from faults.malformed import FUZZ_TOPICS, fuzzed_frame, probe_frame, produce_body, read_frames, templates, valid_batch
from reference.process import BrokerProcess, ClusterProcess
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from reference.protocol.messages import decode_response, encode_request
from reference.protocol.records import RecordBatch, iter_batches
from reference.protocol.validator import ValidationRules, validate_records
from tests.hardening.internode import (
    cluster_view,
    internal_errors,
    internode_frame,
    log_problems,
    send_burst,
    serves_a_client,
)

FRAMES_PER_BURST = 64
HANG_S = 10.0
SOCKET_TIMEOUT_S = 2.0
TOPICS = FUZZ_TOPICS
LENIENT = ValidationRules(1 << 30, False, True, (1 << 63) - 1, (1 << 63) - 1)  # structure and offsets only
CLUSTER_NODES = 3
CLUSTER_TOPIC = "fuzz-replicated"  # acknowledged values are checked on every replica of it
CLUSTER_CHECK_VALUES = 50
CLUSTER_SETTLE_S = 120.0  # after the fuzz, the cluster must serve a client within this


def alive(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=HANG_S) as sock:
            sock.settimeout(HANG_S)
            sock.sendall(probe_frame())
            return read_frames(sock)[1]
    except OSError:
        return False


def request(bootstrap: str, api_key: int, version: int, body: dict):
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=HANG_S) as sock:
        sock.sendall(encode_request(api_key, version, 9, "fuzz-check", body))
        (size,) = struct.unpack(">i", read_exactly(sock, 4))
        return decode_response(api_key, version, read_exactly(sock, size))[1]


def read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise ConnectionError("closed by the broker")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def acked_produce(bootstrap: str, rng: random.Random, topic: str) -> tuple[int, bytes] | None:
    """Produce a valid batch; its (base offset, batch bytes) if acknowledged."""
    raw = valid_batch(rng)
    answer = request(bootstrap, ApiKey.PRODUCE, 9, produce_body(topic, raw)).responses[0].partition_responses[0]
    return (answer.base_offset, raw) if answer.error_code == ErrorCode.NONE else None


def check_logs(bootstrap: str, acked: list[tuple[str, int, bytes]]) -> list[str]:
    """Read every topic back: whole, valid batches, increasing offsets, every acked batch's records."""
    problems = []
    stored: dict[tuple[str, int], RecordBatch] = {}
    for topic in TOPICS:
        offset = 0
        while True:
            response = request(bootstrap, ApiKey.FETCH, 12, {
                "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 4 << 20, "isolation_level": 0, "session_id": 0,
                "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 4 << 20}]}]})
            data = response.responses[0].partitions[0].records or b""
            batches = list(iter_batches(data))
            if not batches:
                break
            for batch in batches:
                if not isinstance(batch, RecordBatch) or not batch.crc_is_valid() or batch.base_offset < offset:
                    problems.append(f"{topic}: bad batch at offset {offset}: {batch!r}")
                    return problems
                try:
                    validate_records(batch, LENIENT, int(time.time() * 1000))
                except Exception as error:  # noqa: BLE001 - any failure is a finding
                    problems.append(f"{topic}: batch at {batch.base_offset} fails its record walk: {error}")
                stored[(topic, batch.base_offset)] = RecordBatch(bytes(batch.buffer))
                offset = batch.next_offset
    for topic, base_offset, raw in acked:
        found = stored.get((topic, base_offset))
        want = [(r.key, r.value) for r in RecordBatch(raw).records()]
        if found is None or [(r.key, r.value) for r in found.records()] != want:
            problems.append(f"{topic}: acknowledged batch at offset {base_offset} is missing or differs")
    return problems


def fuzz(broker: BrokerProcess, rng: random.Random, args) -> tuple:
    """The fuzzing run itself, then the clean restart and the check of what was stored."""
    crashes = hangs = 0
    acked: list[tuple[str, int, bytes]] = []
    bootstrap = broker.start()
    for topic, configs in zip(TOPICS, ({}, {"cleanup.policy": "compact"})):
        request(bootstrap, ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": topic, "num_partitions": 1,
                "replication_factor": 1, "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                "timeout_ms": 5000})
    base = templates(rng)
    host, port = bootstrap.rsplit(":", 1)
    sent = handled = closed_bursts = 0
    started = time.monotonic()
    next_report = 100_000
    while sent < args.frames:
        burst = [fuzzed_frame(rng, base, may_close=index == FRAMES_PER_BURST - 1)
                 for index in range(FRAMES_PER_BURST)]
        try:
            with socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S) as sock:
                sock.settimeout(SOCKET_TIMEOUT_S)
                sock.sendall(b"".join(burst) + probe_frame())
                sock.shutdown(socket.SHUT_WR)  # a frame whose size lies is not waited for: EOF ends it
                answers, survived = read_frames(sock)
        except OSError:
            answers, survived = [], False
        sent += len(burst)
        handled += len(answers) - survived + (not survived)  # answered, or the frame that closed it
        if not survived:
            closed_bursts += 1
            if not broker.running:
                crashes += 1
                print(f"CRASH after {sent} frames (seed {args.seed}); see {broker.stderr_path}", flush=True)
                bootstrap = broker.start()
            elif not alive(bootstrap):
                hangs += 1
                print(f"HANG after {sent} frames (seed {args.seed})", flush=True)
        if sent // 10_000 != (sent - len(burst)) // 10_000:  # now and then, a produce that must be kept
            topic = rng.choice(TOPICS)
            if (kept := acked_produce(bootstrap, rng, topic)) is not None:
                acked.append((topic, *kept))
        if sent >= next_report:
            next_report += 100_000
            print(f"{sent} frames in {time.monotonic() - started:.0f} s "
                  f"({closed_bursts} bursts ended by a closed connection)", flush=True)
    elapsed_s = time.monotonic() - started
    exit_code = broker.stop()
    with open(broker.stderr_path, errors="replace") as log:
        handler_errors = sum("internal error" in line for line in log)
    bootstrap = broker.start()  # recovery of everything the fuzz stored
    corruption = check_logs(bootstrap, acked)
    broker.stop()
    return crashes, hangs, handler_errors, corruption, exit_code, sent, handled, elapsed_s, acked


def fuzz_cluster(base_dir: str, rng: random.Random, frames: int, seed: int) -> tuple:
    """The cluster part: client and inter-node frames to each node in turn, then the checks."""
    cluster = ClusterProcess(base_dir, CLUSTER_NODES, overrides={"min.insync.replicas": "2",
                                                                 "message.max.bytes": "200000"})
    cluster.start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # must outlive its futures
        for future in admin.create_topics([NewTopic(topic, 1, CLUSTER_NODES)
                                           for topic in (CLUSTER_TOPIC, *TOPICS)]).values():
            future.result(60)
        acked = [b"before-%d" % i for i in range(CLUSTER_CHECK_VALUES)]
        if (problem := serves_a_client(cluster.bootstrap, CLUSTER_TOPIC, acked, time.monotonic() + 60)) is not None:
            raise RuntimeError(f"the cluster does not serve before the fuzz: {problem}")
        view = cluster_view(cluster, [CLUSTER_TOPIC, *TOPICS])
        base = templates(rng)
        crashes = hangs = sent = handled = 0
        started = time.monotonic()
        next_report = 10_000
        while sent < frames:
            node_id = cluster.broker_ids[(sent // FRAMES_PER_BURST) % CLUSTER_NODES]
            last = FRAMES_PER_BURST - 1
            burst = [internode_frame(rng, view, may_close=index == last) if rng.random() < 0.5
                     else fuzzed_frame(rng, base, may_close=index == last) for index in range(FRAMES_PER_BURST)]
            answered, survived = send_burst(cluster.addresses[node_id], burst, SOCKET_TIMEOUT_S)
            sent += len(burst)
            handled += answered + (not survived)
            if not cluster.nodes[node_id].running:
                crashes += 1
                print(f"CRASH of node {node_id} after {sent} cluster frames (seed {seed}); see "
                      f"{cluster.nodes[node_id].stderr_path}", flush=True)
                cluster.start_node(node_id)
            elif not survived and not send_burst(cluster.addresses[node_id], [], HANG_S)[1]:
                hangs += 1
                print(f"HANG of node {node_id} after {sent} cluster frames (seed {seed})", flush=True)
            if sent >= next_report:
                next_report += 10_000
                print(f"{sent} cluster frames in {time.monotonic() - started:.0f} s", flush=True)
        elapsed_s = time.monotonic() - started
        after = [b"after-%d" % i for i in range(CLUSTER_CHECK_VALUES)]
        unserved = serves_a_client(cluster.bootstrap, CLUSTER_TOPIC, after, time.monotonic() + CLUSTER_SETTLE_S)
        errors = internal_errors(cluster)
    finally:
        cluster.stop()
    corruption = log_problems(cluster, CLUSTER_TOPIC, acked + after)
    return crashes, hangs, errors, corruption, unserved, sent, handled, elapsed_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1_000_000, help="frames to send")
    parser.add_argument("--cluster-frames", type=int, default=50_000, help="frames to send to the 3-node cluster")
    parser.add_argument("--seed", type=int, default=1, help="seed of the generator (a run is reproducible)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the broker is killed on the way out
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="kspec-fuzz-") as tmp:
        broker = BrokerProcess(f"{tmp}/data", overrides={"message.max.bytes": "200000"})
        try:
            summary = fuzz(broker, rng, args) if args.frames else (0, 0, 0, [], 0, 0, 0, 1.0, [])
        finally:
            if broker.running:
                broker.kill()
        crashes, hangs, handler_errors, corruption, exit_code, sent, handled, elapsed_s, acked = summary
        for problem in corruption:
            print("LOG CORRUPTION:", problem)
        print(f"single node: frames {sent} sent, {handled} handled by the broker (answered, or closing the "
              f"connection), in {elapsed_s:.0f} s ({sent / elapsed_s:.0f}/s), seed {args.seed}: crashes {crashes}, "
              f"hangs {hangs}, internal errors {handler_errors}, log corruption {len(corruption)} "
              f"({len(acked)} acknowledged batches checked), clean stop exit {exit_code}", flush=True)
        cluster_summary = fuzz_cluster(f"{tmp}/cluster", rng, args.cluster_frames, args.seed)
    c_crashes, c_hangs, c_errors, c_corruption, unserved, c_sent, c_handled, c_elapsed_s = cluster_summary
    for problem in c_corruption:
        print("LOG CORRUPTION (cluster):", problem)
    for line in c_errors[:20]:
        print("INTERNAL ERROR (cluster):", line)
    print(f"3-node cluster: frames {c_sent} sent (half inter-node RPCs), {c_handled} handled, in {c_elapsed_s:.0f} s "
          f"({c_sent / c_elapsed_s:.0f}/s): crashes {c_crashes}, hangs {c_hangs}, internal errors {len(c_errors)}, "
          f"log corruption {len(c_corruption)} ({2 * CLUSTER_CHECK_VALUES} acknowledged values checked on "
          f"{CLUSTER_NODES} replicas, and the metadata log), client served afterwards: {unserved or 'yes'}")
    print(f"total: {sent + c_sent} frames")
    found = (crashes or hangs or handler_errors or corruption or exit_code
             or c_crashes or c_hangs or c_errors or c_corruption or unserved)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
