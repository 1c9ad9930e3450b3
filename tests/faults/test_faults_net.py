"""The namespace layer: real isolation by iptables DROP, healing, and cleanup after a crash."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from faults import net
from faults_helpers import can_connect, network_name, start_listeners, wait_until


def test_each_node_has_its_own_address_reachable_from_the_host_and_the_other_nodes(network):
    start_listeners(network)
    addresses = {network.node_address(n) for n in range(3)}
    assert len(addresses) == 3 and network.host_address not in addresses
    assert all(can_connect(network, None, n) for n in range(3))
    assert can_connect(network, 0, 1) and can_connect(network, 2, 0)


def test_an_isolated_node_cannot_reach_the_others_until_healed(network):
    start_listeners(network)
    network.partition({0: {1, 2}, 1: {0}, 2: {0}})
    assert sorted(network.drop_rules(0)) == [f"{network.node_address(n)}/32" for n in (1, 2)]
    assert not can_connect(network, 0, 1) and not can_connect(network, 0, 2)
    assert not can_connect(network, 1, 0) and not can_connect(network, 2, 0)
    assert can_connect(network, 1, 2), "the majority side still talks"
    assert can_connect(network, None, 0), "clients on the host are not partitioned"
    network.heal()
    assert network.drop_rules(0) == []
    assert can_connect(network, 0, 1) and can_connect(network, 2, 0)


def test_networks_made_at_the_same_moment_get_different_subnets(namespaces_available, tmp_path):
    """Each sees the same /24 free; the subnet claim makes the second pick after the first
    one's bridge holds its address (several runs and tests share a host)."""
    networks = [net.Network(network_name(), nodes=1, state_dir=tmp_path / "state") for _ in range(4)]
    try:
        with ThreadPoolExecutor(len(networks)) as pool:
            list(pool.map(lambda network: network.create(), networks))
        assert len({network.subnet for network in networks}) == len(networks)
    finally:
        for network in networks:
            network.destroy()


def test_a_subnet_taken_by_someone_else_at_the_same_moment_is_given_up(namespaces_available, tmp_path, monkeypatch):
    """A harness that does not take the lock (an older version) adds the same /24 between our
    pick and our address: the network sees a second holder and moves to another subnet."""
    squatter = f"kq{os.getpid() % 10000}"
    taken = net.pick_subnet()
    subprocess.run(["ip", "link", "add", squatter, "type", "bridge"], check=True)
    try:
        subprocess.run(["ip", "addr", "add", f"{taken.network_address + 1}/24", "dev", squatter], check=True)
        picks = iter([taken])
        real_pick = net.pick_subnet
        monkeypatch.setattr(net, "pick_subnet", lambda exclude=(): next(picks, None) or real_pick(exclude))
        network = net.Network(network_name(), nodes=1, state_dir=tmp_path / "state")
        try:
            network.create()
            assert network.subnet != taken and net.subnet_holders(network.subnet) == [network.bridge]
        finally:
            network.destroy()
    finally:
        subprocess.run(["ip", "link", "del", squatter], check=False)


def test_partition_adds_nothing_to_the_host_tables(network):
    before = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    network.partition({1: {2}})
    assert subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout == before


def test_clean_all_removes_namespaces_links_and_processes_of_a_crashed_harness(namespaces_available, tmp_path):
    """A harness killed with -9 leaves its state file; clean_all deletes what it names."""
    name, state_dir = network_name(), tmp_path / "state"
    code = (f"import sys, subprocess, time\nfrom pathlib import Path\nfrom faults.net import Network\n"
            f"n = Network('{name}', 2, state_dir=Path('{state_dir}'))\nn.create()\n"
            "p = subprocess.Popen(n.wrap(1, ['sleep', '600']))\nprint(p.pid, flush=True)\ntime.sleep(600)")
    harness = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=os.getcwd())
    try:
        sleeper_pid = int(harness.stdout.readline())
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        assert sorted(net.leftovers(name)) == sorted([f"{name}-n0", f"{name}-n1", f"{name}-v0", f"{name}-v1", f"{name}-br",
                                                      f"iptables chain KSPEC-{name}"])
    finally:
        removed = net.clean_all(state_dir)
    assert f"namespace {name}-n0" in removed and f"link {name}-br" in removed
    assert any(item.startswith(f"iptables chain KSPEC-{name} ") for item in removed), removed
    assert net.leftovers(name) == []
    assert not list(state_dir.glob("*.json"))
    assert wait_until(lambda: not os.path.exists(f"/proc/{sleeper_pid}") or
                      open(f"/proc/{sleeper_pid}/stat").read().split()[2] == "Z", 5.0)


def test_state_file_names_everything_before_it_exists(network):
    state = json.loads(network.state_path.read_text())
    assert state["namespaces"] == [network.namespace(n) for n in range(3)]
    assert state["bridge"] == network.bridge and state["subnet"] == str(network.subnet)


@pytest.mark.timeout(60)
def test_kspec_faults_clean_kills_and_removes_what_a_crashed_run_left(namespaces_available, tmp_path):
    state_dir = tmp_path / "state"
    name = f"kc{os.getpid() % 100000}"[:net.NAME_CHARS_MAX]
    code = textwrap.dedent(f"""\
        import subprocess, time
        from faults.net import Network
        n = Network({name!r}, 1)
        n.create()
        p = subprocess.Popen(n.wrap(0, ["sleep", "600"]))
        print(p.pid, flush=True)
        time.sleep(600)""")
    env = {**os.environ, "KSPEC_FAULTS_STATE_DIR": str(state_dir)}
    harness = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
    try:
        sleeper = int(harness.stdout.readline())
        harness.kill()
        harness.wait()
        assert net.leftovers(name)
    finally:
        cleaned = subprocess.run([Path(sys.executable).parent / "kspec", "faults", "clean"], env=env,
                                 capture_output=True, text=True)
    assert cleaned.returncode == 0 and f"removed namespace {name}-n0" in cleaned.stdout, cleaned
    assert net.leftovers(name) == []
    assert not Path(f"/proc/{sleeper}").exists() or Path(f"/proc/{sleeper}/stat").read_text().split()[2] == "Z"
