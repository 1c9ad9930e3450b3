"""Broker configuration: Kafka's server property names, read into fields that carry units.

A broker is configured the way Apache Kafka is: `server.properties` style keys
(`node.id`, `log.dirs`, `log.retention.ms`, ...). `BrokerConfig.from_properties`
parses and checks them; `topic_defaults()` gives the broker-wide defaults under the
topic-level names (`retention.ms`, `segment.bytes`, ...) that a topic's own configs
override, the way Kafka derives a LogConfig from server defaults plus topic overrides.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields

MiB = 1024 * 1024
INT_MAX = (1 << 31) - 1

# Broker property -> the topic-level config it provides the default for.
TOPIC_DEFAULT_SYNONYMS = {
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.cleanup.policy": "cleanup.policy",
    "message.max.bytes": "max.message.bytes",
    "min.insync.replicas": "min.insync.replicas",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "compression.type": "compression.type",  # the broker property has the topic config's name
}


# Security properties (listeners, TLS, SASL, the authorizer) are kept as given and read by
# reference/security/: their keys are open-ended (listener.name.<listener>.<mechanism>.X).
SECURITY_PROPERTY_PREFIXES = ("listener.", "ssl.", "sasl.", "advertised.listeners", "inter.broker.listener.name",
                              "controller.listener.names", "security.inter.broker.protocol", "super.users",
                              "authorizer.class.name", "allow.everyone.if.no.acl.found", "connections.max.reauth.ms",
                              "connection.failed.authentication.delay.ms")


@dataclass(frozen=True)
class BrokerConfig:
    node_id: int = 0
    listen_host: str = "127.0.0.1"
    listen_port: int = 9092
    advertised_host: str = ""  # empty: the listen host
    log_dirs: str = ""
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    socket_request_max_bytes: int = 100 * MiB
    max_connections: int = INT_MAX  # max.connections: client connections the node holds in all
    max_connections_per_ip: int = INT_MAX  # max.connections.per.ip
    connections_max_idle_ms: int = 600_000  # connections.max.idle.ms: a connection silent this long is closed
    fetch_max_bytes: int = 55 * MiB  # fetch.max.bytes: the most a consumer's Fetch response carries (KIP-74)
    message_max_bytes: int = 1048588
    log_retention_ms: int = 7 * 24 * 3600 * 1000
    log_retention_bytes: int = -1
    log_retention_check_interval_ms: int = 300_000
    log_cleaner_enable: bool = True  # compaction of cleanup.policy=compact topics (reference/storage/cleaner.py)
    log_cleaner_backoff_ms: int = 15_000  # the pause between cleaner passes
    log_cleaner_delete_retention_ms: int = 24 * 3600 * 1000
    log_cleaner_min_cleanable_ratio: float = 0.5
    log_cleaner_min_compaction_lag_ms: int = 0
    log_segment_bytes: int = 1024 * MiB
    log_roll_ms: int = 7 * 24 * 3600 * 1000
    log_cleanup_policy: str = "delete"
    min_insync_replicas: int = 1
    log_message_timestamp_type: str = "CreateTime"
    compression_type: str = "producer"  # compression.type: the codec topics store batches in by default
    log_flush_interval_messages: int = 2**63 - 1
    log_flush_interval_ms: int = 2**63 - 1
    log_flush_scheduler_interval_ms: int = 1000
    # Group coordinator (reference/coordinator/). offsets.topic.num.partitions is 50 in Kafka;
    # one node keeps every partition open, so kspec's default is smaller.
    offsets_topic_num_partitions: int = 8
    offsets_topic_segment_bytes: int = 100 * MiB
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5000
    # The range a group's own consumer.session.timeout.ms / consumer.heartbeat.interval.ms may take (KIP-848).
    group_consumer_min_session_timeout_ms: int = 45_000
    group_consumer_max_session_timeout_ms: int = 60_000
    group_consumer_min_heartbeat_interval_ms: int = 5000
    group_consumer_max_heartbeat_interval_ms: int = 15_000
    # Transaction coordinator (reference/transaction/); Kafka's default partition count is 50.
    transaction_state_log_num_partitions: int = 8
    transaction_state_log_replication_factor: int = 3  # enforced when a cluster makes the topic (KIP-115)
    transaction_max_timeout_ms: int = 900_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # Historical transaction bugs (reference/transaction/partition.py TransactionBugs), off by default;
    # the late-produce one also makes leaders hold a transactional write now and then until after its
    # transaction ended (a delayed Produce), so that real clients meet it (reference/transaction/README.md).
    kspec_bug_serve_aborted_to_read_committed: bool = False
    kspec_bug_late_produce_joins_next_transaction: bool = False
    # Cluster mode (reference/node/cluster.py): set controller.quorum.voters to run this node in
    # a KRaft-style cluster; empty keeps the single-node broker. process.roles (KIP-500): broker
    # and controller in one process (combined mode), or broker only (an observer of the metadata
    # log, not in the voters), or controller only (a voter that serves no clients).
    process_roles: str = "broker,controller"
    controller_quorum_voters: str = ""  # the controllers only: "3001@127.0.0.1:9093,3002@127.0.0.1:9094,..."
    controller_quorum_election_timeout_ms: int = 1000
    controller_quorum_fetch_timeout_ms: int = 2000
    broker_heartbeat_interval_ms: int = 2000
    # How long a forwarded admin request waits for an active controller before it is answered
    # REQUEST_TIMED_OUT (reference/server/node_to_controller.py): Kafka's forwarding channel's
    # retryTimeoutMs, 60 s, which Kafka does not let one configure; kspec's tests shorten it.
    kspec_forwarding_timeout_ms: int = 60_000
    broker_session_timeout_ms: int = 9000
    # Preferred leaders come back by themselves (reference/controller/state.py balance_partition_leaders).
    # Kafka's leader.imbalance.per.broker.percentage is not read: KRaft's controller has no such threshold.
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1 * MiB
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    offsets_topic_replication_factor: int = 3  # enforced when a cluster makes the topic (KIP-115)
    # Historical replication bugs (reference/replication/replica.py ReplicationBugs), off by default.
    kspec_bug_truncation: str = "kip279"
    kspec_bug_ack_before_isr: bool = False
    kspec_bug_count_fenced_follower_into_hw: bool = False
    kspec_bug_read_above_hw: bool = False
    # Historical authorization bugs (reference/security/checks.py, reference/security/README.md), off by default.
    kspec_bug_acl_skip_produce: bool = False
    kspec_bug_follower_fetch_without_cluster_action: bool = False
    security_properties: dict[str, str] = field(default_factory=dict, compare=False)  # listeners and the above

    @functools.cached_property
    def listeners(self):
        """Every listener (reference/security/listeners.py); the first is listen_host:listen_port."""
        from reference.security.listeners import configure_listeners
        listeners = configure_listeners(self.security_properties)
        listeners[0].host, listeners[0].port = self.listen_host, self.listen_port
        return listeners

    @functools.cached_property  # asked on every request a cluster node handles
    def roles(self) -> frozenset[str]:
        """process.roles as a set: {"broker"}, {"controller"} or both."""
        return frozenset(role.strip() for role in self.process_roles.split(","))

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def advertised(self) -> tuple[str, int]:
        return (self.advertised_host or self.listen_host, self.listen_port)

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> BrokerConfig:
        """Build from Kafka property names; raise ValueError naming a bad key or value."""
        known = {f.name: f for f in fields(cls)}
        values: dict[str, object] = {}
        security: dict[str, str] = {}
        for key, raw in properties.items():
            if key == "listeners":
                values["listen_host"], values["listen_port"] = parse_listener(raw)
                security[key] = raw
                continue
            if key.startswith(SECURITY_PROPERTY_PREFIXES):
                security[key] = raw
                continue
            if key == "advertised.host.name":
                values["advertised_host"] = raw
                continue
            name = key.replace(".", "_")
            if name not in known or name in ("listen_host", "listen_port", "advertised_host", "security_properties"):
                raise ValueError(f"unknown broker property {key!r}")
            values[name] = _parse(key, raw, known[name].type)
        config = cls(**values, security_properties=security)
        config.check()
        return config

    def check(self) -> None:
        problems = [
            (self.node_id >= 0, "node.id must be >= 0"),
            (0 <= self.listen_port < 65536, "the listener port must be 0..65535"),
            (self.num_partitions >= 1, "num.partitions must be >= 1"),
            (self.default_replication_factor >= 1, "default.replication.factor must be >= 1"),
            (self.socket_request_max_bytes >= 1024, "socket.request.max.bytes must be >= 1024"),
            (self.message_max_bytes >= 0, "message.max.bytes must be >= 0"),
            (self.max_connections >= 0, "max.connections must be >= 0"),
            (self.max_connections_per_ip >= 0, "max.connections.per.ip must be >= 0"),
            (self.connections_max_idle_ms >= 1, "connections.max.idle.ms must be >= 1"),
            (self.fetch_max_bytes >= 0, "fetch.max.bytes must be >= 0"),
            (self.compression_type in ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
             "compression.type must be one of uncompressed, zstd, lz4, snappy, gzip, producer"),
            (self.log_segment_bytes >= 14, "log.segment.bytes must be >= 14"),
            (self.kspec_forwarding_timeout_ms >= 0, "kspec.forwarding.timeout.ms must be >= 0"),
            (self.log_retention_check_interval_ms >= 1, "log.retention.check.interval.ms must be >= 1"),
            (self.log_cleaner_backoff_ms >= 0, "log.cleaner.backoff.ms must be >= 0"),
            (self.log_flush_scheduler_interval_ms >= 1, "log.flush.scheduler.interval.ms must be >= 1"),
            (self.kspec_bug_truncation in ("hw", "kip101", "kip279"), "kspec.bug.truncation must be hw, kip101 or kip279"),
            (self.leader_imbalance_check_interval_seconds >= 1, "leader.imbalance.check.interval.seconds must be >= 1"),
            (self.broker_session_timeout_ms > self.broker_heartbeat_interval_ms,
             "broker.session.timeout.ms must exceed broker.heartbeat.interval.ms"),
        ]
        for holds, message in problems:
            if not holds:
                raise ValueError(message)
        self._check_roles()
        self.listeners  # noqa: B018 - builds and checks every listener (TLS stores, JAAS) before the start
        from reference.security.authorizer import StandardAuthorizer
        StandardAuthorizer.from_properties(self.security_properties, tuple)  # checks its properties
        if self.controller_quorum_voters:  # how this node reaches the others: TLS stores and credentials checked
            from reference.security.inter_node import CONTROLLER, INTER_BROKER, client_security
            for purpose in (CONTROLLER, INTER_BROKER):
                client_security(self.security_properties, self.listeners, purpose)

    def _check_roles(self) -> None:
        """A controller is a voter and a broker-only node is not (it observes the metadata log)."""
        roles = [role.strip() for role in self.process_roles.split(",")]
        if sorted(roles) not in (["broker"], ["controller"], ["broker", "controller"]):
            raise ValueError(f"process.roles must be broker, controller or broker,controller, not {self.process_roles!r}")
        if not self.controller_quorum_voters:
            if self.roles != {"broker", "controller"}:
                raise ValueError(f"process.roles={self.process_roles} needs controller.quorum.voters")
            return
        voter = self.node_id in parse_voters(self.controller_quorum_voters)
        if self.is_controller and not voter:
            raise ValueError(f"node.id {self.node_id} has process.roles={self.process_roles} but is not in "
                             "controller.quorum.voters")
        if not self.is_controller and voter:
            raise ValueError(f"node.id {self.node_id} is broker-only (process.roles=broker) but is in "
                             "controller.quorum.voters, which lists the controllers only")

    def topic_defaults(self) -> dict[str, str]:
        """The broker's defaults for topic-level configs, keyed by the topic config name."""
        return {
            topic_key: _format(getattr(self, broker_key.replace(".", "_")))
            for broker_key, topic_key in TOPIC_DEFAULT_SYNONYMS.items()
        }


def parse_voters(voters: str) -> dict[int, tuple[str, int]]:
    """controller.quorum.voters, `1@127.0.0.1:9092,2@127.0.0.1:9093` -> {1: ("127.0.0.1", 9092), ...}."""
    parsed = {}
    for voter in voters.split(","):
        node_id, sep, address = voter.strip().partition("@")
        host, sep2, port = address.rpartition(":")
        if not (sep and sep2 and node_id.isdigit() and port.isdigit()):
            raise ValueError(f"controller.quorum.voters entry {voter!r} is not ID@HOST:PORT")
        parsed[int(node_id)] = (host, int(port))
    return parsed


def parse_listener(listener: str) -> tuple[str, int]:
    """'HOST:PORT' or 'NAME://HOST:PORT[,...]' -> (host, port) of the first listener."""
    address = listener.split(",", 1)[0].strip().split("://", 1)[-1]
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"listener {listener!r} is not HOST:PORT")
    return host or "0.0.0.0", int(port)


def read_properties_file(path: str) -> dict[str, str]:
    """A Java .properties file (key=value lines, '#' and '!' comments, a line ending in a
    backslash continued on the next, as Kafka's docs write sasl.jaas.config) -> dict."""
    properties = {}
    with open(path, encoding="utf-8") as f:
        lines = iter(enumerate(f, 1))
        for number, line in lines:
            line = line.strip()
            if not line or line[0] in "#!":
                continue
            while (len(line) - len(line.rstrip("\\"))) % 2 == 1:  # an odd run of backslashes: continued
                line = line[:-1] + next(lines, (number, ""))[1].strip()
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"{path}:{number}: expected key=value, got {line!r}")
            properties[key.strip()] = value.strip()
    return properties


def _parse(key: str, raw: str, kind: object) -> object:
    try:
        if kind in ("bool", bool):
            if raw.lower() not in ("true", "false"):
                raise ValueError
            return raw.lower() == "true"
        if kind in ("int", int):
            return int(raw)
        if kind in ("float", float):
            return float(raw)
        return raw
    except ValueError:
        raise ValueError(f"property {key}={raw!r} is not a valid {kind}") from None


def _format(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
