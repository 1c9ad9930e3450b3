"""Nodes as real hosts: one Linux network namespace per node, joined by a bridge.

    with Network("ksf", nodes=3) as net:
        net.node_address(0)                    # "10.213.7.10"
        net.wrap(0, ["python", "-m", ...])     # the command, run inside node 0's namespace
        net.partition({0: {1, 2}, 1: {0}, 2: {0}})   # node -> the nodes whose packets it drops
        net.heal()

Layout: a bridge `<name>-br` on the host holds the subnet's first address, so clients on
the host reach every node directly; node i lives in namespace `<name>-n<i>` behind a veth
pair (`<name>-v<i>` on the bridge, `eth0` inside) with the address `.<10+i>`. Namespaces
get no default route: their packets can reach the bridge subnet and nothing else.

A partition is real packet loss, as Jepsen makes it: iptables DROP rules on INPUT inside
the receiving node's namespace, from the sources it holds a grudge against. The rules
live in a chain of our own per namespace, so healing is flushing that chain, and
deleting a namespace takes its rules with it.

The host's firewall: where br_netfilter is loaded (bridge-nf-call-iptables=1, as Docker
sets it), frames between two ports of the bridge pass the host's iptables FORWARD chain,
and Docker also sets FORWARD's policy to DROP, so the nodes could not reach each other.
The network adds exactly one rule to the host, ACCEPT for traffic in and out of its own
bridge, in a chain of its own (`KSPEC-<name>`) jumped to from the top of DOCKER-USER
when that chain exists (where Docker wants its users' rules: evaluated before its own)
or else from the top of FORWARD. It never changes a policy; teardown and `clean_all`
remove the jump and the chain.

Cleanup survives a crash of the harness: before making anything, the intent is written
to a state file under STATE_DIR; `clean_all()` (`kspec faults clean`) kills what runs in
the namespaces and deletes namespaces, veths and bridge named in every state file.
"""
from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

STATE_DIR = Path(os.environ.get("KSPEC_FAULTS_STATE_DIR", "/run/kspec-faults"))
CHAIN = "KSPEC-PARTITION"
DOCKER_USER_CHAIN = "DOCKER-USER"   # Docker's chain for its users' FORWARD rules, evaluated before its own
FIRST_NODE_HOST = 10         # node i gets host number FIRST_NODE_HOST + i in the subnet
NODES_MAX = 200
NAME_CHARS_MAX = 8           # interface names are at most 15 bytes: "<name>-br", "<name>-v199"
SUBNET_CANDIDATES = [ipaddress.ip_network(f"10.213.{third}.0/24") for third in range(7, 255, 16)]
COMMAND_TIMEOUT_S = 20.0
HOST = -1                    # in a grudge: the host side of the bridge, where the clients are
SUBNET_LOCK_PATH = Path("/run/kspec-faults.subnet.lock")  # one per host, whatever the state dir: subnets are the host's


class NetworkUnavailable(RuntimeError):
    """Namespaces cannot be made here; the message says why and what the harness does instead."""


def check_capability() -> None:
    """Raise NetworkUnavailable unless we may create namespaces, veths and iptables rules."""
    missing = [tool for tool in ("ip", "iptables") if shutil.which(tool) is None]
    if missing:
        raise NetworkUnavailable(f"{' and '.join(missing)} not installed (Debian: iproute2, iptables); "
                                 "partitions fall back to the proxy layer")
    if os.geteuid() != 0:
        raise NetworkUnavailable("network namespaces need root (CAP_NET_ADMIN); "
                                 "partitions fall back to the proxy layer")
    probe = f"ksprobe{os.getpid() % 100000}-{threading.get_native_id() % 100000}"  # one per thread of a process
    made = _run(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        raise NetworkUnavailable(f"cannot create a network namespace ({made.stderr.strip()}); "
                                 "partitions fall back to the proxy layer")
    try:
        rules = _run(["ip", "netns", "exec", probe, "iptables", "-w", "-L", "INPUT", "-n"], check=False)
        if rules.returncode != 0:
            raise NetworkUnavailable(f"iptables does not work in a namespace ({rules.stderr.strip()}); "
                                     "partitions fall back to the proxy layer")
    finally:
        _run(["ip", "netns", "del", probe], check=False)


def pick_subnet(exclude: tuple[ipaddress.IPv4Network, ...] = ()) -> ipaddress.IPv4Network:
    """The first candidate /24 (not excluded) that overlaps none of the host's routes or addresses."""
    routes = _run(["ip", "-4", "-o", "route", "show", "table", "all"]).stdout.split("\n")
    addresses = _run(["ip", "-4", "-o", "addr", "show"]).stdout.split("\n")
    used = []
    for line in routes + addresses:
        for token in line.split():
            try:
                used.append(ipaddress.ip_network(token, strict=False))
            except ValueError:
                continue
    for candidate in SUBNET_CANDIDATES:
        if candidate not in exclude and not any(candidate.overlaps(net) for net in used if net.prefixlen > 0):
            return candidate
    raise NetworkUnavailable("every candidate subnet 10.213.x.0/24 collides with a host route")


def subnet_holders(subnet: ipaddress.IPv4Network) -> list[str]:
    """The interfaces with an address in the subnet."""
    holders = []
    for line in _run(["ip", "-4", "-o", "addr", "show"]).stdout.splitlines():
        fields = line.split()
        if len(fields) > 3 and ipaddress.ip_interface(fields[3]).ip in subnet:
            holders.append(fields[1])
    return holders


@contextlib.contextmanager
def claiming_subnet():
    """Held from pick_subnet until the picked subnet's first address is on an interface (the
    bridge, or a Docker network's): two runs starting at once, each seeing the same /24 free,
    would both take it, and each run's clients would reach the other's nodes. An advisory
    lock on a file; the kernel drops it with the process, so a crash leaves nothing held."""
    with open(SUBNET_LOCK_PATH, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


class Network:
    """A bridge and one namespace per node; see the module docstring."""

    def __init__(self, name: str, nodes: int, state_dir: Path = STATE_DIR) -> None:
        assert name.isalnum() and 0 < len(name) <= NAME_CHARS_MAX, name
        assert 0 < nodes <= NODES_MAX, nodes
        self.name = name
        self.nodes = nodes
        self.bridge = f"{name}-br"
        self.subnet: ipaddress.IPv4Network | None = None
        self.state_path = state_dir / f"{name}.json"
        self.grudge: dict[int, set[int]] = {}

    def namespace(self, node: int) -> str:
        return f"{self.name}-n{node}"

    def veth(self, node: int) -> str:
        return f"{self.name}-v{node}"

    def node_address(self, node: int) -> str:
        assert self.subnet is not None and 0 <= node < self.nodes
        return str(self.subnet.network_address + FIRST_NODE_HOST + node)

    @property
    def host_address(self) -> str:
        assert self.subnet is not None
        return str(self.subnet.network_address + 1)

    def create(self) -> None:
        """Make the bridge, the namespaces and the veth pairs (cleaning leftovers of the same name first)."""
        check_capability()
        if self.state_path.exists():
            clean_state_file(self.state_path)
        forward_chain = f"KSPEC-{self.name}"
        forward_parent = DOCKER_USER_CHAIN if _chain_exists(DOCKER_USER_CHAIN) else "FORWARD"
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        with claiming_subnet():
            given_up: list[ipaddress.IPv4Network] = []
            while True:
                self.subnet = pick_subnet(tuple(given_up))
                self.state_path.write_text(json.dumps({
                    "owner": owner(), "bridge": self.bridge, "subnet": str(self.subnet),
                    "namespaces": [self.namespace(i) for i in range(self.nodes)],
                    "veths": [self.veth(i) for i in range(self.nodes)],
                    "forward_chain": forward_chain, "forward_parent": forward_parent,
                }))
                if self.bridge not in _links():
                    _run(["ip", "link", "add", self.bridge, "type", "bridge"])
                address = f"{self.host_address}/{self.subnet.prefixlen}"
                _run(["ip", "addr", "add", address, "dev", self.bridge])
                if subnet_holders(self.subnet) == [self.bridge]:
                    break
                # Someone not taking the lock (an older harness) took it in the same moment.
                _run(["ip", "addr", "del", address, "dev", self.bridge])
                given_up.append(self.subnet)
        prefix = self.subnet.prefixlen
        _run(["iptables", "-w", "-N", forward_chain])
        _run(["iptables", "-w", "-A", forward_chain, "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT"])
        _run(["iptables", "-w", "-I", forward_parent, "1", "-j", forward_chain])
        _run(["ip", "link", "set", self.bridge, "up"])
        for node in range(self.nodes):
            ns, veth = self.namespace(node), self.veth(node)
            _run(["ip", "netns", "add", ns])
            _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
            _run(["ip", "link", "set", veth, "master", self.bridge, "up"])
            _ns(ns, ["ip", "addr", "add", f"{self.node_address(node)}/{prefix}", "dev", "eth0"])
            _ns(ns, ["ip", "link", "set", "eth0", "up"])
            _ns(ns, ["ip", "link", "set", "lo", "up"])
            _ns(ns, ["iptables", "-w", "-N", CHAIN])
            _ns(ns, ["iptables", "-w", "-A", "INPUT", "-j", CHAIN])

    def wrap(self, node: int, command: list[str]) -> list[str]:
        """The command, to run inside node's namespace (ip netns exec execs it: same pid)."""
        return ["ip", "netns", "exec", self.namespace(node), *command]

    def partition(self, grudge: dict[int, set[int]]) -> None:
        """Replace the current partition: node n drops every packet from each node (or HOST) in grudge[n]."""
        assert all(0 <= n < self.nodes and n not in peers and all(HOST <= p < self.nodes for p in peers)
                   for n, peers in grudge.items()), grudge
        self.heal()
        for node, peers in sorted(grudge.items()):
            for peer in sorted(peers):
                source = self.host_address if peer == HOST else self.node_address(peer)
                _ns(self.namespace(node), ["iptables", "-w", "-A", CHAIN, "-s", source, "-j", "DROP"])
        self.grudge = {n: set(p) for n, p in grudge.items() if p}

    def heal(self) -> None:
        for node in range(self.nodes):
            _ns(self.namespace(node), ["iptables", "-w", "-F", CHAIN])
        self.grudge = {}

    def drop_rules(self, node: int) -> list[str]:
        """The sources node currently drops, as iptables lists them (for tests and the timeline)."""
        listing = _ns(self.namespace(node), ["iptables", "-w", "-S", CHAIN]).stdout
        return [line.split("-s ", 1)[1].split()[0] for line in listing.splitlines() if "-j DROP" in line]

    def destroy(self) -> None:
        clean_state_file(self.state_path)

    def __enter__(self) -> Network:
        self.create()
        return self

    def __exit__(self, *exc_info) -> None:
        self.destroy()


def record_processes(path: Path, pids: list[int]) -> None:
    """Write pids, with their start times, to a state file, so clean_all can kill them after a crash."""
    state = json.loads(path.read_text()) if path.exists() else {"owner": owner()}
    state["processes"] = [[pid, start_ticks(pid)] for pid in pids]
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(state))
    temporary.rename(path)


def clean_state_file(path: Path) -> list[str]:
    """Kill the processes in, and delete, everything one state file names; return what was removed."""
    state = json.loads(path.read_text())
    removed = []
    for pid, ticks in state.get("processes", []):
        if ticks is not None and start_ticks(pid) == ticks:  # the same process, not a reused pid
            _kill(pid)
            removed.append(f"process {pid}")
    existing = set(_namespaces())
    for ns in state.get("namespaces", []):
        if ns not in existing:
            continue
        for pid in _run(["ip", "netns", "pids", ns], check=False).stdout.split():
            _kill(int(pid))
        _run(["ip", "netns", "del", ns], check=False)
        removed.append(f"namespace {ns}")
    if "forward_chain" in state:
        removed += _remove_forward_chain(state["forward_chain"], state["forward_parent"])
    links = _links()
    for link in [*state.get("veths", []), state.get("bridge")]:
        if link in links:
            _run(["ip", "link", "del", link], check=False)
            removed.append(f"link {link}")
    path.unlink()
    return removed


def owner() -> list[int | None]:
    """[pid, start ticks] of this process: what a state file names as the run that wrote it."""
    return [os.getpid(), start_ticks(os.getpid())]


def owner_alive(state: dict) -> bool:
    """Whether the process that wrote a state file still runs (pid and start time both match)."""
    pid, ticks = state.get("owner") or (None, None)
    return pid is not None and ticks is not None and start_ticks(pid) == ticks


def clean_all(state_dir: Path = STATE_DIR) -> list[str]:
    """Clean every state file in state_dir whose run has ended (a crashed run: the process that
    wrote it is gone); return what was removed. A live run's file is left alone: runs and
    tests share the host, and cleaning a live run killed its nodes mid-run."""
    if not state_dir.exists():
        return []
    removed = []
    for path in sorted(state_dir.glob("*.json")):
        try:
            live = owner_alive(json.loads(path.read_text()))
        except (OSError, ValueError):
            live = False
        if not live:
            removed += clean_state_file(path)
    return removed


def leftovers(name: str) -> list[str]:
    """Namespaces, links and host iptables chains of that network name that still exist (empty after a clean teardown)."""
    ns = [n for n in _namespaces() if n.startswith(f"{name}-")]
    links = [link for link in _links() if link.startswith(f"{name}-")]
    chains = [f"iptables chain {c}" for c in [f"KSPEC-{name}"] if _chain_exists(c)]
    return ns + links + chains


def _chain_exists(chain: str) -> bool:
    return _run(["iptables", "-w", "-S", chain], check=False).returncode == 0


def _remove_forward_chain(chain: str, parent: str) -> list[str]:
    """Delete the jump to chain from parent (every copy) and the chain itself; what was removed."""
    if not _chain_exists(chain):
        return []
    while _run(["iptables", "-w", "-D", parent, "-j", chain], check=False).returncode == 0:
        pass
    _run(["iptables", "-w", "-F", chain], check=False)
    _run(["iptables", "-w", "-X", chain], check=False)
    return [f"iptables chain {chain} (jumped to from {parent})"]


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _kill(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _run(["ip", "netns", "list"]).stdout.splitlines() if line.strip()]


def _links() -> set[str]:
    listing = _run(["ip", "-o", "link", "show"]).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in listing.splitlines() if ":" in line}


def _ns(namespace: str, command: list[str]) -> subprocess.CompletedProcess:
    return _run(["ip", "netns", "exec", namespace, *command])


def _run(command: list[str], check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return done
