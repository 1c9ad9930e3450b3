"""A real `kspec broker` whose file descriptors run out (RLIMIT_NOFILE lowered on the live
process) logs the failed accepts, keeps running, and serves a new client once connections
are released: EMFILE does not end its accept loop. (Other tasks that open files meanwhile, the
tick's flush among them, fail and are restarted by the supervisor.)"""
from __future__ import annotations

import os
import resource
import socket
import time

from reference.process import BrokerProcess
from reference.protocol.api_keys import ApiKey
from tests.broker.conftest import RawClient

WAIT_S = 30.0
SPARE_DESCRIPTORS = 8  # what the broker may still open before accept fails with EMFILE
CONNECTIONS = 40


def wait_for_line(path: str, text: str) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        with open(path, errors="replace") as log:
            if text in log.read():
                return True
        time.sleep(0.1)
    return False


def test_a_broker_out_of_file_descriptors_survives_and_serves_again(tmp_path):
    with BrokerProcess(str(tmp_path / "data")) as broker:
        pid = broker.process.pid
        _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        open_now = len(os.listdir(f"/proc/{pid}/fd"))
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (open_now + SPARE_DESCRIPTORS, hard))
        host, port = broker.bootstrap.rsplit(":", 1)
        held = [socket.create_connection((host, int(port)), timeout=WAIT_S) for _ in range(CONNECTIONS)]
        try:
            assert wait_for_line(broker.stderr_path, "accept failed"), "the broker logs the failed accepts"
            assert broker.running
        finally:
            for connection in held:
                connection.close()
        client = RawClient(broker.bootstrap)
        try:
            response = client.request(ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                            "include_topic_authorized_operations": False})
            assert [b.node_id for b in response.brokers] == [0]
        finally:
            client.close()
        with open(broker.stderr_path, errors="replace") as log:
            text = log.read()
        assert "EMFILE" in text and "task accept failed" not in text, "accept errors are survived, not restarts"
        assert text.count("accept failed") <= 3, "rate-limited to one line per 10 s"
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (1024, hard))
    assert broker.process.returncode == 0
