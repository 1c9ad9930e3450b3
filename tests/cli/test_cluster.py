"""`kspec cluster status`: brokers, controller quorum, partition health; `kspec cluster` alone prints help;
`kspec cluster --nodes N` prints node commands that stop and start its nodes."""
from __future__ import annotations

import shlex
import signal
import socket
import subprocess

import pytest
from kafka.protocol.api_key import ApiKey

from .helpers import CLI_TIMEOUT_S, KSPEC, kspec


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
    """A reference cluster's nodes serve DescribeQuorum (forwarded to the Raft leader); one node has no quorum."""
    assert target.offers(ApiKey.DescribeQuorum) == (target.node_count > 1)
    run = kspec("cluster", "status", "-b", target.bootstrap)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    quorum_at = next(i for i, line in enumerate(lines) if line.startswith("Controller quorum:"))
    if target.offers(ApiKey.DescribeQuorum):
        admin = target.admin()
        try:
            controller_id = admin.describe_cluster()["controller_id"]
        finally:
            admin.close()
        assert lines[quorum_at].startswith(f"Controller quorum: leader {controller_id} ")
        header = lines[quorum_at + 1].split()
        assert header[:4] == ["NODE", "ROLE", "LOG-END-OFFSET", "LAG"]
        voters = {row.split()[0]: row.split() for row in lines[quorum_at + 3:quorum_at + 3 + target.node_count]}
        assert set(voters) == {str(node) for node in range(1, target.node_count + 1)}
        assert voters[str(controller_id)][1] == "leader" and voters[str(controller_id)][3] == "0"
        assert all(int(row[3]) >= 0 for row in voters.values())
    else:
        assert lines[quorum_at] == "Controller quorum: not offered by this broker (DescribeQuorum is not in its ApiVersions)."


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


def test_local_cluster_prints_node_commands_that_stop_and_start_a_node(tmp_path):
    process = subprocess.Popen([*KSPEC, "cluster", "--nodes", "1", "--data-dir", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
    try:
        lines = []
        for line in process.stdout:
            lines.append(line)
            if "bootstrap=" in line:
                break
        control = next(line for line in lines if line.startswith("node control: "))
        stop, start = (shlex.split(control)[i].replace("{node_id}", "1") for i in (3, 5))
        bootstrap = lines[-1].split("bootstrap=", 1)[1].split()[0]
        host, port = bootstrap.rsplit(":", 1)
        subprocess.run(shlex.split(stop), check=True, timeout=CLI_TIMEOUT_S)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, int(port)), timeout=5).close()
        subprocess.run(shlex.split(start), check=True, timeout=CLI_TIMEOUT_S)
        run = kspec("topics", "list", "-b", bootstrap)
        assert run.returncode == 0, run.stderr
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(CLI_TIMEOUT_S) == 0
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=5).close()
