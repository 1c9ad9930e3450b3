"""Malformed traffic: the hardening work's frame fuzzer, and the fault-run nemesis that sends it (PRO-1).

The frames (used by benchmarks/bench_fuzz.py too) are valid requests mutated by a seeded
generator: bytes flipped in the frame, in a batch's records (CRC made right again) or in a
compressed stream, sizes and counts that lie, truncations, random api keys and versions,
noise. Their produce requests go to FUZZ_TOPICS, which a fault run does not use: a mutated
batch whose records still walk is a well-formed request, and may be stored.

To the run's own topics the nemesis sends only requests that are malformed beyond doubt:
a Produce whose batch fails its CRC, and a Produce cut short (its frame size made to fit).
Their keys and values are 8-byte longs below zero, which the workload never sends, so a
stored one is seen by the checker (a replica holds a value no send carried: PRO-1).

`send_bursts` sends BURSTS_PER_NODE bursts to each reachable node, each on a connection of
its own (FRAMES_PER_BURST frames, then an ApiVersions probe, then the sending side is shut so
a frame whose size lies ends at EOF), and reports what each node did: frames answered and
how many probes came back.
"""
from __future__ import annotations

import random
import socket
import struct
import time

import crc32c

from reference.protocol.api_keys import ApiKey
from reference.protocol.compression import CompressionType
from reference.protocol.messages import encode_request
from reference.protocol.records import ATTRIBUTES_OFFSET, CRC_OFFSET, RECORD_BATCH_OVERHEAD, Record, build_batch

FUZZ_TOPICS = ("fuzz-plain", "fuzz-compacted")
PROBE_CORRELATION_ID = 0x7FFF0000
FRAMES_PER_BURST = 64
BURSTS_PER_NODE = 4
SOCKET_TIMEOUT_S = 2.0
WORKLOAD_FRAMES_P = 0.25  # the share of a burst's frames aimed at the run's own topics


def produce_body(topic: str, records: bytes, acks: int = 1) -> dict:
    return {"acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}


def valid_batch(rng: random.Random) -> bytes:
    records = [Record(timestamp=int(time.time() * 1000), key=rng.randbytes(rng.randint(1, 8)),
                      value=rng.randbytes(rng.randint(0, 200)), headers=(("h", b"v"),) if rng.random() < 0.3 else ())
               for _ in range(rng.randint(1, 20))]
    return build_batch(records, compression=rng.choice(list(CompressionType)))


def mutate_batch(rng: random.Random, raw: bytes) -> bytes:
    """Flip bytes after the header (records or compressed stream) or lie in the count, then fix the CRC."""
    data = bytearray(raw)
    if rng.random() < 0.3:
        struct.pack_into(">i", data, RECORD_BATCH_OVERHEAD - 4, rng.randint(-2, 40))
    if len(data) > RECORD_BATCH_OVERHEAD:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(RECORD_BATCH_OVERHEAD, len(data))] = rng.randrange(256)
    struct.pack_into(">I", data, CRC_OFFSET, crc32c.crc32c(bytes(data[ATTRIBUTES_OFFSET:])))
    return bytes(data)


def templates(rng: random.Random, topics: tuple[str, ...] = FUZZ_TOPICS) -> list[bytes]:
    return [
        encode_request(ApiKey.API_VERSIONS, 3, 1, "fuzz", {"client_software_name": "f", "client_software_version": "1"}),
        encode_request(ApiKey.METADATA, 12, 2, "fuzz", {"topics": None, "allow_auto_topic_creation": False}),
        encode_request(ApiKey.FETCH, 12, 3, "fuzz", {
            "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 16, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "topics": [{"topic": topics[0], "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 16}]}]}),
        encode_request(ApiKey.LIST_OFFSETS, 7, 4, "fuzz", {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topics[0], "partitions": [{"partition_index": 0, "timestamp": -1}]}]}),
        encode_request(ApiKey.CREATE_TOPICS, 7, 5, "fuzz", {"topics": [
            {"name": "fuzz-new-%d" % rng.randrange(1000), "num_partitions": 1, "replication_factor": 1}],
            "timeout_ms": 1000}),
    ]


def fuzzed_frame(rng: random.Random, base: list[bytes], *, may_close: bool,
                 topics: tuple[str, ...] = FUZZ_TOPICS) -> bytes:
    """One frame; unless `may_close`, only kinds the broker answers without closing the connection."""
    choice = rng.random() * (1.0 if may_close else 0.55)
    if choice < 0.35:  # a produce whose batch has valid framing and CRC but mutated contents
        return encode_request(ApiKey.PRODUCE, 9, 6, "fuzz",
                              produce_body(rng.choice(topics), mutate_batch(rng, valid_batch(rng))))
    if choice < 0.55:  # a valid request, unchanged (keeps the connection going)
        return rng.choice(base)
    if choice < 0.65:  # noise
        body = rng.randbytes(rng.randint(0, 300))
        return struct.pack(">i", len(body)) + body
    frame = bytearray(rng.choice(base))  # a valid request with bytes flipped, truncated or a lying size
    for _ in range(rng.randint(1, 4)):
        frame[rng.randrange(4, len(frame))] = rng.randrange(256)
    if rng.random() < 0.3:
        frame = frame[: rng.randint(4, len(frame))]
        struct.pack_into(">i", frame, 0, len(frame) - 4)
    if rng.random() < 0.05:
        struct.pack_into(">i", frame, 0, rng.randint(-5, 1 << 20))
    return bytes(frame)


def read_frames(sock: socket.socket) -> tuple[list[bytes], bool]:
    """Frames until the probe's answer (True) or a close or timeout (False)."""
    buffer = b""
    frames = []
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except (socket.timeout, ConnectionError):
            return frames, False
        if not chunk:
            return frames, False
        buffer += chunk
        while len(buffer) >= 4 and len(buffer) - 4 >= (size := struct.unpack_from(">i", buffer)[0]):
            frame, buffer = buffer[4:4 + size], buffer[4 + size:]
            frames.append(frame)
            if struct.unpack_from(">i", frame)[0] == PROBE_CORRELATION_ID:
                return frames, True


def probe_frame() -> bytes:
    return encode_request(ApiKey.API_VERSIONS, 3, PROBE_CORRELATION_ID, "fuzz-probe",
                          {"client_software_name": "p", "client_software_version": "1"})




def corrupt_produce(rng: random.Random, topic: str, partition: int, *, cut_short: bool) -> bytes:
    """A Produce of 8-byte negative keys and values to a run topic, malformed: a batch whose CRC
    fails (answered CORRUPT_MESSAGE), or the frame cut short, its size made to fit what is left
    (the broker cannot parse it and closes the connection)."""
    records = [Record(timestamp=int(time.time() * 1000), key=struct.pack(">q", -1 - rng.randrange(1 << 30)),
                      value=struct.pack(">q", -1 - rng.randrange(1 << 30))) for _ in range(rng.randint(1, 5))]
    batch = bytearray(build_batch(records))
    if not cut_short:
        batch[rng.randrange(RECORD_BATCH_OVERHEAD, len(batch))] ^= 1 + rng.randrange(255)  # the CRC now fails
        return encode_request(ApiKey.PRODUCE, 9, 7, "fuzz", _produce(topic, partition, bytes(batch)))
    frame = bytearray(encode_request(ApiKey.PRODUCE, 9, 7, "fuzz", _produce(topic, partition, bytes(batch))))
    frame = frame[: rng.randint(8, len(frame) - 1)]
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    return bytes(frame)


def _produce(topic: str, partition: int, records: bytes) -> dict:
    return {"acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}


def burst(rng: random.Random, run_partitions: list[tuple[str, int]]) -> list[bytes]:
    """One burst: fuzzed frames and malformed Produces to the run's partitions. Only the last
    frame may be of a kind that closes the connection, so the others are all handled."""
    base = templates(rng)
    frames = []
    for index in range(FRAMES_PER_BURST):
        last = index == FRAMES_PER_BURST - 1
        if run_partitions and (last or rng.random() < WORKLOAD_FRAMES_P):
            frames.append(corrupt_produce(rng, *rng.choice(run_partitions), cut_short=last and rng.random() < 0.5))
        else:
            frames.append(fuzzed_frame(rng, base, may_close=last))
    return frames


def send_burst(address: tuple[str, int], frames: list[bytes]) -> dict:
    """Send frames then a probe on one connection; what came back."""
    try:
        with socket.create_connection(address, timeout=SOCKET_TIMEOUT_S) as sock:
            sock.settimeout(SOCKET_TIMEOUT_S)
            sock.sendall(b"".join(frames) + probe_frame())
            sock.shutdown(socket.SHUT_WR)
            answers, probe_answered = read_frames(sock)
    except OSError as e:
        return {"frames": len(frames), "error": f"{type(e).__name__}: {e}"}
    return {"frames": len(frames), "answered": len(answers) - probe_answered, "probe_answered": probe_answered}


def send_bursts(nodes: dict[int, tuple[str, int]], rng: random.Random, run_partitions: list[tuple[str, int]]) -> dict:
    """BURSTS_PER_NODE bursts, each on its own connection, to each node (index -> address); per
    node the frames sent and answered, the bursts whose probe came back, and any connection error."""
    found = {}
    for index, address in sorted(nodes.items()):
        outcomes = [send_burst(address, burst(rng, run_partitions)) for _ in range(BURSTS_PER_NODE)]
        found[str(index)] = {"frames": sum(o["frames"] for o in outcomes),
                             "answered": sum(o.get("answered", 0) for o in outcomes),
                             "probes_answered": sum(bool(o.get("probe_answered")) for o in outcomes),
                             "errors": [o["error"] for o in outcomes if "error" in o]}
    return found
