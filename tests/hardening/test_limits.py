"""Connection limits of a real `kspec broker`, by Kafka's names: max.connections.per.ip refuses
the connection over it, max.connections holds new ones back until a slot frees, and
connections.max.idle.ms closes connections that send nothing, a stalled partial frame
included (through all of it a new client is served), and the broker's fetch.max.bytes caps
what one consumer Fetch carries."""
from __future__ import annotations

import socket
import struct
import time

from reference.process import BrokerProcess
from reference.protocol.api_keys import ApiKey
from tests.broker.conftest import RawClient
from tests.broker.helpers import batch_of, create_topic, fetch_request, produce

WAIT_S = 30.0
STALLED_FRAMES = 40
STALLED_FRAME_BYTES = 20 << 20
METADATA = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}


def connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=WAIT_S)


def closed_by_broker(connection: socket.socket, timeout_s: float) -> bool:
    connection.settimeout(timeout_s)
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def served(bootstrap: str) -> bool:
    client = RawClient(bootstrap)
    try:
        return [b.node_id for b in client.request(ApiKey.METADATA, 12, METADATA).brokers] == [0]
    finally:
        client.close()


def test_max_connections_per_ip_refuses_the_one_over_it(tmp_path):
    with BrokerProcess(str(tmp_path / "data"), overrides={"max.connections.per.ip": "5"}) as broker:
        held = [connect(broker.bootstrap) for _ in range(5)]
        extra = connect(broker.bootstrap)
        assert closed_by_broker(extra, WAIT_S)
        assert not any(closed_by_broker(connection, 0.2) for connection in held)
        held.pop().close()
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:  # the broker sees the close when it reads, then frees the slot
            try:
                if served(broker.bootstrap):
                    break
            except ConnectionError:
                time.sleep(0.1)
        else:
            raise AssertionError("a freed slot is not given to a new client")
        for connection in held:
            connection.close()


def test_max_connections_holds_new_connections_until_a_slot_frees(tmp_path):
    with BrokerProcess(str(tmp_path / "data"), overrides={"max.connections": "20"}) as broker:
        held = [connect(broker.bootstrap) for _ in range(20)]
        waiting = RawClient(broker.bootstrap)  # queued in the kernel's backlog, not accepted
        correlation_id = waiting.send(ApiKey.METADATA, 12, METADATA)
        assert waiting.nothing_to_read(1.0)
        held.pop().close()
        assert [b.node_id for b in waiting.receive(ApiKey.METADATA, 12, correlation_id).brokers] == [0]
        waiting.close()
        for connection in held:
            connection.close()


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def test_idle_connections_and_stalled_partial_frames_are_closed_and_new_clients_served(tmp_path):
    with BrokerProcess(str(tmp_path / "data"), overrides={"connections.max.idle.ms": "3000"}) as broker:
        rss_before = rss_bytes(broker.process.pid)
        idle = [connect(broker.bootstrap) for _ in range(200)]
        stalled = [connect(broker.bootstrap) for _ in range(STALLED_FRAMES)]
        for connection in stalled:  # 20 MiB declared, 100 KB sent: buffers grow with what arrives
            connection.sendall(struct.pack(">i", STALLED_FRAME_BYTES) + b"\x00" * 100_000)
        assert served(broker.bootstrap)
        rss_growth = rss_bytes(broker.process.pid) - rss_before
        assert rss_growth < STALLED_FRAMES * STALLED_FRAME_BYTES // 10, f"{rss_growth} bytes for stalled frames"
        started = time.monotonic()
        assert all(closed_by_broker(connection, WAIT_S) for connection in idle + stalled)
        assert time.monotonic() - started < WAIT_S
        assert served(broker.bootstrap)
        for connection in idle + stalled:
            connection.close()


def test_the_broker_fetch_max_bytes_caps_a_consumer_fetch_but_one_batch_always_comes(tmp_path):
    with BrokerProcess(str(tmp_path / "data"), overrides={"fetch.max.bytes": "3000"}) as broker:
        client = RawClient(broker.bootstrap)
        try:
            assert create_topic(client, "capped", partitions=3).error_code == 0
            for partition in range(3):
                assert produce(client, "capped", batch_of([b"x" * 2000]), partition=partition).error_code == 0
            request = fetch_request("capped", 0, max_bytes=1 << 20)
            request["topics"][0]["partitions"] = [{"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                                                  for p in range(3)]
            response = client.request(ApiKey.FETCH, 12, request)
            sizes = [len(p.records or b"") for p in response.responses[0].partitions]
            assert sizes[0] > 2000 and sizes[1:] == [0, 0], sizes
        finally:
            client.close()
