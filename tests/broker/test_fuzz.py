"""PRO-1: random and mutated frames never hurt the broker: it answers or closes that
connection, keeps serving everyone else, and stored data stays intact."""
from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from reference.protocol.messages import encode_request
from reference.protocol.records import iter_batches

from .conftest import RawClient
from .helpers import batch_of, create_topic, fetch, fetch_request, produce, produce_request

FUZZ_TOPIC = "fuzz-target"
STORED = [b"stored-%d" % i for i in range(5)]

VALID_FRAMES = [
    encode_request(ApiKey.API_VERSIONS, 3, 1, "fuzz", {"client_software_name": "a", "client_software_version": "1"}),
    encode_request(ApiKey.METADATA, 12, 2, "fuzz", {"topics": None, "allow_auto_topic_creation": False}),
    encode_request(ApiKey.FETCH, 12, 3, "fuzz", fetch_request(FUZZ_TOPIC, 0)),
    encode_request(ApiKey.PRODUCE, 9, 4, "fuzz", produce_request("fuzz-scratch", batch_of([b"x"]))),
    encode_request(ApiKey.CREATE_TOPICS, 7, 5, "fuzz", {"topics": [{"name": "fuzz-new", "num_partitions": 1,
                                                                    "replication_factor": 1}]}),
]


@pytest.fixture(scope="module")
def broker_with_data(broker):
    client = RawClient(broker.bootstrap)
    if create_topic(client, FUZZ_TOPIC).error_code == ErrorCode.NONE:
        produce(client, FUZZ_TOPIC, batch_of(STORED))
    client.close()
    return broker


@st.composite
def mutated_frame(draw):
    frame = bytearray(draw(st.sampled_from(VALID_FRAMES)))
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(4, len(frame) - 1))
        frame[position] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        frame = frame[: draw(st.integers(4, len(frame)))]
        frame[:4] = struct.pack(">i", len(frame) - 4)
    return bytes(frame)


random_frame = st.binary(min_size=0, max_size=200).map(lambda body: struct.pack(">i", len(body)) + body)


def send_and_drain(bootstrap: str, frame: bytes) -> None:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(frame)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(2)
        try:
            while sock.recv(65536):
                pass
        except (socket.timeout, ConnectionResetError):
            pass


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(mutated_frame(), random_frame))
def test_the_broker_survives_random_and_mutated_frames(broker_with_data, frame):
    send_and_drain(broker_with_data.bootstrap, frame)


def test_after_the_fuzzing_the_broker_serves_and_the_data_is_intact(broker_with_data):
    client = RawClient(broker_with_data.bootstrap)
    answer = fetch(client, FUZZ_TOPIC, 0)
    assert [r.value for b in iter_batches(answer.records) for r in b.records()] == STORED
    assert produce(client, FUZZ_TOPIC, batch_of([b"after"])).error_code == ErrorCode.NONE
    client.close()
    with open(broker_with_data.stderr_path, encoding="utf-8") as log:
        assert "internal error" not in log.read()
