"""The Toxiproxy-compatible proxy layer: its HTTP API and what each toxic does to real TCP traffic."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from faults.proxy import ToxiproxyClient, ToxiproxyError, ToxiproxyServer

LISTEN_HOST = "127.0.0.2"  # the proxy's side of loopback; the echo server is on 127.0.0.1


@pytest.fixture
def echo_port():
    """A TCP echo server on 127.0.0.1; the proxy listens on LISTEN_HOST with the same port."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


# An untoxic round trip on loopback takes well under a millisecond; the bound leaves room for a loaded
# machine while staying below the 300 ms latency toxic the tests add, so the two stay distinguishable.
FAST_ROUND_TRIP_S_MAX = 0.25

def _echo(conn: socket.socket) -> None:
    with conn:
        try:
            while data := conn.recv(65536):
                conn.sendall(data)
        except OSError:
            pass


@pytest.fixture
def toxiproxy(echo_port):
    with ToxiproxyServer() as server:
        client = ToxiproxyClient(server.url)
        client.create_proxy("echo", listen=f"{LISTEN_HOST}:{echo_port}", upstream=f"127.0.0.1:{echo_port}")
        yield client, echo_port


def round_trip_s(sock: socket.socket, payload: bytes = b"ping") -> float:
    started = time.monotonic()
    sock.sendall(payload)
    received = b""
    while len(received) < len(payload):
        received += sock.recv(65536)
    assert received == payload
    return time.monotonic() - started


def test_api_lists_creates_and_deletes_proxies_with_toxiproxy_status_codes(toxiproxy):
    client, port = toxiproxy
    assert client.version()
    assert client.proxies()["echo"]["upstream"] == f"127.0.0.1:{port}"
    with pytest.raises(ToxiproxyError, match="409"):
        client.create_proxy("echo", listen=f"{LISTEN_HOST}:{port}", upstream=f"127.0.0.1:{port}")
    with pytest.raises(ToxiproxyError, match="404"):
        client.add_toxic("missing", "latency")
    with pytest.raises(ToxiproxyError, match="400"):
        client.add_toxic("echo", "no_such_toxic")
    client.delete_proxy("echo")
    assert client.proxies() == {}
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((LISTEN_HOST, port), timeout=1)


def test_latency_toxic_delays_each_chunk_and_removing_it_restores_speed(toxiproxy):
    client, port = toxiproxy
    with socket.create_connection((LISTEN_HOST, port), timeout=5) as sock:
        assert round_trip_s(sock) < FAST_ROUND_TRIP_S_MAX
        toxic = client.add_toxic("echo", "latency", attributes={"latency": 300, "jitter": 20})
        assert toxic["name"] == "latency_downstream" and toxic["attributes"]["latency"] == 300
        assert 0.28 <= round_trip_s(sock) < 1.0, "an open connection gets the new toxic"
        client.remove_toxic("echo", "latency_downstream")
        assert round_trip_s(sock) < FAST_ROUND_TRIP_S_MAX


def test_reset_peer_toxic_resets_the_connection(toxiproxy):
    client, port = toxiproxy
    client.add_toxic("echo", "reset_peer", attributes={"timeout": 0})
    with socket.create_connection((LISTEN_HOST, port), timeout=5) as sock:
        sock.sendall(b"x")
        with pytest.raises(ConnectionResetError):
            sock.recv(10)
    client.reset()
    with socket.create_connection((LISTEN_HOST, port), timeout=5) as sock:
        assert round_trip_s(sock) < FAST_ROUND_TRIP_S_MAX


def test_timeout_toxic_with_zero_timeout_is_a_black_hole(toxiproxy):
    client, port = toxiproxy
    client.add_toxic("echo", "timeout", stream="upstream", attributes={"timeout": 0})
    with socket.create_connection((LISTEN_HOST, port), timeout=0.5) as sock:
        sock.sendall(b"lost")
        with pytest.raises(socket.timeout):
            sock.recv(10)


def test_disabled_proxy_refuses_connections_until_reset(toxiproxy):
    client, port = toxiproxy
    client.set_enabled("echo", False)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((LISTEN_HOST, port), timeout=1)
    client.reset()
    with socket.create_connection((LISTEN_HOST, port), timeout=5) as sock:
        assert round_trip_s(sock) < FAST_ROUND_TRIP_S_MAX


def test_slicer_and_bandwidth_deliver_every_byte_slower(toxiproxy):
    client, port = toxiproxy
    payload = bytes(range(256)) * 40  # 10 KiB
    client.add_toxic("echo", "slicer", attributes={"average_size": 100, "size_variation": 50, "delay": 1000})
    client.add_toxic("echo", "bandwidth", stream="upstream", attributes={"rate": 50})  # 50 KB/s
    with socket.create_connection((LISTEN_HOST, port), timeout=5) as sock:
        assert round_trip_s(sock, payload) >= 0.15
