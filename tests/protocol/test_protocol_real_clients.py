"""Golden frames: what real clients put on the wire, decoded by kspec's codec.

A tiny TCP server in the test accepts the client's connection, answers ApiVersions and
Metadata with frames encoded by kspec, and records every request frame. The first
ApiVersions is answered with the KIP-511 UNSUPPORTED_VERSION reply, so the test also checks
that real clients understand it and retry with a version they and the broker share.
"""
from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

import pytest

from reference.protocol import schema
from reference.protocol.api_keys import ApiKey
from reference.protocol.codec import Struct
from reference.protocol.framing import FrameDecoder
from reference.protocol.headers import RequestHeader, parse_request_header
from reference.protocol.messages import decode_request, encode_response, unsupported_api_versions_response

CAPTURE_SECONDS_MAX = 20.0
MAX_FRAME_BYTES = 1 << 20
NODE_ID = 1


@dataclass
class Captured:
    header: RequestHeader
    frame_body: bytes
    body: Struct


class CaptureBroker:
    """Answers ApiVersions and Metadata, records every request until it has seen a Metadata."""

    def __init__(self, api_versions_max: int):
        self.api_versions_max = api_versions_max
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.requests: list[Captured] = []
        self.metadata_seen = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)
        self.listener.close()

    def _serve(self) -> None:
        connections: list[threading.Thread] = []
        while not self.stopping.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=self._serve_connection, args=(connection,), daemon=True)
            thread.start()
            connections.append(thread)
        for thread in connections:
            thread.join(timeout=5)

    def _serve_connection(self, connection: socket.socket) -> None:
        decoder = FrameDecoder(MAX_FRAME_BYTES)
        connection.settimeout(0.2)
        with connection:
            while not self.stopping.is_set():
                try:
                    data = connection.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                for frame in decoder.feed(data):
                    reply = self._answer(bytes(frame))
                    if reply is not None:
                        connection.sendall(reply)

    def _answer(self, frame_body: bytes) -> bytes | None:
        header, offset = parse_request_header(frame_body)
        if header.api_key == ApiKey.API_VERSIONS and header.api_version > self.api_versions_max:
            self.requests.append(Captured(header, frame_body, Struct()))
            return unsupported_api_versions_response(header.correlation_id, (0, self.api_versions_max))
        body = decode_request(header.api_key, header.api_version, frame_body[offset:])
        self.requests.append(Captured(header, frame_body, body))
        if header.api_key == ApiKey.API_VERSIONS:
            return encode_response(header.api_key, header.api_version, header.correlation_id, self._api_versions())
        if header.api_key == ApiKey.METADATA:
            self.metadata_seen.set()
            return encode_response(header.api_key, header.api_version, header.correlation_id, self._metadata())
        return None

    def _api_versions(self) -> dict:
        api_keys = []
        for api_key in schema.api_keys():
            low, high = schema.valid_versions(api_key)
            if api_key == ApiKey.API_VERSIONS:
                high = self.api_versions_max
            api_keys.append({"api_key": api_key, "min_version": low, "max_version": high})
        return {"api_keys": api_keys}

    def _metadata(self) -> dict:
        return {
            "brokers": [{"node_id": NODE_ID, "host": "127.0.0.1", "port": self.port}],
            "cluster_id": "kspec-capture",
            "controller_id": NODE_ID,
            "topics": [],
        }


def capture(api_versions_max: int, run_client) -> list[Captured]:
    broker = CaptureBroker(api_versions_max)
    try:
        client_thread = threading.Thread(target=run_client, args=(broker.bootstrap, broker.metadata_seen), daemon=True)
        client_thread.start()
        assert broker.metadata_seen.wait(CAPTURE_SECONDS_MAX), [r.header for r in broker.requests]
        client_thread.join(timeout=CAPTURE_SECONDS_MAX)
    finally:
        broker.close()
    return list(broker.requests)


def run_kafka_python(bootstrap: str, metadata_seen: threading.Event) -> None:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="kspec-golden", request_timeout_ms=10_000)
    try:
        consumer.topics()
    finally:
        consumer.close()


def run_confluent(bootstrap: str, metadata_seen: threading.Event) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "kspec-golden", "log_level": 0})
    producer.list_topics(timeout=10)


def _requests_of(captured: list[Captured], api_key: ApiKey) -> list[Captured]:
    return [request for request in captured if request.header.api_key == api_key]


def test_kafka_python_sends_api_versions_v4_retries_after_kip511_reply_then_metadata():
    captured = capture(api_versions_max=3, run_client=run_kafka_python)
    api_versions = _requests_of(captured, ApiKey.API_VERSIONS)
    assert [request.header.api_version for request in api_versions[:2]] == [4, 3]
    retried = api_versions[1]
    assert retried.header.client_id == "kspec-golden"
    assert retried.body.client_software_name == "kafka-python"
    assert retried.body.client_software_version  # e.g. "3.0.12"
    metadata = _requests_of(captured, ApiKey.METADATA)[0]
    assert metadata.header.client_id == "kspec-golden"
    assert metadata.body.topics is None or metadata.body.topics == []  # all topics (null) or none


def test_confluent_kafka_sends_api_versions_v3_retries_after_kip511_reply_then_metadata():
    captured = capture(api_versions_max=2, run_client=run_confluent)
    api_versions = _requests_of(captured, ApiKey.API_VERSIONS)
    # librdkafka reads the v0-layout reply with the v3 (compact) array count, finds no
    # entries and falls back to v0, as it does against Apache Kafka.
    assert [request.header.api_version for request in api_versions[:2]] == [3, 0]
    first = api_versions[0]
    # The refused v3 request still parses as v3: librdkafka names itself in it.
    software = decode_request(ApiKey.API_VERSIONS, 3, first.frame_body[parse_request_header(first.frame_body)[1]:])
    assert software.client_software_name == "confluent-kafka-python"
    assert software.client_software_version.startswith("2.")
    assert first.header.client_id == "kspec-golden"
    metadata = _requests_of(captured, ApiKey.METADATA)[0]
    assert metadata.header.api_version >= 9  # librdkafka 2.16 goes to Metadata v12/13 (flexible)
    assert metadata.header.client_id == "kspec-golden"
