"""Fixtures: one `kspec broker` process, or one 3-node cluster, per test module; a helper to create topics."""
from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from reference.process import FAST_FAILOVER, BrokerProcess, ClusterProcess


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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One 3-node `kspec broker` cluster (ClusterProcess) per test module."""
    with ClusterProcess(str(tmp_path_factory.mktemp("txn-cluster")), 3, overrides=FAST_FAILOVER) as started:
        yield started
