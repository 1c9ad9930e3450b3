"""Targets: the brokers a fault run starts, faults and reads, one OS process per node.

Two ways for faults to reach the network, chosen per run and written in its results:

- "netns": node i runs inside its own network namespace (faults/net.py) and listens on
  its own address; clients on the host reach it through the bridge; a partition is
  iptables DROP between namespaces.
- "proxy": where namespaces cannot be made, node i listens on 127.0.0.1:port and
  advertises 127.0.0.2:port, where a Toxiproxy proxy forwards to it; clients go through
  the proxies, so link faults (latency, resets, ...) apply, and a "partition" cuts the
  client links of one node (a blackhole toxic), not the links between nodes.

Two kinds of target:

- the kspec reference broker (reference/process.py), built in;
- any broker described by a TOML file, for example:

      nodes = 1
      port = 19092                          # each node's port (own address in netns mode)
      start = ["{python}", "-m", "kspec.cli", "broker", "--listen", "{host}:{port}",
               "--data-dir", "{data_dir}", "--node-id", "{node_id}",
               "--set", "advertised.host.name={advertised_host}"]
      data_dir = "{run_dir}/node-{node_id}"
      ready_timeout_s = 30                  # up = its port accepts TCP connections

  Placeholders: {python} (this interpreter), {host} (address to listen on),
  {advertised_host} (address to advertise to clients), {port}, {node_id}, {data_dir},
  {run_dir}.

Brokers in containers (a TOML with an `image` key, or `--target docker`) are
faults/docker_target.py's DockerTarget, a Target whose nodes are containers.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from faults.net import Network
from faults.proxy import ToxiproxyClient
from reference.process import BrokerProcess, internal_topic_replication

MODES = ("netns", "proxy")
NETNS_PORT = 9092
PROXY_HOST = "127.0.0.2"       # the proxies' side of loopback; brokers listen on 127.0.0.1
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
METADATA_TIMEOUT_S = 5.0
TCP_PROBE_TIMEOUT_S = 0.5
BLACKHOLE = "kspec_partition"  # name of the toxics a proxy-mode partition adds

Wrap = Callable[[list[str]], list[str]]


class TargetError(RuntimeError):
    pass


class ExitCode:
    """`exit_code` of a node that is one local process: None while it runs (or before it ran)."""

    process: subprocess.Popen | None

    @property
    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()


class ReferenceNode(BrokerProcess, ExitCode):
    """`kspec broker` as a node: BrokerProcess with its command optionally run in a namespace."""

    def __init__(self, data_dir: str, *, listen: str, node_id: int, overrides: dict[str, str],
                 stderr_path: str, wrap: Wrap) -> None:
        super().__init__(data_dir, listen=listen, node_id=node_id, overrides=overrides, stderr_path=stderr_path)
        self.wrap = wrap
        self.log_path = stderr_path

    def command(self) -> list[str]:
        return self.wrap(super().command())

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> str:
        """Start on the listen address it was given (BrokerProcess would restart on the advertised one)."""
        listen = self.listen
        try:
            return super().start(timeout_s)
        finally:
            self.listen = listen

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


class CommandNode(ExitCode):
    """A node started by a command line; up once its port accepts TCP connections."""

    def __init__(self, node_id: int, command: list[str], address: tuple[str, int], bootstrap: str, log_path: str,
                 ready_timeout_s: float) -> None:
        self.node_id = node_id
        self.command_line = command
        self.address = address
        self.bootstrap = bootstrap
        self.log_path = log_path
        self.ready_timeout_s = ready_timeout_s
        self.process: subprocess.Popen | None = None

    def start(self) -> str:
        assert not self.running, "already running"
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command_line, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise TargetError(f"{self.command_line[0]} exited with {self.process.returncode}; see {self.log_path}")
            try:
                socket.create_connection(self.address, timeout=TCP_PROBE_TIMEOUT_S).close()
                return self.bootstrap
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise TargetError(f"{' '.join(self.command_line)} not up within {self.ready_timeout_s} s; see {self.log_path}")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.process.returncode

    def kill(self) -> None:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


@dataclass
class Target:
    """Nodes, how faults reach them (mode), and the network or proxies that mode uses."""
    name: str
    nodes: list
    mode: str
    network: Network | None = None
    toxiproxy: ToxiproxyClient | None = None
    client_properties: dict[str, str] = field(default_factory=dict)  # --command-config, --secure (faults/security.py)

    def __post_init__(self) -> None:
        assert self.mode in MODES, self.mode
        assert (self.mode == "netns") == (self.network is not None)
        assert (self.mode == "proxy") == (self.toxiproxy is not None)

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def start(self) -> None:
        for node in self.nodes:
            node.start()

    def stop(self) -> None:
        """Stop every node still running (resumed first: a stopped process cannot handle SIGTERM)."""
        for index, node in enumerate(self.nodes):
            if node.running:
                self.resume(index)
                try:
                    node.stop(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:  # a node that ignores SIGTERM gets kill -9
                    node.kill()

    def wait_until_serving(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until the metadata names every node and a controller (a cluster has formed)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            metadata = self._metadata(None)
            if metadata and len(metadata.brokers) == len(self.nodes) and metadata.controller_id >= 0:
                return
            time.sleep(0.2)
        raise TargetError(f"{self.name}: the metadata did not name all {len(self.nodes)} nodes and a controller "
                          f"within {timeout_s:.0f} s; see the node logs")

    def kill(self, index: int) -> None:
        node = self.nodes[index]
        if node.running:
            node.kill()

    def restart(self, index: int) -> None:
        node = self.nodes[index]
        if not node.running:
            node.start()

    def pause(self, index: int) -> None:
        if self.nodes[index].running:
            os.kill(self.nodes[index].pid, signal.SIGSTOP)

    def resume(self, index: int) -> None:
        if self.nodes[index].running:
            os.kill(self.nodes[index].pid, signal.SIGCONT)

    def partition(self, grudge: dict[int, set[int]]) -> None:
        """netns mode: node n drops every packet from the nodes in grudge[n]."""
        assert self.network is not None, "partitions between nodes need network namespaces"
        self.network.partition(grudge)

    def cut_client_links(self, nodes: list[int]) -> None:
        """proxy mode: the clients' links to these nodes become black holes (a timeout toxic, both ways)."""
        assert self.toxiproxy is not None
        for index in nodes:
            for stream in ("upstream", "downstream"):
                self.toxiproxy.add_toxic(proxy_name(index), "timeout", stream=stream, name=f"{BLACKHOLE}_{stream}",
                                         attributes={"timeout": 0})

    def heal(self) -> None:
        if self.network is not None:
            self.network.heal()
            return
        for index in range(len(self.nodes)):
            for toxic in self.toxiproxy.toxics(proxy_name(index)):
                if toxic["name"].startswith(BLACKHOLE):
                    self.toxiproxy.remove_toxic(proxy_name(index), toxic["name"])

    def broker_index(self, broker_id: int) -> int:
        """The index in self.nodes of the node with this node.id."""
        return [node.node_id for node in self.nodes].index(broker_id)

    def leader_of(self, topic: str, partition: int) -> int | None:
        """The node that leads topic-partition now, by asking the cluster (None if unknown)."""
        metadata = self._metadata(topic)
        topic_metadata = metadata.topics.get(topic) if metadata else None
        if topic_metadata is None or partition not in topic_metadata.partitions:
            return None
        leader = topic_metadata.partitions[partition].leader
        return self.broker_index(leader) if leader >= 0 else None

    def controller(self) -> int | None:
        """The node that is the active controller now: the quorum's leader by DescribeQuorum where
        the nodes offer it (Metadata's ControllerId names a live broker during an election, KIP-590),
        else Metadata's ControllerId. None when unknown (an election) or not one of the nodes."""
        from conformance import sasl
        from reference.process import QUORUM_ASK_TIMEOUT_S, active_controller_id
        running = [node.bootstrap for node in self.nodes if node.running]
        controller_id = active_controller_id(
            running, lambda address: sasl.connect(address, self.client_properties, timeout_s=QUORUM_ASK_TIMEOUT_S))
        if controller_id is None:
            metadata = self._metadata(None)
            controller_id = metadata.controller_id if metadata else -1
        node_ids = [node.node_id for node in self.nodes]
        return node_ids.index(controller_id) if controller_id in node_ids else None

    def _metadata(self, topic: str | None):
        from confluent_kafka.admin import AdminClient
        from confluent_kafka import KafkaException
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 3000, "log_level": 0,
                             **self.client_properties})
        try:
            return admin.list_topics(topic, timeout=METADATA_TIMEOUT_S)
        except KafkaException:
            return None


def proxy_name(index: int) -> str:
    return f"kspec-node{index}"


def free_port() -> int:
    """A port free on both 127.0.0.1 (the broker) and PROXY_HOST (its proxy)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        with socket.socket() as probe:
            try:
                probe.bind((PROXY_HOST, port))
                return port
            except OSError:
                continue
    raise TargetError("no port free on both 127.0.0.1 and 127.0.0.2")


@dataclass(frozen=True)
class Placement:
    """Where node i listens and what it advertises, in one mode."""
    host: str
    advertised_host: str
    port: int
    wrap: Wrap


def placements(nodes: int, mode: str, network: Network | None, port: int | None) -> list[Placement]:
    if mode == "netns":
        assert network is not None
        return [Placement(network.node_address(i), network.node_address(i), port or NETNS_PORT,
                          lambda command, i=i: network.wrap(i, command)) for i in range(nodes)]
    ports = [port + i for i in range(nodes)] if port else [free_port() for _ in range(nodes)]
    return [Placement("127.0.0.1", PROXY_HOST, p, list) for p in ports]


def create_proxies(toxiproxy: ToxiproxyClient, spots: list[Placement]) -> None:
    for index, spot in enumerate(spots):
        toxiproxy.create_proxy(proxy_name(index), listen=f"{PROXY_HOST}:{spot.port}",
                               upstream=f"127.0.0.1:{spot.port}")


# Failure detection tuned for fault runs, as Jepsen tunes Kafka's: with Kafka's defaults (30 s
# replica lag, 9 s broker session) a dead follower holds the high watermark, and so every read
# of new records, for longer than a run's quiet period and final reads.
FAULT_RUN_TIMEOUTS = {
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "5000",
    # a transaction its killed producer left open holds the last stable offset until it is aborted
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
# Only the workload's CreateTopics makes its topics (two partitions, the run's replication factor).
# With auto-creation on, a client still retrying an earlier run's node addresses (runs reuse the
# first free subnet) asked a new cluster for t0..t3 while one broker was up, and they were made
# with one partition on that broker alone: sends to partition 1 and to a killed replica hung.
NO_AUTO_CREATE = {"auto.create.topics.enable": "false"}


def reference_overrides(nodes: int, voters: str) -> dict[str, str]:
    """The reference nodes' settings in a fault run; voters is controller.quorum.voters (id@host:port,...)."""
    if nodes == 1:
        return dict(NO_AUTO_CREATE)
    return {**NO_AUTO_CREATE, "controller.quorum.voters": voters, "default.replication.factor": str(min(nodes, 3)),
            **internal_topic_replication(nodes), "min.insync.replicas": str(min(nodes, 2)), **FAULT_RUN_TIMEOUTS}


def reference_target(nodes: int, run_dir: Path, mode: str, network: Network | None = None,
                     toxiproxy: ToxiproxyClient | None = None, overrides: dict[str, str] | None = None) -> Target:
    """The kspec reference broker, one `kspec broker` process per node.

    More than one node makes a cluster: every node is broker and controller of a KRaft-style
    quorum whose voters are all nodes (controller.quorum.voters; node ids 1..N, as
    reference/process.py's ClusterProcess numbers them). One node is node 0."""
    spots = placements(nodes, mode, network, None)
    if toxiproxy is not None:
        create_proxies(toxiproxy, spots)
    cluster = reference_overrides(nodes, ",".join(f"{i + 1}@{s.host}:{s.port}" for i, s in enumerate(spots)))
    broker_nodes = []
    for index, spot in enumerate(spots):
        node_overrides = {"advertised.host.name": spot.advertised_host, **cluster, **(overrides or {})}
        broker_nodes.append(ReferenceNode(str(run_dir / f"node-{index}"), listen=f"{spot.host}:{spot.port}",
                                          node_id=index + 1 if nodes > 1 else 0, overrides=node_overrides,
                                          stderr_path=str(run_dir / f"node-{index}.log"), wrap=spot.wrap))
    return Target("reference", broker_nodes, mode, network, toxiproxy)


def toml_target(path: Path, run_dir: Path, mode: str, network: Network | None = None,
                toxiproxy: ToxiproxyClient | None = None) -> Target:
    """A target described by a TOML file (see the module docstring)."""
    with open(path, "rb") as f:
        spec = tomllib.load(f)
    unknown = set(spec) - {"name", "nodes", "port", "start", "data_dir", "ready_timeout_s"}
    if unknown or "start" not in spec:
        raise TargetError(f"{path}: needs 'start'; unknown keys {sorted(unknown)}")
    nodes = int(spec.get("nodes", 1))
    spots = placements(nodes, mode, network, spec.get("port"))
    if toxiproxy is not None:
        create_proxies(toxiproxy, spots)
    command_nodes = []
    for index, spot in enumerate(spots):
        values = {"python": sys.executable, "host": spot.host, "advertised_host": spot.advertised_host,
                  "port": spot.port, "node_id": index, "run_dir": str(run_dir)}
        values["data_dir"] = spec.get("data_dir", "{run_dir}/node-{node_id}").format(**values)
        command = [word.format(**values) for word in spec["start"]]
        command_nodes.append(CommandNode(index, spot.wrap(command), (spot.advertised_host, spot.port),
                                         f"{spot.advertised_host}:{spot.port}", str(run_dir / f"node-{index}.log"),
                                         float(spec.get("ready_timeout_s", READY_TIMEOUT_S))))
    return Target(spec.get("name", path.stem), command_nodes, mode, network, toxiproxy)
