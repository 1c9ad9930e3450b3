"""Every failure is a verdict: the suite's helpers, pointed at a real TCP server that answers
like a broker with one defect, fail with a message that names the request, what came back and
the rule Kafka follows, and carry on with a fresh connection; a whole `kspec conformance` run
against it puts that message in the JSON, the JUnit XML and the HTML matrix."""
from __future__ import annotations

import socket
import struct
import sys
import threading
import xml.etree.ElementTree as ElementTree

import pytest
from suite_process import run_suite

from conformance import ops
from conformance.api_coverage import probe_api
from conformance.plugin import verdict
from conformance.target import Target
from conformance.wire import ConnectionClosed, Finding, WireClient, WireTimeout
from reference.protocol.api_keys import ApiKey
from reference.protocol.framing import FrameDecoder
from reference.protocol.headers import parse_request_header
from reference.protocol.messages import decode_request, encode_response
from reports.conformance import write_report

TOPIC = "t"
ADVERTISED = {ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (1, 12), ApiKey.CREATE_TOPICS: (2, 7),
              ApiKey.PRODUCE: (3, 9), ApiKey.FETCH: (4, 12), ApiKey.LIST_OFFSETS: (1, 7)}
DEFECTS = ("none", "wrong-partition", "close-on-fetch", "other-correlation-id", "undecodable-fetch", "silent-fetch",
           "close-on-connect")


class DefectiveBroker:
    """Node node_id: it answers ApiVersions, Metadata (listing itself and the other brokers
    given to it), CreateTopics, Produce and Fetch as a broker would, except for its defect (one
    of DEFECTS), which hits every Produce or Fetch, or with close-on-connect every connection."""

    def __init__(self, defect: str, node_id: int = 0) -> None:
        assert defect in DEFECTS, defect
        self.defect = defect
        self.node_id = node_id
        self.other_brokers: dict[int, str] = {}
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections_accepted = 0
        self._connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.close()
        for connection in self._connections:
            connection.close()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.connections_accepted += 1
            self._connections.append(connection)
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        decoder = FrameDecoder(1 << 24)
        with connection:
            while self.defect != "close-on-connect":
                try:
                    data = connection.recv(1 << 20)
                except OSError:
                    return
                if not data:
                    return
                for frame in decoder.feed(data):
                    header, offset = parse_request_header(frame)
                    answer = self._answer(header, decode_request(header.api_key, header.api_version, frame[offset:]))
                    if answer is None:
                        return  # closes the connection
                    connection.sendall(answer)

    def _answer(self, header, request) -> bytes | None:
        key, version, correlation_id = header.api_key, header.api_version, header.correlation_id
        if key == ApiKey.API_VERSIONS:
            body = {"error_code": 0, "api_keys": [{"api_key": k, "min_version": low, "max_version": high}
                                                  for k, (low, high) in ADVERTISED.items()]}
        elif key == ApiKey.METADATA:
            topics = [{"name": t.name, "error_code": 0, "partitions": [
                {"partition_index": 0, "leader_id": 0, "replica_nodes": [0], "isr_nodes": [0]}]}
                for t in request.topics or ()]
            brokers = {self.node_id: self.address, **self.other_brokers}
            body = {"brokers": [{"node_id": n, "host": "127.0.0.1", "port": int(a.rpartition(":")[2])}
                                for n, a in brokers.items()],
                    "controller_id": 0, "cluster_id": "defective", "topics": topics}
        elif key == ApiKey.CREATE_TOPICS:
            body = {"topics": [{"name": t.name, "error_code": 0} for t in request.topics]}
        elif key == ApiKey.PRODUCE:
            partition = 7 if self.defect == "wrong-partition" else 0
            body = {"responses": [{"name": t.name, "partition_responses": [{"index": partition, "error_code": 0,
                                                                              "base_offset": 0}]}
                                  for t in request.topic_data]}
        elif key == ApiKey.FETCH:
            if self.defect == "close-on-fetch":
                return None
            if self.defect == "silent-fetch":
                return b""
            if self.defect == "other-correlation-id":
                correlation_id += 100
            body = {"responses": [{"topic": t.topic, "partitions": [{"partition_index": 0, "error_code": 0,
                                                                      "high_watermark": 0, "records": b""}]}
                                  for t in request.topics]}
        else:
            raise AssertionError(f"the defective broker was not built to answer API key {key}")
        if key == ApiKey.FETCH and self.defect == "undecodable-fetch":
            return struct.pack(">ii", 8, correlation_id) + b"\xff" * 4  # a header tag count that runs past the end
        return encode_response(key, version, correlation_id, body)


@pytest.fixture
def broker(request):
    node = DefectiveBroker(request.param)
    yield node
    node.close()


def _target(broker: DefectiveBroker) -> Target:
    return Target(bootstrap=broker.address)


@pytest.mark.parametrize("broker", ["wrong-partition"], indirect=True)
def test_a_produce_answered_for_another_partition_names_what_was_listed(broker):
    target = _target(broker)
    with target.wire() as wire, pytest.raises(Finding) as found:
        ops.produce(wire, target.capabilities, TOPIC, ops.values_batch([b"x"]))
    message = str(found.value)
    assert message.startswith(f"PRODUCE v9 to {TOPIC}-0 at {broker.address}: the response has no partition 0 "
                              "(it lists [7])"), message
    assert "Kafka answers for every topic and partition a request names" in message


@pytest.mark.parametrize("broker", ["close-on-fetch"], indirect=True)
def test_a_connection_closed_at_a_fetch_names_the_fetch_and_the_next_request_reconnects(broker):
    target = _target(broker)
    with target.wire() as wire:
        with pytest.raises(ConnectionClosed) as found:
            ops.fetch(wire, target.capabilities, TOPIC, 0)
        message = str(found.value)
        assert message.startswith(f"FETCH v12 (correlation id 1) to {broker.address}: the broker closed the "
                                  "connection with 4 of 4 bytes still expected, before the response"), message
        assert "Kafka answers every request but an acks=0 Produce" in message
        produced = ops.produce(wire, target.capabilities, TOPIC, ops.values_batch([b"x"]))
    assert produced.error_code == 0
    assert broker.connections_accepted == 3  # discovery, the closed one, the fresh one


@pytest.mark.parametrize("broker", ["other-correlation-id"], indirect=True)
def test_an_answer_with_another_correlation_id_is_named(broker):
    target = _target(broker)
    with target.wire() as wire, pytest.raises(Finding, match=r"FETCH v12 \(correlation id 1\) .*: the response "
                                                             "carries correlation id 101; Kafka answers a "
                                                             "connection's requests in order"):
        ops.fetch(wire, target.capabilities, TOPIC, 0)


@pytest.mark.parametrize("broker", ["undecodable-fetch"], indirect=True)
def test_an_answer_that_does_not_decode_at_the_version_asked_for_is_named(broker):
    target = _target(broker)
    with target.wire() as wire, pytest.raises(Finding, match=r"FETCH v12 .*: the \d+-byte response does not "
                                                             "decode at v12 .*; Kafka answers at the version"):
        ops.fetch(wire, target.capabilities, TOPIC, 0)


@pytest.mark.parametrize("broker", ["silent-fetch"], indirect=True)
def test_silence_names_the_request_awaited(broker):
    with WireClient(broker.address, timeout_s=0.3) as wire:
        with pytest.raises(WireTimeout, match=r"FETCH v12 \(correlation id 1\) .*: no complete response within "
                                              r"0\.3 s \(0 of 4 bytes\)"):
            ops.fetch(wire, Target(bootstrap=broker.address).capabilities, TOPIC, 0)


def test_a_stopped_bootstrap_broker_is_never_asked(tmp_path):
    """A broker the test stopped may still accept connections (through docker's proxy, say) and
    reset them: the next request goes to a live broker instead."""
    first, second = DefectiveBroker("none", node_id=1), DefectiveBroker("none", node_id=2)
    first.other_brokers, second.other_brokers = {2: second.address}, {1: first.address}
    try:
        target = Target(bootstrap=f"{first.address},{second.address}",
                        node_stop_command=f"{sys.executable} -c pass {{node_id}}",
                        node_start_command=f"{sys.executable} -c pass {{node_id}}")
        assert [b.node_id for b in target.capabilities.brokers] == [1, 2]
        target.stop_node(1)
        first.defect = "close-on-connect"
        accepted_by_first = first.connections_accepted
        with target.wire() as wire:
            produced = ops.produce(wire, target.capabilities, TOPIC, ops.values_batch([b"x"]))
        assert produced.error_code == 0 and wire.address == second.address
        assert target.partition_leaders(TOPIC) == {0: 0}
        assert first.connections_accepted == accepted_by_first
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("broker", ["close-on-fetch"], indirect=True)
def test_api_coverage_names_the_advertised_versions_not_answered(broker, tmp_path):
    with WireClient(broker.address) as wire:
        fetch = probe_api(wire, ApiKey.FETCH, ADVERTISED[ApiKey.FETCH])
        metadata = probe_api(wire, ApiKey.METADATA, ADVERTISED[ApiKey.METADATA])
    assert fetch.answered == [] and sorted(fetch.failed) == list(range(4, 13))
    assert "FETCH v4 (correlation id 1)" in fetch.failed[4] and "closed the connection" in fetch.failed[4]
    assert metadata.answered == list(range(1, 13)) and not metadata.failed  # on fresh connections
    document = {"target": {"bootstrap_servers": broker.address}, "started_at": "now", "duration_s": 1.0,
                "totals": {"passed": 0, "failed": 0, "skipped": 0}, "tests": [],
                "api_coverage": [fetch.to_json(), metadata.to_json()]}
    page = (write_report(document, tmp_path)).read_text()
    assert "<th>advertised</th>" in page and "v4-v12" in page and "v1-v12" in page
    assert "FETCH v12 (correlation id 9)" in page


def test_an_exception_the_checks_did_not_anticipate_is_reported_with_the_last_request():
    WireClient.last_exchange = "FETCH v12 (correlation id 4) sent to 127.0.0.1:1: answered"
    with pytest.raises(IndexError) as raised:
        [][0]
    line = verdict("ORD-3", raised)
    assert line.startswith("ORD-3: the check stopped on IndexError: list index out of range at test_verdicts.py:"), line
    assert line.endswith("last wire request: FETCH v12 (correlation id 4) sent to 127.0.0.1:1: answered")


@pytest.mark.parametrize("broker", ["wrong-partition"], indirect=True)
def test_a_run_carries_the_verdict_into_json_junit_and_html(broker, tmp_path):
    exit_code, document, stdout = run_suite(
        broker.address, tmp_path, "--quick", "--only", "test_fetch_beyond_the_high_watermark_is_offset_out_of_range",
        "--report", str(tmp_path), "--junit-xml", str(tmp_path / "junit.xml"))
    assert exit_code == 1, stdout[-3000:]
    (test,) = document["tests"]
    expected = "VIS-1 PRO-1: PRODUCE v9 to kspec-out-of-range-"
    assert test["outcome"] == "failed" and test["message"].startswith(expected), test
    assert "the response has no partition 0 (it lists [7])" in test["message"]
    (failure,) = ElementTree.parse(tmp_path / "junit.xml").getroot().iter("failure")
    assert failure.get("message").startswith(expected), failure.get("message")
    assert "the response has no partition 0 (it lists [7])" in (tmp_path / "conformance.html").read_text()
