"""Start and stop `kspec broker` as an OS process: for tests, the conformance kit and the demo.

    with BrokerProcess(data_dir) as broker:
        client(bootstrap_servers=broker.bootstrap)
        broker.kill()      # kill -9
        broker.start()     # again, on the same data dir and the same port

The first start listens on a free port (or the one given); restarts reuse the port the
broker last had, so clients reconnect to the same address. The process's stderr (its log)
goes to `data_dir/../<name>.stderr.log` unless a file is given.
"""
from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import struct
import sys
import threading
import time
from typing import Callable

from reference.node.base import METADATA_TOPIC
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from reference.protocol.messages import decode_response, encode_request

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
# Overrides for clusters whose tests kill nodes: a node's death is noticed in about a second
# (heartbeats every 200 ms, fenced after 1.5 s without one; a follower that stops fetching leaves
# the ISR after 2 s; a controller quorum elects a new leader within 0.5-1 s).
FAST_FAILOVER = {
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "1500",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "100",
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
}


INTERNAL_TOPIC_REPLICATION_FACTOR_MAX = 3  # offsets.topic.replication.factor's default (and the transactions')


def internal_topic_replication(brokers: int) -> dict[str, str]:
    """The internal topics' replication factors for a cluster of `brokers` brokers: Kafka's
    default of 3, or fewer for a smaller cluster, as Kafka's own single-broker configs set them
    (a cluster makes `__consumer_offsets` only once this many brokers are unfenced, KIP-115)."""
    factor = str(min(brokers, INTERNAL_TOPIC_REPLICATION_FACTOR_MAX))
    return {"offsets.topic.replication.factor": factor, "transaction.state.log.replication.factor": factor}


class BrokerNotReady(RuntimeError):
    pass


def cluster_metadata(bootstrap: str, topic: str | None = None, config: dict[str, str] | None = None):
    """A cluster's Metadata as confluent-kafka sees it (with `config`'s client properties, for a
    secured listener), or None when no node answers."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    try:
        return AdminClient({**(config or {}), "bootstrap.servers": bootstrap, "log_level": 0}).list_topics(
            topic, timeout=2)
    except KafkaException:
        return None


QUORUM_ASK_TIMEOUT_S = 3.0  # one node's DescribeQuorum answer; one with no active controller holds it (forwarding)
DESCRIBE_QUORUM_VERSION = 1
DESCRIBE_QUORUM_REQUEST = {"topics": [{"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]}


class QuorumConnection:
    """One plaintext connection that sends a request and reads its answer (reference codec):
    the default way active_controller_id asks. conformance/wire.py's WireClient has the same
    request(), with TLS and SASL."""

    def __init__(self, address: str, timeout_s: float = QUORUM_ASK_TIMEOUT_S) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)

    def request(self, api_key: int, api_version: int, body: dict):
        self.sock.sendall(encode_request(api_key, api_version, 1, "kspec-process", body))
        (size,) = struct.unpack(">i", self._read_exactly(4))
        return decode_response(api_key, api_version, self._read_exactly(size))[1]

    def _read_exactly(self, count: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < count:
            chunk = self.sock.recv(count - len(chunks))
            if not chunk:
                raise ConnectionError("closed by the node")
            chunks += chunk
        return bytes(chunks)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> QuorumConnection:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def active_controller_id(addresses: list[str], connect: Callable[[str], QuorumConnection] = QuorumConnection,
                         timeout_s: float = QUORUM_ASK_TIMEOUT_S) -> int | None:
    """The active controller: the Raft leader of the metadata quorum, as DescribeQuorum (key 55,
    KIP-595) names it, asked of every address at once (a node forwards it to the active controller,
    KIP-590); the first leader named within timeout_s. Not Metadata's ControllerId: that names a
    live broker, which forwards admin requests, also while the quorum has no leader. -1 while no
    node names a leader (an election: a node holds the request, waiting for one to forward it to),
    None when no node that answered ApiVersions offers DescribeQuorum (a broker without KRaft's
    quorum API, or a single reference node, which has no quorum): then Metadata's ControllerId is
    all there is to ask. A node paused or cut off costs no more than timeout_s: it is left to
    its daemon thread. connect(address) gives a connection with request(api_key, version, body)."""
    answers: queue.Queue = queue.Queue()  # ("offered", None) once ApiVersions lists DescribeQuorum; ("done", leader)

    def ask(address: str) -> None:
        leader = None
        try:
            with connect(address) as connection:
                versions = connection.request(ApiKey.API_VERSIONS, 0, {})
                if any(k.api_key == ApiKey.DESCRIBE_QUORUM for k in versions.api_keys):
                    answers.put(("offered", None))
                    answer = connection.request(ApiKey.DESCRIBE_QUORUM, DESCRIBE_QUORUM_VERSION,
                                                DESCRIBE_QUORUM_REQUEST)
                    partition = answer.topics[0].partitions[0] if answer.error_code == ErrorCode.NONE else None
                    if partition is not None and partition.error_code == ErrorCode.NONE and partition.leader_id >= 0:
                        leader = partition.leader_id
        except Exception:  # down, refusing, or an answer that does not decode: this node names no leader
            pass
        answers.put(("done", leader))

    for address in addresses:
        threading.Thread(target=ask, args=(address,), name=f"describe-quorum-{address}", daemon=True).start()
    deadline_s, offered, done = time.monotonic() + timeout_s, False, 0
    while done < len(addresses) and (left_s := deadline_s - time.monotonic()) > 0:
        try:
            kind, leader = answers.get(timeout=left_s)
        except queue.Empty:
            break
        if leader is not None:
            return leader
        offered = offered or kind == "offered"
        done += kind == "done"
    return -1 if offered else None


def cluster_ready(metadata, brokers: int) -> bool:
    """Metadata that lists `brokers` brokers, a controller, and a leader for every partition."""
    return (metadata is not None and len(metadata.brokers) >= brokers and metadata.controller_id >= 0
            and all(p.leader >= 0 for t in metadata.topics.values() for p in t.partitions.values()))


class BrokerProcess:
    def __init__(self, data_dir: str, *, listen: str = "127.0.0.1:0", node_id: int = 0,
                 overrides: dict[str, str] | None = None, stderr_path: str | None = None) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.listen = listen
        self.node_id = node_id
        self.overrides = dict(overrides or {})
        self.stderr_path = stderr_path or self.data_dir.rstrip("/") + ".stderr.log"
        self.process: subprocess.Popen | None = None
        self.bootstrap: str | None = None  # HOST:PORT once ready
        self.listeners: dict[str, str] = {}  # listener name -> HOST:PORT once ready, e.g. {"SASL_SSL": ...}

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "kspec.cli", "broker", "--listen", self.listen,
                   "--data-dir", self.data_dir, "--node-id", str(self.node_id)]
        for key, value in sorted(self.overrides.items()):
            command += ["--set", f"{key}={value}"]
        return command

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> str:
        """Start the process, wait for its ready line, return the bootstrap address."""
        assert not self.running, "already running"
        with open(self.stderr_path, "ab") as stderr:
            self.process = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=stderr,
                                            stdin=subprocess.DEVNULL)
        line = self._read_ready_line(timeout_s)
        if "ready" not in line or "bootstrap=" not in line:
            self.kill()
            raise BrokerNotReady(f"no ready line from {' '.join(self.command())}: {line!r}; see {self.stderr_path}")
        self.bootstrap = line.split("bootstrap=", 1)[1].split()[0]
        if " listeners=" in line:
            self.listeners = dict(entry.split("://", 1) for entry in line.split(" listeners=", 1)[1].split()[0].split(","))
        # restarts come back on the same ports
        self.listen = ",".join(f"{name}://{address}" for name, address in self.listeners.items()) or self.bootstrap
        return self.bootstrap

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait: a clean shutdown. Returns the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        finally:
            self.process.stdout.close()

    def kill(self) -> None:
        """kill -9: no flush, no clean-shutdown marker."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process.stdout.close()

    def restart(self) -> str:
        self.stop()
        return self.start()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> BrokerProcess:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self.running:
            self.stop()

    def _read_ready_line(self, timeout_s: float) -> str:
        """The first stdout line, or '' if none came within timeout_s or the process ended."""
        assert self.process is not None and self.process.stdout is not None
        deadline = time.monotonic() + timeout_s
        os.set_blocking(self.process.stdout.fileno(), False)
        line = b""
        while not line.endswith(b"\n") and time.monotonic() < deadline:
            chunk = self.process.stdout.readline()
            if chunk:
                line += chunk
            elif self.process.poll() is not None:
                break
            else:
                time.sleep(0.01)
        return line.decode(errors="replace").strip()


CONTROLLER_ID_BASE = 3000  # separate controllers are nodes 3001..3000+M, as in Kafka's documentation


class ClusterProcess:
    """A cluster of `kspec broker` processes, one per node, on 127.0.0.1: for tests, the
    conformance suite and the fault harness. With controllers=0 (the default) the N nodes run
    in combined mode (process.roles=broker,controller, every node a voter); with controllers=M,
    M controller-only nodes form the quorum and the N nodes are broker-only.

        with ClusterProcess(base_dir, nodes=3, overrides={...}) as cluster:
            cluster.bootstrap             # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
            leader = cluster.leader_of("t", 0)
            cluster.kill(leader)          # kill -9 one node
            cluster.start_node(leader)    # back on its data dir and port

    Every node's command line names its listen address and the whole voters list
    (controller.quorum.voters), so a runner may start the same commands elsewhere (e.g. in
    network namespaces, with `hosts` giving each node's address, brokers first). Brokers are
    nodes 1..N, so node control and the fault harness address them as in combined mode;
    controllers are CONTROLLER_ID_BASE + 1.. + M, ids no broker can have. The bootstrap list
    names the brokers only: controllers serve no clients.
    """

    def __init__(self, base_dir: str, nodes: int = 3, *, controllers: int = 0, base_port: int | None = None,
                 hosts: list[str] | None = None, overrides: dict[str, str] | None = None) -> None:
        assert nodes >= 1 and controllers >= 0, (nodes, controllers)
        os.makedirs(base_dir, exist_ok=True)
        self.broker_ids = list(range(1, nodes + 1))
        self.controller_ids = [CONTROLLER_ID_BASE + i for i in range(1, controllers + 1)]
        node_ids = self.broker_ids + self.controller_ids
        hosts = hosts or ["127.0.0.1"] * len(node_ids)
        ports = [base_port + i for i in range(len(node_ids))] if base_port else free_ports(len(node_ids))
        self.addresses = {node_id: f"{host}:{port}" for node_id, host, port in zip(node_ids, hosts, ports)}
        voter_ids = self.controller_ids or self.broker_ids
        voters = ",".join(f"{node_id}@{self.addresses[node_id]}" for node_id in voter_ids)
        # process.roles of controller-only and broker-only nodes; combined mode keeps the default.
        roles = {**dict.fromkeys(self.controller_ids, "controller"),
                 **dict.fromkeys(self.broker_ids if controllers else [], "broker")}
        # Controllers first: brokers register with the quorum they form.
        self.nodes = {
            node_id: BrokerProcess(os.path.join(base_dir, f"node{node_id}"), listen=self.addresses[node_id],
                                   node_id=node_id,
                                   overrides={**({"process.roles": roles[node_id]} if node_id in roles else {}),
                                              **internal_topic_replication(nodes),
                                              "controller.quorum.voters": voters, **(overrides or {})})
            for node_id in self.controller_ids + self.broker_ids}

    @property
    def bootstrap(self) -> str:
        return ",".join(self.addresses[node_id] for node_id in self.broker_ids)

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> str:
        """Start every node, wait until every broker is registered and every partition has a leader."""
        for node in self.nodes.values():
            node.start(timeout_s)
        self.wait_ready(timeout_s)
        return self.bootstrap

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S, brokers: int | None = None) -> None:
        brokers = len(self.running_brokers()) if brokers is None else brokers
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if cluster_ready(self.metadata(), brokers):
                return
            time.sleep(0.1)
        raise BrokerNotReady(f"cluster {self.bootstrap} not ready within {timeout_s}s")

    def metadata(self, topic: str | None = None):
        """The cluster's Metadata as confluent-kafka sees it, or None when no node answers."""
        running = [self.addresses[node_id] for node_id in self.running_brokers()]
        return cluster_metadata(",".join(running), topic) if running else None

    def leader_of(self, topic: str, partition: int) -> int:
        """The partition's leader as the metadata says (-1 when offline or unknown)."""
        metadata = self.metadata(topic)
        if metadata is None or topic not in metadata.topics or partition not in metadata.topics[topic].partitions:
            return -1
        return metadata.topics[topic].partitions[partition].leader

    def controller_id(self) -> int:
        """The active controller (the quorum's Raft leader, by DescribeQuorum), -1 during an
        election. Metadata's ControllerId would name a live broker then (KIP-590 forwarding)."""
        running = [address for node_id, address in self.addresses.items() if self.nodes[node_id].running]
        found = active_controller_id(running)
        return -1 if found is None else found

    def running_brokers(self) -> list[int]:
        return [node_id for node_id in self.broker_ids if self.nodes[node_id].running]

    def start_node(self, node_id: int, timeout_s: float = READY_TIMEOUT_S) -> str:
        return self.nodes[node_id].start(timeout_s)

    def stop_node(self, node_id: int) -> int:
        return self.nodes[node_id].stop()

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def restart(self, node_id: int) -> str:
        self.nodes[node_id].stop()
        return self.nodes[node_id].start()

    def stop(self) -> None:
        for node in self.nodes.values():
            if node.running:
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes.values():
            if node.process is not None and node.process.returncode is None:
                node.stop()

    def __enter__(self) -> ClusterProcess:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: every probe socket stays bound until all are chosen, or the
    kernel may hand the same port out twice (two nodes of one cluster then share an address)."""
    with contextlib.ExitStack() as probes:
        sockets = [probes.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
