"""Fixtures for the operator CLI tests: the real `kspec` process against real brokers.

`target` is parametrised over the single reference node and a 3-node reference cluster; the
3-node cases skip, naming what is missing, until `kspec cluster --nodes N` exists. Effects
are checked with kafka-python, a client independent of the CLI's confluent-kafka.
"""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from reference.process import BrokerProcess

from .helpers import Target, kspec, launcher_missing, unique_topic

CLUSTER_READY_TIMEOUT_S = 60.0
CLUSTER_NODES = 3


@pytest.fixture(scope="session")
def single_node(tmp_path_factory):
    process = BrokerProcess(str(tmp_path_factory.mktemp("cli-broker") / "data"))
    process.start()
    yield Target("single-node", process.bootstrap, 1)
    assert process.stop() == 0


@pytest.fixture(scope="session")
def three_nodes(tmp_path_factory):
    reason = launcher_missing()
    if reason:
        pytest.skip(reason)
    data_dir = tmp_path_factory.mktemp("cli-cluster")
    process = subprocess.Popen([sys.executable, "-m", "kspec.cli", "cluster", "--nodes", str(CLUSTER_NODES),
                                "--data-dir", str(data_dir)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               stdin=subprocess.DEVNULL, text=True)
    bootstrap = None
    for line in process.stdout:
        if "bootstrap=" in line:
            bootstrap = line.split("bootstrap=", 1)[1].split()[0]
            break
    if bootstrap is None:
        process.kill()
        pytest.fail("`kspec cluster --nodes 3` printed no bootstrap= line")
    yield Target("three-nodes", bootstrap, CLUSTER_NODES)
    process.send_signal(signal.SIGTERM)
    process.wait(CLUSTER_READY_TIMEOUT_S)


@pytest.fixture(params=["single-node", "three-nodes"])
def target(request) -> Target:
    return request.getfixturevalue("single_node" if request.param == "single-node" else "three_nodes")


@pytest.fixture
def topic(target) -> str:
    """A fresh topic with 3 partitions, replicated to every node of the target."""
    name = unique_topic("cli")
    run = kspec("topics", "create", name, "-b", target.bootstrap, "--partitions", "3",
                "--replication-factor", str(target.node_count))
    assert run.returncode == 0, run.stderr
    return name
