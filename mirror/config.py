"""mm2.properties, the file `connect-mirror-maker.sh` reads, as one FlowConfig per enabled flow.

Names and defaults are MirrorMaker 2's (MirrorMakerConfig, MirrorSourceConfig,
MirrorCheckpointConfig, DefaultTopicFilter, DefaultGroupFilter):

    clusters = A, B
    A.bootstrap.servers = host:9092          # and any client key: A.security.protocol = ...
    A.producer.acks = all                    # client keys for one kind of client only
    A->B.enabled = true                      # a flow (default false)
    A->B.topics = orders.*                   # a connector key for one flow; top level: every flow

A key is looked up as `<source>-><target>.<key>`, then `<key>`, then MM2's default. Every
problem is a ConfigError whose message is one line naming the key and how to mend it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from mirror.policy import POLICIES, ReplicationPolicy

FLOW = re.compile(r"^([^.\s>-][^\s>]*?)->([^.\s]+)\.(.+)$")  # "A->B.enabled"

# MirrorMaker 2's connector and worker keys with their defaults (strings, as in the file).
DEFAULTS = {
    "topics": ".*",
    "topics.exclude": r".*[\-\.]internal, .*\.replica, __.*",
    "groups": ".*",
    "groups.exclude": r"console-consumer-.*, connect-.*, __.*",
    "replication.policy.class": "org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
    "replication.policy.separator": ".",
    "replication.factor": "2",
    "sync.topic.configs.enabled": "true",
    "sync.topic.configs.interval.seconds": "600",
    "sync.topic.acls.enabled": "true",
    "sync.topic.acls.interval.seconds": "600",
    "config.properties.exclude": (r"follower\.replication\.throttled\.replicas, leader\.replication\.throttled\.replicas, "
                                  r"message\.timestamp\.difference\.max\.ms, message\.timestamp\.type, "
                                  r"unclean\.leader\.election\.enable, min\.insync\.replicas"),
    "refresh.topics.enabled": "true",
    "refresh.topics.interval.seconds": "600",
    "emit.checkpoints.enabled": "true",
    "emit.checkpoints.interval.seconds": "60",
    "sync.group.offsets.enabled": "false",
    "sync.group.offsets.interval.seconds": "60",
    "emit.heartbeats.enabled": "true",
    "emit.heartbeats.interval.seconds": "1",
    "heartbeats.replication.enabled": "true",
    "emit.offset-syncs.enabled": "true",
    "offset.lag.max": "100",
    "offset-syncs.topic.replication.factor": "3",
    "checkpoints.topic.replication.factor": "3",
    "heartbeats.topic.replication.factor": "3",
    "offset.storage.replication.factor": "3",
    "offset.storage.partitions": "25",
    "offset.flush.interval.ms": "60000",
    "exactly.once.support": "requested",
    "transaction.boundary": "poll",
    "transaction.boundary.interval.ms": "",
    "exactly.once.source.support": "disabled",
    "tasks.max": "1",
    # A historical bug on a switch (as the broker's kspec.bug.*), off by default: progress is
    # written without waiting for the copies' acks, so a kill -9 loses the copies in flight (MIR-1).
    # The copies' target offsets are not known at the commit either, so no offset syncs are written.
    "kspec.bug.mirror.commit.before.ack": "false",
}
# Worker and connector keys that are not client configs, so `<alias>.<key>` is not passed on.
NOT_CLIENT_KEYS = set(DEFAULTS) | {"enabled", "tasks.max", "exactly.once.source.support", "group.id"}
NOT_CLIENT_PREFIXES = ("offset.storage.", "config.storage.", "status.storage.", "key.converter", "value.converter",
                       "header.converter", "task", "worker", "replication.policy", "dedicated.mode.")
CLIENT_KINDS = ("producer", "consumer", "admin")
EXACTLY_ONCE_VALUES = ("requested", "required", "enabled")
TRANSACTION_BOUNDARIES = ("poll", "interval")  # KIP-618's `connector` needs a connector that defines them
SOURCE_SUPPORT_VALUES = ("disabled", "preparing", "enabled")


class ConfigError(ValueError):
    """A problem with mm2.properties, said in one line with the way to mend it."""


def read_properties(text: str) -> dict[str, str]:
    """Java .properties: `key=value`, `key: value` or `key value`; `#`/`!` comments; a trailing
    backslash continues a line; later keys win (java.util.Properties.load)."""
    properties: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip() if not logical else raw.strip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        match = re.match(r"^((?:\\.|[^=:\s\\])+)\s*[=:\s]?\s*(.*)$", logical)
        logical = ""
        if match:
            key = re.sub(r"\\(.)", r"\1", match.group(1))
            properties[key] = match.group(2).rstrip()
    return properties


def split_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def compile_list(key: str, value: str) -> re.Pattern:
    """MM2's filters: a comma-separated list of regexes, OR-ed, each matching the whole name."""
    patterns = split_list(value)
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as error:
            raise ConfigError(f"{key}: {pattern!r} is not a regular expression ({error}); "
                              f"fix it or quote special characters with a backslash") from None
    return re.compile("|".join(f"(?:{p})" for p in patterns) or "(?!)")


@dataclass(frozen=True)
class FlowConfig:
    """One enabled flow `source->target` with everything its mirror needs."""
    source: str
    target: str
    source_clients: dict[str, dict[str, str]]   # kind (producer/consumer/admin) -> librdkafka config
    target_clients: dict[str, dict[str, str]]
    topics: re.Pattern
    topics_exclude: re.Pattern
    groups: re.Pattern
    groups_exclude: re.Pattern
    config_properties_exclude: re.Pattern
    policy: ReplicationPolicy
    replication_factor: int
    internal_replication_factor: dict[str, int]  # "offset-syncs" / "checkpoints" / "heartbeats" / "offset.storage"
    offset_storage_partitions: int
    sync_topic_configs: bool
    sync_topic_configs_interval_s: float
    sync_topic_acls: bool
    sync_topic_acls_interval_s: float
    refresh_topics: bool
    refresh_topics_interval_s: float
    emit_checkpoints: bool
    emit_checkpoints_interval_s: float
    sync_group_offsets: bool
    sync_group_offsets_interval_s: float
    emit_heartbeats: bool
    emit_heartbeats_interval_s: float
    replicate_heartbeats: bool         # heartbeats topics mirrored whatever `topics` says
    emit_offset_syncs: bool
    offset_lag_max: int
    offset_flush_interval_ms: int
    exactly_once: bool
    transaction_boundary: str          # KIP-618: a transaction per poll, or per interval
    transaction_boundary_interval_ms: int
    tasks_max: int                     # MirrorSourceConnector's tasks: source partitions dealt round-robin
    bug_commit_before_ack: bool        # kspec.bug.mirror.commit.before.ack

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"

    @property
    def offset_syncs_topic(self) -> str:
        """On the source cluster (offset-syncs.topic.location=source, MM2's default)."""
        return f"mm2-offset-syncs.{self.target}.internal"

    @property
    def checkpoints_topic(self) -> str:
        return self.policy.checkpoints_topic(self.source)

    @property
    def offsets_topic(self) -> str:
        """The Connect offsets topic MM2's herder for this flow keeps in the target cluster."""
        return f"mm2-offsets.{self.source}.internal"

    def transactional_id(self, task: int) -> str:
        """KIP-618's `<group.id>-<connector>-<task>` with MM2's group.id `<source>-mm2`."""
        return f"{self.source}-mm2-MirrorSourceConnector-{task}"

    def mirrors_topic(self, topic: str) -> bool:
        """MM2's DefaultTopicFilter plus MirrorSourceConnector's rules: heartbeats topics always
        (unless heartbeats.replication.enabled=false),
        never internal topics, never a topic that came from the target (a cycle)."""
        if self.policy.is_internal_topic(topic) or self.policy.is_cycle(topic, self.target):
            return False
        if self.replicate_heartbeats and self.policy.is_heartbeats_topic(topic):
            return True
        return bool(self.topics.fullmatch(topic)) and not self.topics_exclude.fullmatch(topic)

    def mirrors_group(self, group: str) -> bool:
        return bool(self.groups.fullmatch(group)) and not self.groups_exclude.fullmatch(group)


def load(path: str, clusters_only: list[str] | None = None) -> list[FlowConfig]:
    """Every enabled flow in the file (only those into `clusters_only`, as `--clusters` does)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}; give the path of an mm2.properties file") from None
    return parse(read_properties(text), clusters_only)


def parse(properties: dict[str, str], clusters_only: list[str] | None = None) -> list[FlowConfig]:
    aliases = split_list(properties.get("clusters", ""))
    if not aliases:
        raise ConfigError("clusters: no cluster aliases; add a line such as `clusters = A, B`")
    for alias in clusters_only or ():
        if alias not in aliases:
            raise ConfigError(f"--clusters: unknown cluster alias {alias!r}; the file's clusters are {', '.join(aliases)}")
    for key in properties:
        match = FLOW.match(key)
        if match:
            for alias in match.group(1, 2):
                if alias not in aliases:
                    raise ConfigError(f"{key}: unknown cluster alias {alias!r}; add it to `clusters` "
                                      f"(now {', '.join(aliases)}) or fix the name")
    flows = []
    for source in aliases:
        for target in aliases:
            if source == target or (clusters_only and target not in clusters_only):
                continue
            if _boolean(properties, f"{source}->{target}.enabled", properties.get(f"{source}->{target}.enabled", "false")):
                flows.append(_flow(properties, source, target))
    if not flows:
        raise ConfigError("no flow is enabled; add a line such as "
                          f"`{aliases[0]}->{aliases[-1]}.enabled = true`" if len(aliases) > 1 else
                          "clusters: name at least two clusters and enable a flow such as `A->B.enabled = true`")
    return flows


def _flow(properties: dict[str, str], source: str, target: str) -> FlowConfig:
    prefix = f"{source}->{target}."

    def get(key: str) -> str:
        if prefix + key in properties:
            return properties[prefix + key]
        return properties.get(key, DEFAULTS.get(key, ""))

    def flow_key(key: str) -> str:
        return prefix + key if prefix + key in properties else key

    def integer(key: str, minimum: int) -> int:
        try:
            value = int(get(key))
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise ConfigError(f"{flow_key(key)}: {get(key)!r} is not a whole number >= {minimum}")
        return value

    def seconds(key: str) -> float:
        return float(integer(key, 0))

    def boolean(key: str) -> bool:
        return _boolean(properties, flow_key(key), get(key))

    policy_class = get("replication.policy.class")
    simple = policy_class.rsplit(".", 1)[-1]
    if simple not in POLICIES:
        raise ConfigError(f"replication.policy.class: {policy_class!r} is not known; use "
                          + " or ".join(f"org.apache.kafka.connect.mirror.{name}" for name in POLICIES))
    separator = get("replication.policy.separator")
    if not separator:
        raise ConfigError("replication.policy.separator: must not be empty (MM2's default is '.')")
    exactly_once = get("exactly.once.support")
    if exactly_once not in EXACTLY_ONCE_VALUES:
        raise ConfigError(f"{flow_key('exactly.once.support')}: {exactly_once!r} is not one of "
                          f"{', '.join(EXACTLY_ONCE_VALUES)}")
    worker_support = properties.get(f"{target}.exactly.once.source.support",
                                    properties.get("exactly.once.source.support", "disabled"))
    if worker_support not in SOURCE_SUPPORT_VALUES:
        raise ConfigError(f"exactly.once.source.support: {worker_support!r} is not one of {', '.join(SOURCE_SUPPORT_VALUES)}")
    boundary = get("transaction.boundary")
    if boundary not in TRANSACTION_BOUNDARIES:
        raise ConfigError(f"{flow_key('transaction.boundary')}: {boundary!r} is not one of {', '.join(TRANSACTION_BOUNDARIES)}")
    return FlowConfig(
        source=source, target=target,
        source_clients=_clients(properties, source), target_clients=_clients(properties, target),
        topics=compile_list(flow_key("topics"), get("topics")),
        topics_exclude=compile_list(flow_key("topics.exclude"), get("topics.exclude")),
        groups=compile_list(flow_key("groups"), get("groups")),
        groups_exclude=compile_list(flow_key("groups.exclude"), get("groups.exclude")),
        config_properties_exclude=compile_list(flow_key("config.properties.exclude"), get("config.properties.exclude")),
        policy=POLICIES[simple](separator),
        replication_factor=_replication_factor(flow_key("replication.factor"), get("replication.factor")),
        internal_replication_factor={
            name: _replication_factor(flow_key(f"{name}.replication.factor"), get(f"{name}.replication.factor"))
            for name in ("offset-syncs.topic", "checkpoints.topic", "heartbeats.topic", "offset.storage")},
        offset_storage_partitions=integer("offset.storage.partitions", 1),
        sync_topic_configs=boolean("sync.topic.configs.enabled"),
        sync_topic_configs_interval_s=seconds("sync.topic.configs.interval.seconds"),
        sync_topic_acls=boolean("sync.topic.acls.enabled"),
        sync_topic_acls_interval_s=seconds("sync.topic.acls.interval.seconds"),
        refresh_topics=boolean("refresh.topics.enabled"),
        refresh_topics_interval_s=seconds("refresh.topics.interval.seconds"),
        emit_checkpoints=boolean("emit.checkpoints.enabled"),
        emit_checkpoints_interval_s=seconds("emit.checkpoints.interval.seconds"),
        sync_group_offsets=boolean("sync.group.offsets.enabled"),
        sync_group_offsets_interval_s=seconds("sync.group.offsets.interval.seconds"),
        emit_heartbeats=boolean("emit.heartbeats.enabled"),
        emit_heartbeats_interval_s=seconds("emit.heartbeats.interval.seconds"),
        replicate_heartbeats=boolean("heartbeats.replication.enabled"),
        emit_offset_syncs=boolean("emit.offset-syncs.enabled"),
        offset_lag_max=integer("offset.lag.max", 0),
        offset_flush_interval_ms=integer("offset.flush.interval.ms", 1),
        # KIP-618: exactly once when the target's worker support is enabled, or asked for by name.
        exactly_once=worker_support == "enabled" or exactly_once in ("required", "enabled"),
        transaction_boundary=boundary,
        transaction_boundary_interval_ms=(integer("transaction.boundary.interval.ms", 1)
                                          if get("transaction.boundary.interval.ms") else
                                          integer("offset.flush.interval.ms", 1)),
        tasks_max=integer("tasks.max", 1),
        bug_commit_before_ack=boolean("kspec.bug.mirror.commit.before.ack"),
    )


def _boolean(properties: dict[str, str], key: str, value: str) -> bool:
    if value.strip().lower() not in ("true", "false"):
        raise ConfigError(f"{key}: {value!r} is not true or false")
    return value.strip().lower() == "true"


def _replication_factor(key: str, value: str) -> int:
    """-1 leaves the choice to the broker's default.replication.factor (KIP-464)."""
    try:
        factor = int(value)
    except ValueError:
        factor = 0
    if factor < 1 and factor != -1:
        raise ConfigError(f"{key}: {value!r} is not a replication factor (a whole number >= 1, or -1 for the broker default)")
    return factor


def _clients(properties: dict[str, str], alias: str) -> dict[str, dict[str, str]]:
    """librdkafka configs for one cluster's producer, consumer and admin client: `<alias>.<key>`
    goes to every client, `<alias>.<kind>.<key>` to one kind only."""
    prefix = alias + "."
    if prefix + "bootstrap.servers" not in properties:
        raise ConfigError(f"{prefix}bootstrap.servers: missing; add `{prefix}bootstrap.servers = HOST:PORT`")
    common: dict[str, str] = {}
    by_kind: dict[str, dict[str, str]] = {kind: {} for kind in CLIENT_KINDS}
    for key, value in properties.items():
        if not key.startswith(prefix) or FLOW.match(key):
            continue
        name = key[len(prefix):]
        kind, _, rest = name.partition(".")
        if kind in CLIENT_KINDS and rest:
            by_kind[kind][rest] = value
        elif name not in NOT_CLIENT_KEYS and not name.startswith(NOT_CLIENT_PREFIXES):
            common[name] = value
    return {kind: {**common, **by_kind[kind]} for kind in CLIENT_KINDS}
