"""The harness on a host where Docker runs: Docker sets iptables' FORWARD policy to DROP and
turns on bridge netfilter (bridge-nf-call-iptables=1), so frames between two ports of the
harness's bridge meet FORWARD and are dropped. The harness adds one ACCEPT rule for its own
bridge (from DOCKER-USER when it exists, else from FORWARD), removes it on teardown, and
never changes a policy.

Docker's conditions are made in a private network namespace (unshare --net): the same
kernel and iptables, their own FORWARD chain, policy and bridge-nf-call-iptables, so the
host's firewall, and every other run on this machine, is never touched."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PRIVATE_NETNS_TIMEOUT_S = 150
REPOSITORY = Path(__file__).resolve().parents[2]
BRIDGE_NF_CALL_IPTABLES = "/proc/sys/net/bridge/bridge-nf-call-iptables"

# What dockerd does to the filter table (moby's iptables setup): the policy, its users' chain.
DOCKER_POLICY = "iptables -w -P FORWARD DROP"
DOCKER_USER = "iptables -w -N DOCKER-USER && iptables -w -A FORWARD -j DOCKER-USER"


@pytest.fixture
def private_netns(namespaces_available):
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = subprocess.run(["unshare", "--net", "cat", BRIDGE_NF_CALL_IPTABLES], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"br_netfilter is not loaded ({probe.stderr.strip()}): bridged frames never meet iptables here")


def in_docker_conditions(docker_user: bool, script: str) -> subprocess.CompletedProcess:
    """Run a shell script in a private network namespace set up as dockerd sets up a host."""
    setup = ["ip link set lo up", f"echo 1 > {BRIDGE_NF_CALL_IPTABLES}", DOCKER_POLICY]
    if docker_user:
        setup.append(DOCKER_USER)
    return subprocess.run(["unshare", "--net", "sh", "-ec", " && ".join(setup) + "\n" + script],
                          capture_output=True, text=True, timeout=PRIVATE_NETNS_TIMEOUT_S,
                          env={**os.environ, "PYTHONPATH": str(REPOSITORY)})


PROBE = textwrap.dedent("""
    import socket, subprocess, sys
    from faults import net

    def connects(network, source, target):
        code = f"import socket; socket.create_connection(('{network.node_address(target)}', 7000), timeout=1)"
        return subprocess.run(network.wrap(source, [sys.executable, "-c", code])).returncode == 0

    with net.Network("ktfw", nodes=2) as network:
        listener = subprocess.Popen(network.wrap(1, [sys.executable, "-c",
            f"import socket; s = socket.create_server(('{network.node_address(1)}', 7000)); print(flush=True)\\n"
            "while True: s.accept()[0].close()"]), stdout=subprocess.PIPE)
        listener.stdout.readline()
        print("with the harness's rule:", connects(network, 0, 1))
        chain = "KSPEC-ktfw"
        parent = sys.argv[1]
        subprocess.run(["iptables", "-w", "-D", parent, "-j", chain], check=True)
        print("without it:", connects(network, 0, 1))
        subprocess.run(["iptables", "-w", "-I", parent, "1", "-j", chain], check=True)
        listener.kill()
    print("leftovers:", net.leftovers("ktfw"))
""")


@pytest.mark.timeout(PRIVATE_NETNS_TIMEOUT_S + 30)
@pytest.mark.parametrize("docker_user", [True, False], ids=["DOCKER-USER", "FORWARD"])
def test_the_bridge_forwards_under_dockers_drop_policy_with_one_rule_of_its_own_removed_on_teardown(
        private_netns, tmp_path, docker_user):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    parent = "DOCKER-USER" if docker_user else "FORWARD"
    done = in_docker_conditions(docker_user, f"{sys.executable} {probe} {parent}\niptables -w -S")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "with the harness's rule: True" in lines
    assert "without it: False" in lines, "the conditions did not reproduce Docker's: the test proves nothing"
    assert "leftovers: []" in lines
    assert "-P FORWARD DROP" in lines, "the policy is left as it was"
    assert not [line for line in lines if "KSPEC" in line], "teardown removed the chain and its jump"


@pytest.mark.timeout(PRIVATE_NETNS_TIMEOUT_S + 30)
def test_a_three_node_netns_fault_run_passes_with_dockers_rules_in_place(private_netns, tmp_path):
    out_dir = tmp_path / "run"
    done = in_docker_conditions(True, f"{sys.executable} -m kspec.cli faults run --nodes 3 --network netns "
                                      f"--nemesis partition,kill --time-limit 10 --interval 3 --quiet 1 "
                                      f"--concurrency 4 --rate 100 --out {out_dir}\niptables -w -S")
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((out_dir / "results.json").read_text())
    assert results["network_mode"] == "netns" and results["final_reads_complete"]
    assert results["completions"].get("ok", 0) > 100
    lines = done.stdout.splitlines()
    assert "-P FORWARD DROP" in lines and not [line for line in lines if "KSPEC" in line]
