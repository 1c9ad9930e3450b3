"""Brokers in containers: a fault run's nodes as Docker containers, through the docker SDK.

    kspec faults run --target docker --nodes 3 --nemesis partition,kill,pause --out DIR
    kspec faults run --target my-broker.toml --out DIR      # a TOML with an `image` key

The run makes a user-defined bridge network of its own (`<run>-net`, a subnet that
overlaps no host route, the host at its gateway) and one container per node on it, each
with a fixed address, so a restarted node comes back where the others expect it. Clients
on the host reach the containers through the bridge. Everything is labelled with
LABEL=<run name>; teardown, and `kspec faults clean` after a crash, remove every
container and network so labelled.

Faults:

- partition: iptables DROP rules inside the receiving container's network namespace,
  entered from the host with nsenter (the host's iptables: the image needs none), in a
  chain of our own, as netns mode makes them (faults/net.py). Disconnecting a container
  from the network would cut it from every peer and the clients at once, so it cannot
  make the one-way and partial grudges (majorities ring, bridge) the nemesis uses, and a
  link going down is not silent packet loss. A container's namespace is new after each
  restart, so its chain and current rules are made again when it starts.
- kill: `docker kill` (SIGKILL), restart: `docker start`, pause: `docker pause` (the cgroup
  freezer: every process of the container stops, as SIGSTOP stops one).
- clock: libfaketime preloaded into each container's broker (LD_PRELOAD and the faketime
  environment, faults/clock.py), the library from the reference image (faults/image.py
  copies the host's), each node's offset file in the run folder's faketime/, bind-mounted
  read-only at clock.CONTAINER_DIR: the nemesis moves a node's clock by rewriting its file
  on the host, as in netns mode. An image without the library (one a TOML describes, as a
  rule) is refused for clock with one line.
- logs: each container's output (`docker logs`) goes to node-<i>.log when the run ends;
  data directories are bind mounts of the run folder's node-<i>/.

Any broker image is described by a TOML file:

    image = "apache/kafka:3.9.0"           # --image overrides it
    port = 9092                            # every node listens on its own address:port
    command = ["..."]                      # the container's arguments (its image's entrypoint runs them)
    environment = { KAFKA_NODE_ID = "{node_id}", KAFKA_CONTROLLER_QUORUM_VOTERS = "{voters}" }
    data_dir = "/var/lib/kafka/data"       # bind-mounted from the run folder's node-<i>/
    voter_port = 9093                      # the port {voters} names (default: port)
    ready_timeout_s = 60

Placeholders in command and environment: {host} (the node's address), {port}, {node_id}
(1..N), {hosts} (every node's host:port, comma-separated), {voters} (1@host:voter_port,...),
{data_dir}. A node is up once a socket listens on its port inside its namespace.
"""
from __future__ import annotations

import subprocess
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from faults import clock
from faults import image as reference_image
from faults import net
from faults.targets import READY_TIMEOUT_S, STOP_TIMEOUT_S, Target, TargetError, reference_overrides

LABEL = "org.kspec.faults.run"   # on every container and network a run makes: the run's name
OWNER_LABEL = "org.kspec.faults.owner"  # "pid:start ticks" of the process that made it; `clean` spares live owners
MODE = "docker"
CONTAINER_PORT = 9092
LOG_TAIL_LINES = 20
READY_PROBE_INTERVAL_S = 0.1
TCP_LISTEN = "0A"                # the LISTEN state in /proc/net/tcp
ENGINE_TIMEOUT_S = 60            # the docker SDK's HTTP timeout
TOML_KEYS = {"name", "image", "port", "command", "environment", "data_dir", "voter_port", "ready_timeout_s"}


def engine():
    """A docker SDK client of the local engine, or TargetError saying why there is none."""
    try:
        import docker
        import docker.errors
    except ImportError:
        raise TargetError("the docker SDK is not installed: pip install 'kspec[docker]'") from None
    try:
        client = docker.from_env(timeout=ENGINE_TIMEOUT_S)
        client.ping()
        return client
    except docker.errors.DockerException as e:
        raise TargetError(f"no Docker engine reachable ({e}); start dockerd (Debian: apt-get install docker.io) "
                          "or set DOCKER_HOST") from None


@dataclass(frozen=True)
class ContainerSpec:
    """How to run one broker image as a node: see the module docstring's TOML."""
    name: str
    image: str | None              # None: the reference image of these sources, built when absent
    port: int
    command: list[str]
    environment: dict[str, str] = field(default_factory=dict)
    data_dir: str | None = None
    voter_port: int | None = None
    ready_timeout_s: float = READY_TIMEOUT_S


def reference_spec(nodes: int, image: str | None, overrides: dict[str, str] | None = None) -> ContainerSpec:
    """The reference broker in its image (faults/image.py): `kspec broker` per container."""
    settings = {"advertised.host.name": "{host}", **reference_overrides(nodes, "{voters}"), **(overrides or {})}
    command = ["broker", "--listen", "{host}:{port}", "--data-dir", reference_image.DATA_DIR,
               "--node-id", "{node_id}" if nodes > 1 else "0"]
    for key, value in sorted(settings.items()):
        command += ["--set", f"{key}={value}"]
    return ContainerSpec("reference", image, CONTAINER_PORT, command, data_dir=reference_image.DATA_DIR)


def spec_from_toml(path: Path, image: str | None) -> ContainerSpec:
    with open(path, "rb") as f:
        spec = tomllib.load(f)
    unknown = set(spec) - TOML_KEYS
    if unknown or "image" not in spec or "port" not in spec:
        raise TargetError(f"{path}: a container description needs 'image' and 'port'; unknown keys {sorted(unknown)}")
    return ContainerSpec(spec.get("name", path.stem), image or spec["image"], int(spec["port"]),
                         [str(word) for word in spec.get("command", [])],
                         {str(k): str(v) for k, v in spec.get("environment", {}).items()}, spec.get("data_dir"),
                         spec.get("voter_port"), float(spec.get("ready_timeout_s", READY_TIMEOUT_S)))


class DockerNetwork:
    """The run's bridge network, and partitions as iptables rules inside the containers' namespaces."""

    def __init__(self, client, run_name: str, nodes: int) -> None:
        self.client = client
        self.run_name = run_name
        self.name = f"{run_name}-net"
        self.nodes = nodes
        self.subnet = None
        self.grudge: dict[int, set[int]] = {}
        self.pids: dict[int, int] = {}      # node -> the pid whose namespace holds its rules

    def create(self) -> None:
        from docker.types import IPAMConfig, IPAMPool
        with net.claiming_subnet():
            given_up: list = []
            while True:
                self.subnet = net.pick_subnet(tuple(given_up))
                created = self.client.networks.create(
                    self.name, driver="bridge", labels=owner_labels(self.run_name), ipam=IPAMConfig(
                        pool_configs=[IPAMPool(subnet=str(self.subnet), gateway=self.host_address)]))
                if net.subnet_holders(self.subnet) == [f"br-{created.id[:12]}"]:
                    break
                created.remove()  # someone not taking the lock took it in the same moment (faults/net.py)
                given_up.append(self.subnet)

    def node_address(self, node: int) -> str:
        assert self.subnet is not None and 0 <= node < self.nodes
        return str(self.subnet.network_address + net.FIRST_NODE_HOST + node)

    @property
    def host_address(self) -> str:
        assert self.subnet is not None
        return str(self.subnet.network_address + 1)

    def attach(self, node: int, pid: int) -> None:
        """A node's container (re)started with this pid: make its chain and apply its current grudge."""
        self.pids[node] = pid
        self._iptables(node, "-N", net.CHAIN)
        self._iptables(node, "-A", "INPUT", "-j", net.CHAIN)
        for peer in sorted(self.grudge.get(node, ())):
            self._drop(node, peer)

    def partition(self, grudge: dict[int, set[int]]) -> None:
        """Replace the current partition: node n drops every packet from each node (or net.HOST) in grudge[n]."""
        self.heal()
        self.grudge = {n: set(p) for n, p in grudge.items() if p}
        for node, peers in sorted(self.grudge.items()):
            for peer in sorted(peers):
                self._drop(node, peer)

    def detach(self, node: int) -> None:
        """A node's container stopped: its namespace is gone (and its pid may be another process's)."""
        self.pids.pop(node, None)

    def heal(self) -> None:
        for node in self.pids:
            self._iptables(node, "-F", net.CHAIN)
        self.grudge = {}

    def drop_rules(self, node: int) -> list[str]:
        """The sources node currently drops, as iptables lists them."""
        listing = self._iptables(node, "-S", net.CHAIN).stdout
        return [line.split("-s ", 1)[1].split()[0] for line in listing.splitlines() if "-j DROP" in line]

    def _drop(self, node: int, peer: int) -> None:
        if node not in self.pids:       # down: attach applies its grudge when it starts again
            return
        source = self.host_address if peer == net.HOST else self.node_address(peer)
        self._iptables(node, "-A", net.CHAIN, "-s", source, "-j", "DROP")

    def _iptables(self, node: int, *arguments: str, check: bool = True) -> subprocess.CompletedProcess:
        command = ["nsenter", f"--net=/proc/{self.pids[node]}/ns/net", "iptables", "-w", *arguments]
        return net._run(command, check=check)


class ContainerNode:
    """One node as a container; up once its port accepts TCP connections from the host."""

    def __init__(self, container, node_id: int, address: str, port: int, log_path: Path, ready_timeout_s: float,
                 network: DockerNetwork, index: int) -> None:
        self.container = container
        self.node_id = node_id
        self.address = address
        self.port = port
        self.bootstrap = f"{address}:{port}"
        self.log_path = log_path
        self.ready_timeout_s = ready_timeout_s
        self.network = network
        self.index = index

    def start(self) -> str:
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        assert not self.running, "already running"
        self.container.start()
        self.network.attach(self.index, self.pid)

    def wait_ready(self) -> str:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if not self.running:
                raise TargetError(f"container {self.container.name} exited: {self._log_tail()}")
            if self._listening():
                return self.bootstrap
            time.sleep(READY_PROBE_INTERVAL_S)
        self.kill()
        raise TargetError(f"container {self.container.name} not up within {self.ready_timeout_s} s: {self._log_tail()}")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        self.network.detach(self.index)
        self.container.stop(timeout=int(timeout_s))
        return self._state()["ExitCode"]

    def kill(self) -> None:
        self.network.detach(self.index)
        if self.running:
            self.container.kill()

    def pause(self) -> None:
        if self._state()["Status"] == "running":
            self.container.pause()

    def resume(self) -> None:
        if self._state()["Status"] == "paused":
            self.container.unpause()

    @property
    def running(self) -> bool:
        return self._state()["Status"] in ("running", "paused")

    @property
    def pid(self) -> int:
        return self._state()["Pid"]

    @property
    def exit_code(self) -> int | None:
        """The container's exit status once it stopped, None while it runs (or before it ran)."""
        state = self._state()
        return None if state["Status"] in ("created", "running", "paused", "restarting") else state["ExitCode"]

    def save_log(self) -> None:
        self.log_path.write_bytes(self.container.logs(stdout=True, stderr=True))

    def _listening(self) -> bool:
        """Whether a socket listens on its port in its own namespace (the kernel's socket table,
        /proc/PID/net/tcp{,6}): a node restarted while cut off from the host is up once it
        listens, not once it is healed."""
        for table in ("tcp", "tcp6"):
            try:
                lines = Path(f"/proc/{self.pid}/net/{table}").read_text().splitlines()[1:]
            except OSError:
                return False
            for line in lines:
                local_address, state = line.split()[1], line.split()[3]
                if state == TCP_LISTEN and int(local_address.rsplit(":", 1)[1], 16) == self.port:
                    return True
        return False

    def _state(self) -> dict:
        self.container.reload()
        return self.container.attrs["State"]

    def _log_tail(self) -> str:
        lines = self.container.logs(stdout=True, stderr=True, tail=LOG_TAIL_LINES).decode(errors="replace")
        return " | ".join(lines.strip().splitlines()) or "no output"


@dataclass
class DockerTarget(Target):
    """Target's faults with containers: docker pause/unpause, partitions in the containers' namespaces."""

    clocks: list[clock.NodeClock] | None = None   # each node's, when made for the clock nemesis

    def __post_init__(self) -> None:
        assert self.mode == MODE and isinstance(self.network, DockerNetwork) and self.toxiproxy is None

    def start(self) -> None:
        """Every container at once, then wait for each (they form their quorum together)."""
        for node in self.nodes:
            node.launch()
        for node in self.nodes:
            node.wait_ready()

    def pause(self, index: int) -> None:
        self.nodes[index].pause()

    def resume(self, index: int) -> None:
        self.nodes[index].resume()

    def save_logs(self) -> None:
        for node in self.nodes:
            node.save_log()


def docker_target(spec: ContainerSpec, nodes: int, run_dir: Path, run_name: str, client,
                  clock_skew: bool = False) -> DockerTarget:
    """Containers of spec.image on a network of their own, created (not started) in the engine;
    with clock_skew, each under libfaketime with an offset file in run_dir/faketime/.

    Everything made is labelled with the run's name: the caller removes it with
    clean_run, also when this raises half-way."""
    image = reference_image.ensure(client, spec.image)
    clocks = node_clocks(client, image, nodes, run_dir, run_name) if clock_skew else None
    network = DockerNetwork(client, run_name, nodes)
    network.create()
    hosts = [network.node_address(i) for i in range(nodes)]
    values = {"port": spec.port, "hosts": ",".join(f"{h}:{spec.port}" for h in hosts), "data_dir": spec.data_dir,
              "voters": ",".join(f"{i + 1}@{h}:{spec.voter_port or spec.port}" for i, h in enumerate(hosts))}
    container_nodes = []
    for index, host in enumerate(hosts):
        node_values = {**values, "host": host, "node_id": index + 1}
        binds = {}
        if spec.data_dir:
            data = run_dir / f"node-{index}"
            data.mkdir(parents=True, exist_ok=True)
            binds[str(data.resolve())] = {"bind": spec.data_dir, "mode": "rw"}
        environment = {k: v.format(**node_values) for k, v in spec.environment.items()}
        if clocks:
            binds[str(clocks[index].path.parent.resolve())] = {"bind": clock.CONTAINER_DIR, "mode": "ro"}
            environment.update(clocks[index].environment())
        created = client.api.create_container(
            image, command=[word.format(**node_values) for word in spec.command], name=f"{run_name}-n{index}",
            environment=environment,
            labels=owner_labels(run_name),
            host_config=client.api.create_host_config(binds=binds, network_mode=network.name),
            networking_config=client.api.create_networking_config(
                {network.name: client.api.create_endpoint_config(ipv4_address=host)}))
        container_nodes.append(ContainerNode(client.containers.get(created["Id"]), index + 1, host, spec.port,
                                             run_dir / f"node-{index}.log", spec.ready_timeout_s, network, index))
    return DockerTarget(spec.name, container_nodes, MODE, network, clocks=clocks)


def node_clocks(client, image: str, nodes: int, run_dir: Path, run_name: str) -> list[clock.NodeClock]:
    """Each node's clock at offset 0, with the library where the image has it (its FAKETIME_LABEL)."""
    library = client.images.get(image).labels.get(reference_image.FAKETIME_LABEL)
    if library is None:
        raise TargetError(f"the clock nemesis preloads libfaketime, which image {image} does not carry (the reference "
                          "image does, built on a host with it: apt-get install faketime); drop clock")
    clocks = [clock.NodeClock(run_name, index, run_dir, image_library=library) for index in range(nodes)]
    for node_clock in clocks:
        node_clock.create()
    return clocks


def owner_labels(run_name: str) -> dict[str, str]:
    """The labels of everything a run makes: its name, and this process as its owner."""
    pid, ticks = net.owner()
    return {LABEL: run_name, OWNER_LABEL: f"{pid}:{ticks}"}


def _owner_alive(labels: dict[str, str]) -> bool:
    """Whether the process that made it still runs (the same process: pid and start time)."""
    pid, _, ticks = labels.get(OWNER_LABEL, "").partition(":")
    return pid.isdigit() and ticks.isdigit() and net.owner_alive({"owner": [int(pid), int(ticks)]})


def clean_run(client, run_name: str) -> list[str]:
    """Remove the containers and the network of one run (stopped or not); what was removed."""
    return _remove_labelled(client, f"{LABEL}={run_name}")


def clean() -> list[str]:
    """Remove every container and network a run labelled whose run has ended without removing
    them (a crashed run: its owner process is gone); what was removed. A live run's are
    spared: several runs and tests share an engine, and removing a running run's containers
    ended it with a traceback."""
    try:
        client = engine()
    except TargetError:
        return []
    return _remove_labelled(client, LABEL, spare_live=True)


def _remove_labelled(client, label: str, spare_live: bool = False) -> list[str]:
    removed = []
    for container in client.containers.list(all=True, filters={"label": label}):
        if spare_live and _owner_alive(container.labels):
            continue
        if container.status == "paused":
            container.unpause()
        container.remove(force=True)
        removed.append(f"container {container.name}")
    for network in client.networks.list(filters={"label": label}):
        if spare_live and _owner_alive(network.attrs.get("Labels") or {}):
            continue
        network.remove()
        removed.append(f"network {network.name}")
    return removed
