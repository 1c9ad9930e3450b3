"""Fixtures: one `kspec broker` process, or one 3-node cluster, per test module; a helper to create topics."""
from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from reference.process import BrokerProcess, ClusterProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("txn-broker") / "data"
    with BrokerProcess(str(data_dir), overrides={"group.initial.rebalance.delay.ms": "0"}) as process:
        yield process


@pytest.fixture(scope="module")
def create_topic(broker):
    """create_topic(name, partitions=1) on the module's broker."""
    def create(name: str, partitions: int = 1) -> str:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
        return name
    return create


# A node's death is noticed in about a second (as in tests/cluster): heartbeats every 200 ms,
# fenced after 1.5 s without one; a follower that stops fetching leaves the ISR after 2 s.
CLUSTER_FAST_FAILOVER = {
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "1500",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "100",
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One 3-node `kspec broker` cluster (ClusterProcess) per test module."""
    with ClusterProcess(str(tmp_path_factory.mktemp("txn-cluster")), 3, overrides=CLUSTER_FAST_FAILOVER) as started:
        yield started
