"""`kspec cluster status`: brokers, controller quorum, partition health; `kspec cluster` alone prints help."""
from __future__ import annotations

from kafka.protocol.api_key import ApiKey

from .helpers import kspec


def test_status_lists_every_broker_and_the_controller(target):
    run = kspec("cluster", "status", "-b", target.bootstrap)
    assert run.returncode == 0, run.stderr
    admin = target.admin()
    try:
        described = admin.describe_cluster()
    finally:
        admin.close()
    header = run.stdout.splitlines()[0]
    assert header == (f"Cluster: {described['cluster_id']}  Controller: {described['controller_id']}  "
                      f"Brokers: {len(described['brokers'])}")
    rows = {line.split()[0]: line.split() for line in run.stdout.splitlines()[3:3 + len(described["brokers"])]}
    for broker in described["brokers"]:
        row = rows[str(broker["broker_id"])]
        assert row[1:3] == [broker["host"], str(broker["port"])]
        assert (row[-1] == "yes") == (broker["broker_id"] == described["controller_id"])
    assert len(described["brokers"]) == target.node_count


def test_status_reports_the_quorum_or_says_it_is_not_offered(target):
    run = kspec("cluster", "status", "-b", target.bootstrap)
    assert run.returncode == 0, run.stderr
    quorum_line = next(line for line in run.stdout.splitlines() if line.startswith("Controller quorum:"))
    if target.offers(ApiKey.DescribeQuorum):
        assert quorum_line.startswith("Controller quorum: leader ")
        assert "NODE" in run.stdout and "LAG" in run.stdout
    else:
        assert quorum_line == "Controller quorum: not offered by this broker (DescribeQuorum is not in its ApiVersions)."


def test_status_reports_healthy_partitions(target, topic):
    run = kspec("cluster", "status", "-b", target.bootstrap)
    assert run.returncode == 0, run.stderr
    assert "Under-replicated partitions: none" in run.stdout.splitlines()
    assert "Offline partitions: none" in run.stdout.splitlines()


def test_cluster_without_a_subcommand_prints_help():
    run = kspec("cluster")
    assert run.returncode == 0
    assert run.stdout.startswith("Usage: kspec cluster")
    assert "status" in run.stdout
