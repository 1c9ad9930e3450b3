"""Fuzz a real `kspec broker` with at least a million frames and report what broke.

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

It prints, at the end, and exits 1 if any is non-zero:
- crashes: the broker process ended;
- hangs: a fresh connection's ApiVersions not answered within HANG_S (checked after every
  burst whose probe did not come back);
- internal errors: handler exceptions in the broker's log (a bug, though the broker lives);
- log corruption: after a clean restart, a stored batch that is torn, fails its CRC or its
  record walk, offsets that go backwards, or a record acknowledged to the fuzzer missing.

    python benchmarks/bench_fuzz.py [--frames 1000000] [--seed 1]
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

import crc32c

from reference.process import BrokerProcess
from reference.protocol.api_keys import ApiKey
from reference.protocol.compression import CompressionType
from reference.protocol.errors import ErrorCode
from reference.protocol.messages import decode_response, encode_request
from reference.protocol.records import (
    ATTRIBUTES_OFFSET, CRC_OFFSET, RECORD_BATCH_OVERHEAD, Record, RecordBatch, build_batch, iter_batches,
)
from reference.protocol.validator import ValidationRules, validate_records

FRAMES_PER_BURST = 64
HANG_S = 10.0
SOCKET_TIMEOUT_S = 2.0
TOPICS = ("fuzz-plain", "fuzz-compacted")
PROBE_CORRELATION_ID = 0x7FFF0000
LENIENT = ValidationRules(1 << 30, False, True, (1 << 63) - 1, (1 << 63) - 1)  # structure and offsets only


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


def templates(rng: random.Random) -> list[bytes]:
    return [
        encode_request(ApiKey.API_VERSIONS, 3, 1, "fuzz", {"client_software_name": "f", "client_software_version": "1"}),
        encode_request(ApiKey.METADATA, 12, 2, "fuzz", {"topics": None, "allow_auto_topic_creation": False}),
        encode_request(ApiKey.FETCH, 12, 3, "fuzz", {
            "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 16, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "topics": [{"topic": TOPICS[0], "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 16}]}]}),
        encode_request(ApiKey.LIST_OFFSETS, 7, 4, "fuzz", {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPICS[0], "partitions": [{"partition_index": 0, "timestamp": -1}]}]}),
        encode_request(ApiKey.CREATE_TOPICS, 7, 5, "fuzz", {"topics": [
            {"name": "fuzz-new-%d" % rng.randrange(1000), "num_partitions": 1, "replication_factor": 1}],
            "timeout_ms": 1000}),
    ]


def fuzzed_frame(rng: random.Random, base: list[bytes], *, may_close: bool) -> bytes:
    """One frame; unless `may_close`, only kinds the broker answers without closing the connection."""
    choice = rng.random() * (1.0 if may_close else 0.55)
    if choice < 0.35:  # a produce whose batch has valid framing and CRC but mutated contents
        return encode_request(ApiKey.PRODUCE, 9, 6, "fuzz",
                              produce_body(rng.choice(TOPICS), mutate_batch(rng, valid_batch(rng))))
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
        internal_errors = sum("internal error" in line for line in log)
    bootstrap = broker.start()  # recovery of everything the fuzz stored
    corruption = check_logs(bootstrap, acked)
    broker.stop()
    return crashes, hangs, internal_errors, corruption, exit_code, sent, handled, elapsed_s, acked


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1_000_000, help="frames to send")
    parser.add_argument("--seed", type=int, default=1, help="seed of the generator (a run is reproducible)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the broker is killed on the way out
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="kspec-fuzz-") as tmp:
        broker = BrokerProcess(f"{tmp}/data", overrides={"message.max.bytes": "200000"})
        try:
            summary = fuzz(broker, rng, args)
        finally:
            if broker.running:
                broker.kill()
    crashes, hangs, internal_errors, corruption, exit_code, sent, handled, elapsed_s, acked = summary
    for problem in corruption:
        print("LOG CORRUPTION:", problem)
    print(f"frames {sent} sent, {handled} handled by the broker (answered, or closing the connection), "
          f"in {elapsed_s:.0f} s ({sent / elapsed_s:.0f}/s), seed {args.seed}: crashes {crashes}, "
          f"hangs {hangs}, internal errors {internal_errors}, log corruption {len(corruption)} "
          f"({len(acked)} acknowledged batches checked), clean stop exit {exit_code}")
    return 1 if crashes or hangs or internal_errors or corruption or exit_code else 0


if __name__ == "__main__":
    sys.exit(main())
