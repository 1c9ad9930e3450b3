"""Fail-stop on the controller quorum's storage, with real processes: when the active
controller's metadata log cannot be written (its `__cluster_metadata-0` directory is a small
tmpfs that the test fills, so the next append fails with ENOSPC), that node stops with one
line naming the failure and a non-zero exit, instead of serving on with its in-memory log
ahead of the file; the other two nodes elect a new controller and clients produce.
"""
from __future__ import annotations

import errno
import os
import subprocess

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from reference.node.broker import METADATA_PARTITION_DIR
from reference.process import FAST_FAILOVER, ClusterProcess

from .conftest import WAIT_S, create_topic, produce_acked, wait_until

TMPFS_SIZE = "512k"  # room for the metadata log of a short test; the filler takes the rest
CREATE_TIMEOUT_S = 5.0

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture
def tmpfs_mounts():
    """mount(path): a small tmpfs at path, unmounted after the test (after the cluster stops)."""
    mounted: list[str] = []

    def mount(path: str) -> None:
        os.makedirs(path, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", path], check=True)
        mounted.append(path)

    yield mount
    for path in mounted:
        subprocess.run(["umount", "--lazy", path], check=False)


def fill(path: str) -> None:
    """Write a file into the filesystem at path until it is full."""
    chunk = b"\0" * 4096
    with open(os.path.join(path, "filler"), "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as error:
            assert error.errno == errno.ENOSPC, error


def test_a_controller_whose_metadata_log_fails_stops_and_the_others_keep_serving(tmp_path, tmpfs_mounts):
    cluster = ClusterProcess(str(tmp_path / "cluster"), 3, overrides=FAST_FAILOVER)
    for node in cluster.nodes.values():
        tmpfs_mounts(os.path.join(node.data_dir, METADATA_PARTITION_DIR))
    try:
        cluster.start()
        failing = wait_until(lambda: max(cluster.controller_id(), 0), "an active controller")
        node = cluster.nodes[failing]
        fill(os.path.join(node.data_dir, METADATA_PARTITION_DIR))
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        creates = 0

        def stopped() -> bool:  # each topic created is a metadata log append on the controller
            nonlocal creates
            if not node.running:
                return True
            creates += 1
            name = f"fill-{creates}"
            try:
                admin.create_topics([NewTopic(name, 1, 1)], request_timeout=CREATE_TIMEOUT_S)[name].result(WAIT_S)
            except KafkaException:
                pass  # the controller stopped while answering
            return not node.running

        wait_until(stopped, f"node {failing} stops")
        assert node.process.wait() != 0
        with open(node.stderr_path, errors="replace") as log:
            lines = [line for line in log if f"kspec broker {failing} stopped: raft storage failed:" in line]
        assert len(lines) == 1 and f"could not append to {node.data_dir}/{METADATA_PARTITION_DIR}" in lines[0], lines
        assert "[Errno 28]" in lines[0], lines  # ENOSPC

        wait_until(lambda: cluster.controller_id() not in (-1, failing), "a new active controller")
        topic = create_topic(cluster, replication_factor=2)
        assert len(produce_acked(cluster, topic, [b"after-%d" % i for i in range(10)])) == 10
    finally:
        cluster.stop()
