"""The broker under test: where it is, how to reach it, what it offers, and how to set up topics.

A Target is built once per run from the command line. It opens raw wire connections (TLS
and SASL PLAIN or SCRAM when the client properties ask for them), creates uniquely named topics (through CreateTopics
when the broker offers it, otherwise through Metadata auto-creation), translates client
properties (librdkafka names, e.g. security.protocol, sasl.username) for each client, and
stops, starts, pauses and resumes nodes when the run was given commands for that.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import shlex
import subprocess
import time
import uuid
from dataclasses import dataclass, field

import pytest

from conformance import sasl
from conformance.capabilities import METADATA_VERSION_RANGE, Capabilities, discover
from conformance.wire import WireClient, answered_entry, error_name, request_name
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

TOPIC_READY_TIMEOUT_S = 30.0
CREATE_RETRY_BACKOFF_S = 0.5
NODE_COMMAND_TIMEOUT_S = 60.0
NODE_RETURN_TIMEOUT_S = 60.0  # a started node is listed by Metadata again within this
POLL_INTERVAL_S = 0.1

# librdkafka property -> kafka-python / aiokafka keyword. Only these travel to the Python clients.
PYTHON_CLIENT_PROPERTIES = {
    "security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism", "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password", "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile", "ssl.key.location": "ssl_keyfile",
}

# librdkafka properties the kafkajs driver turns into kafkajs's ssl and sasl options.
KAFKAJS_PROPERTIES = ("security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
                      "ssl.ca.location", "ssl.certificate.location", "ssl.key.location")


class TopicSetupFailed(AssertionError):
    """A topic the test needs could not be created: the test fails, naming the broker's answer."""


@dataclass
class Target:
    bootstrap: str
    quick: bool = False
    properties: dict[str, str] = field(default_factory=dict)
    node_start_command: str | None = None  # shell template with {node_id}
    node_stop_command: str | None = None
    node_pause_command: str | None = None
    node_resume_command: str | None = None
    _capabilities: Capabilities | None = None
    _stopped: set[int] = field(default_factory=set)
    _paused: dict[int, str] = field(default_factory=dict)  # node id -> its address
    _disturbed: set[int] = field(default_factory=set)  # stopped or paused since the cluster was last whole
    _topic_numbers = itertools.count(1)

    # -- connections

    @property
    def first_address(self) -> str:
        return self.bootstrap.split(",")[0].strip()

    @property
    def uses_sasl(self) -> bool:
        return self.properties.get("security.protocol", "PLAINTEXT").upper().startswith("SASL")

    def wire(self, address: str | None = None) -> WireClient:
        """A raw connection to one broker: the given one, else the first live broker, bootstrap
        brokers first, that accepts a connection. A broker a test stopped or paused is never
        chosen: a paused one accepts connections but answers nothing, and a stopped one may still
        accept them through a proxy in front of it (docker's) and then reset them."""
        if address is not None:
            return sasl.connect(address, self.properties)
        refused = []
        for candidate in self._live_addresses():
            try:
                return sasl.connect(candidate, self.properties)
            except OSError as error:
                refused.append(f"{candidate}: {error}")
        raise ConnectionError(f"no live broker accepts a connection ({'; '.join(refused) or 'every one is stopped'})")

    def _live_addresses(self) -> list[str]:
        """The bootstrap addresses, then every listed broker's, without those of the brokers a
        test stopped or paused."""
        brokers = self._capabilities.brokers if self._capabilities is not None else ()
        down = set(self._paused.values()) | {b.address for b in brokers if b.node_id in self._stopped}
        candidates = [a.strip() for a in self.bootstrap.split(",")] + [b.address for b in brokers]
        return [a for a in dict.fromkeys(candidates) if a not in down]

    def wire_as(self, **properties: str) -> WireClient:
        """A connection to the first bootstrap broker with other client properties (e.g. another
        sasl.username and sasl.password) over the target's own."""
        return sasl.connect(self.first_address, {**self.properties, **properties})

    @property
    def capabilities(self) -> Capabilities:
        if self._capabilities is None:
            with self.wire() as wire:
                self._capabilities = discover(wire)
        return self._capabilities

    def refresh_capabilities(self) -> Capabilities:
        self._capabilities = None
        return self.capabilities

    # -- client configuration

    def rdkafka_config(self, **extra) -> dict:
        """A confluent-kafka configuration for this target, client properties included."""
        return {"bootstrap.servers": self.bootstrap, **self.properties, **extra}

    def client_extra(self, client: str) -> dict:
        """The client properties in the named client's own vocabulary (its driver's `extra`)."""
        if client in ("confluent-kafka", "kcat"):
            return dict(self.properties)
        if client in ("kafka-python", "aiokafka"):
            unknown = sorted(set(self.properties) - set(PYTHON_CLIENT_PROPERTIES))
            if unknown:
                pytest.skip(f"{client} takes no equivalent of client properties {', '.join(unknown)}")
            extra = {PYTHON_CLIENT_PROPERTIES[k]: v for k, v in self.properties.items()}
            if client == "aiokafka" and {"ssl_cafile", "ssl_certfile", "ssl_keyfile"} & set(extra):
                from aiokafka.helpers import create_ssl_context  # aiokafka takes an SSLContext, not file names
                extra["ssl_context"] = create_ssl_context(cafile=extra.pop("ssl_cafile", None),
                                                          certfile=extra.pop("ssl_certfile", None),
                                                          keyfile=extra.pop("ssl_keyfile", None))
            return extra
        if client == "kafkajs":
            return self._kafkajs_connection()
        if self.properties:
            pytest.skip(f"the {client} driver takes no client properties")
        return {}

    def _kafkajs_connection(self) -> dict:
        """kafkajs's `ssl` and `sasl` options from librdkafka's property names."""
        unknown = sorted(set(self.properties) - set(KAFKAJS_PROPERTIES))
        if unknown:
            pytest.skip(f"kafkajs takes no equivalent of client properties {', '.join(unknown)}")
        protocol = self.properties.get("security.protocol", "PLAINTEXT").upper()
        connection: dict = {}
        if protocol in ("SSL", "SASL_SSL"):
            connection["ssl"] = {key: self.properties[name] for name, key in
                                 (("ssl.ca.location", "ca"), ("ssl.certificate.location", "cert"),
                                  ("ssl.key.location", "key")) if name in self.properties}
        if protocol.startswith("SASL"):
            connection["sasl"] = {"mechanism": sasl.mechanism_of(self.properties).lower(),
                                  "username": self.properties.get("sasl.username", ""),
                                  "password": self.properties.get("sasl.password", "")}
        return connection

    # -- topics

    def new_topic_name(self, purpose: str) -> str:
        return f"kspec-{purpose}-{os.getpid()}-{next(self._topic_numbers)}-{uuid.uuid4().hex[:6]}"

    def create_topic(self, purpose: str, partitions: int = 1, *, replication_factor: int = -1,
                     configs: dict[str, str] | None = None) -> str:
        """A new topic; returns its name once every partition has a leader.

        Without CreateTopics the topic is auto-created through Metadata, which cannot pass
        configs or a partition count: a test that needs them is skipped with that reason.
        """
        name = self.new_topic_name(purpose)
        caps = self.capabilities
        version = caps.version(ApiKey.CREATE_TOPICS, 2, 7)
        with self.wire() as wire:
            if version is None:
                if configs:
                    pytest.skip(f"topic configs {sorted(configs)} need CreateTopics, which the broker does not offer")
                self._metadata(wire, name, auto_create=True)
            else:
                result = self._create_topic_request(wire, version, name, partitions, replication_factor, configs)
                deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
                while self._transient(result.error_code, replication_factor) and time.monotonic() < deadline:
                    time.sleep(CREATE_RETRY_BACKOFF_S)  # e.g. a restarted broker not yet unfenced: retry as a client does
                    result = self._create_topic_request(wire, version, name, partitions, replication_factor, configs)
                if result.error_code != ErrorCode.NONE:
                    raise TopicSetupFailed(f"CreateTopics {name} partitions={partitions} configs={configs} "
                                           f"answered {error_name(result.error_code)}: {result.get('error_message')}")
            count = self.wait_for_leaders(wire, name)
        if count < partitions:
            pytest.skip(f"needs {partitions} partitions; auto-created topics on this broker get {count}")
        return name

    def _transient(self, error_code: int, replication_factor: int) -> bool:
        """A CreateTopics error that goes away when the cluster settles: no active controller yet,
        or too few live brokers for a replication factor the cluster's broker count allows."""
        if error_code in (ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT):
            return True
        return (error_code == ErrorCode.INVALID_REPLICATION_FACTOR
                and 0 < replication_factor <= len(self.capabilities.brokers))

    @staticmethod
    def _create_topic_request(wire: WireClient, version: int, name: str, partitions: int, replication_factor: int,
                              configs: dict[str, str] | None, *, validate_only: bool = False):
        response = wire.request(ApiKey.CREATE_TOPICS, version, {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                        "assignments": [], "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout_ms": int(TOPIC_READY_TIMEOUT_S * 1000), "validate_only": validate_only})
        return answered_entry(f"{request_name(ApiKey.CREATE_TOPICS, version)} of {name}", response.topics, "name",
                              name, "topic")

    def wait_for_leaders(self, wire: WireClient, topic: str, partitions: int = 1,
                         timeout_s: float = TOPIC_READY_TIMEOUT_S) -> int:
        """Waits until every broker's Metadata shows at least `partitions` partitions of topic, each
        with a leader (in a cluster, brokers learn of a new topic, and of partitions added to it, at
        their own pace after the controller answered, so a test waits as Kafka's own tests do for
        metadata to propagate); returns the partition count."""
        deadline = time.monotonic() + timeout_s
        count = self._wait_for_leaders_on(wire, topic, partitions, deadline)
        for broker in self.capabilities.brokers:
            if broker.address != self.first_address:
                with self.wire(broker.address) as other:
                    self._wait_for_leaders_on(other, topic, partitions, deadline)
        return count

    def _wait_for_leaders_on(self, wire: WireClient, topic: str, partitions: int, deadline: float) -> int:
        while True:
            metadata = self._metadata(wire, topic, auto_create=False)
            found = metadata.topics[0] if metadata.topics else None
            if (found is not None and found.error_code == ErrorCode.NONE and len(found.partitions) >= partitions
                    and all(p.leader_id >= 0 for p in found.partitions)):
                return len(found.partitions)
            if time.monotonic() > deadline:
                raise TopicSetupFailed(f"topic {topic} has no leader for every partition in time: {found!r}")
            time.sleep(POLL_INTERVAL_S)

    def leader_wire(self, topic: str, partition: int = 0) -> WireClient:
        """A raw connection to the current leader of one partition."""
        leader_id = self.partition_leaders(topic)[partition]
        leader = self.capabilities.broker(leader_id)
        if leader is None:
            raise TopicSetupFailed(f"{topic}-{partition} has leader {leader_id}, which Metadata does not list")
        return self.wire(leader.address)

    def partition_leaders(self, topic: str) -> dict[int, int]:
        with self.wire() as wire:
            metadata = self._metadata(wire, topic, auto_create=False)
        version = self.capabilities.version(ApiKey.METADATA, *METADATA_VERSION_RANGE)
        found = answered_entry(f"{request_name(ApiKey.METADATA, version)} of {topic}", metadata.topics, "name",
                               topic, "topic")
        return {p.partition_index: p.leader_id for p in found.partitions}

    def _metadata(self, wire: WireClient, topic: str, *, auto_create: bool):
        version = self.capabilities.version(ApiKey.METADATA, *METADATA_VERSION_RANGE)
        return wire.request(ApiKey.METADATA, version, {"topics": [{"name": topic}],
                                                       "allow_auto_topic_creation": auto_create})

    # -- node control

    @property
    def controls_nodes(self) -> bool:
        return bool(self.node_start_command and self.node_stop_command)

    @property
    def controls_pauses(self) -> bool:
        return bool(self.node_pause_command and self.node_resume_command)

    def require_node_control(self, purpose: str) -> None:
        if not self.controls_nodes:
            pytest.skip(f"{purpose} needs --node-stop-command and --node-start-command")

    def require_pause_control(self, purpose: str) -> None:
        if not self.controls_pauses:
            pytest.skip(f"{purpose} needs --node-pause-command and --node-resume-command")

    def stop_node(self, node_id: int) -> None:
        self._run_node_command(self.node_stop_command, node_id)
        self._stopped.add(node_id)
        self._disturbed.add(node_id)

    def pause_node(self, node_id: int) -> None:
        """Freeze a node's process (SIGSTOP for the reference): it keeps its connections and its
        registration until its session runs out, and answers nothing meanwhile."""
        address = self.capabilities.broker(node_id).address
        self._run_node_command(self.node_pause_command, node_id)
        self._paused[node_id] = address
        self._disturbed.add(node_id)

    def resume_node(self, node_id: int) -> None:
        self._run_node_command(self.node_resume_command, node_id)
        del self._paused[node_id]

    def start_node(self, node_id: int, timeout_s: float = NODE_RETURN_TIMEOUT_S, *, await_live: bool = True) -> None:
        """Start a node and wait until the cluster counts it as live again, so the next test
        finds every broker: a topic replicated to all of them is accepted (CreateTopics with
        validate_only; a broker's Metadata may still list the node's previous registration),
        or, without CreateTopics, Metadata lists the node. Without await_live it returns once
        the start command did (while another node is paused, not every broker can be live)."""
        self._run_node_command(self.node_start_command, node_id)
        self._stopped.discard(node_id)
        if await_live:
            self.await_live({node_id}, timeout_s)

    def await_live(self, node_ids: set[int], timeout_s: float = NODE_RETURN_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not self._answers_live(node_ids):
            if time.monotonic() > deadline:
                raise RuntimeError(f"brokers {sorted(node_ids)} not counted live within {timeout_s:.0f} s")
            time.sleep(POLL_INTERVAL_S)
        self._disturbed -= node_ids

    def _answers_live(self, node_ids: set[int]) -> bool:
        """_counted_live, False when the connection drops meanwhile (as one may while the
        controller quorum changes leader): a client reconnects and asks again."""
        try:
            return self._counted_live(node_ids)
        except OSError:
            return False

    def _counted_live(self, node_ids: set[int]) -> bool:
        caps = self.capabilities
        if not all(self._lists_itself(node_id) for node_id in node_ids):
            return False  # a restarted node lists itself once its new incarnation is registered and unfenced
        with self.wire() as wire:
            version = caps.version(ApiKey.CREATE_TOPICS, 2, 7)
            if version is not None:
                probe = self._create_topic_request(wire, version, self.new_topic_name("live-probe"), 1,
                                                   caps.broker_count, None, validate_only=True)
                return probe.error_code == ErrorCode.NONE
            return node_ids <= self._listed_broker_ids(wire)

    def _lists_itself(self, node_id: int) -> bool:
        broker = self.capabilities.broker(node_id)
        if broker is None:
            return True  # a broker the run never knew: counted by the probe alone
        try:
            with self.wire(broker.address) as wire:
                return node_id in self._listed_broker_ids(wire)
        except OSError:
            return False

    def _listed_broker_ids(self, wire: WireClient) -> set[int]:
        metadata = wire.request(ApiKey.METADATA, self.capabilities.version(ApiKey.METADATA, *METADATA_VERSION_RANGE),
                                {"topics": [], "allow_auto_topic_creation": False})
        return {b.node_id for b in metadata.brokers}

    @contextlib.contextmanager
    def node_stopped(self, node_id: int):
        """Node node_id stopped for the block and started again after it, even when the block fails."""
        with self.nodes_restored():
            self.stop_node(node_id)
            yield

    @contextlib.contextmanager
    def nodes_restored(self):
        """For a block that stops and pauses nodes in any order: on leaving it, even when the
        block fails, every node it left paused is resumed and every node it left stopped is
        started again; then every node it stopped or paused is counted live."""
        try:
            yield
        finally:
            for node_id in sorted(self._paused):
                self.resume_node(node_id)
            for node_id in sorted(self._stopped):
                self.start_node(node_id, await_live=False)
            if self._disturbed:
                self.await_live(set(self._disturbed))

    def _run_node_command(self, template: str | None, node_id: int) -> None:
        assert template, "no node command configured"
        command = template.format(node_id=node_id)
        done = subprocess.run(shlex.split(command), capture_output=True, timeout=NODE_COMMAND_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"node command {command!r} exited {done.returncode}: {done.stderr.decode()[-500:]}")
