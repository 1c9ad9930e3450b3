"""An admin request whose records the active controller cannot commit in time ends with one clear
line, not a handler failure. Found by the cluster fuzz: a fuzzed CreateTopics of 500 partitions,
replication factor 3, took the nodes longer than the controller's commit timeout to apply, and
the REQUEST_TIMED_OUT escaped the forwarding path as an internal error (traceback, connection
closed). Here the two other voters are paused for longer than that timeout while the active
controller keeps its leadership (controller.quorum.fetch.timeout.ms is longer still), so its
records cannot commit in time; once they are resumed the records commit and the topic exists."""
from __future__ import annotations

import os
import signal
import time

from reference.process import ClusterProcess
from reference.protocol.api_keys import ApiKey
from reference.server.raft_driver import COMMIT_TIMEOUT_S
from tests.broker.conftest import RawClient
from tests.cluster.conftest import wait_until

from .internode import internal_errors

WAIT_S = 40.0
TOPIC = "decided-late"


def test_records_not_committed_in_time_close_the_connection_with_one_line(tmp_path):
    overrides = {"controller.quorum.fetch.timeout.ms": str(int(6 * COMMIT_TIMEOUT_S * 1000))}
    with ClusterProcess(str(tmp_path), 3, overrides=overrides) as cluster:
        controller = wait_until(lambda: max(cluster.controller_id(), 0), "an active controller")
        others = [node_id for node_id in cluster.nodes if node_id != controller]
        client = RawClient(cluster.addresses[controller])
        client.sock.settimeout(WAIT_S)
        for node_id in others:
            os.kill(cluster.nodes[node_id].process.pid, signal.SIGSTOP)
        try:
            client.send(ApiKey.CREATE_TOPICS, 5, {"topics": [
                {"name": TOPIC, "num_partitions": 1, "replication_factor": 3, "assignments": [], "configs": []}],
                "timeout_ms": 30_000, "validate_only": False})
            closed = client.is_closed_by_peer(timeout_s=COMMIT_TIMEOUT_S + WAIT_S / 2)
        finally:
            for node_id in others:
                os.kill(cluster.nodes[node_id].process.pid, signal.SIGCONT)
            client.close()
        assert closed, "records that did not commit in time leave the client without an answer"
        with open(cluster.nodes[controller].stderr_path, encoding="utf-8", errors="replace") as log:
            assert any("did not commit its records in time" in line for line in log)
        assert internal_errors(cluster) == []
        wait_until(lambda: (metadata := cluster.metadata()) is not None and TOPIC in metadata.topics,
                   "the records commit once the voters are back")
