"""How a node describes its configs and checks a group's (Kafka's ConfigHelper and GroupConfig).

A topic's effective config is its overrides (stored as ConfigRecords in the metadata log)
over the broker's defaults, which come from the command line or Kafka's defaults. Each
entry says where its value came from (config_source) and, when asked, lists its synonyms
in precedence order (KIP-226): topic override, broker property, Kafka default. A group's
configs (Kafka 4.0's GROUP resource, KIP-848's GroupConfig) are consumer.session.timeout.ms
and consumer.heartbeat.interval.ms: a group's own value (a GROUP ConfigRecord, source
DYNAMIC_GROUP_CONFIG) over the broker's group.consumer.* value, and a group's own value must
lie within the broker's group.consumer.min/max.* bounds.
"""
from __future__ import annotations

from dataclasses import fields

from reference.config import TOPIC_DEFAULT_SYNONYMS, BrokerConfig
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode, KafkaError
from reference.storage.config import BOOLEAN_CONFIGS, LogConfig

# A group config -> the broker config that gives its value (GroupConfig's defaults).
GROUP_CONFIG_SYNONYMS = {"consumer.session.timeout.ms": "group.consumer.session.timeout.ms",
                         "consumer.heartbeat.interval.ms": "group.consumer.heartbeat.interval.ms"}
# DescribeConfigsResponse ConfigSource.
TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
DYNAMIC_GROUP_CONFIG = 8
# DescribeConfigsResponse ConfigType (KIP-569).
CONFIG_TYPE_BOOLEAN, CONFIG_TYPE_STRING, CONFIG_TYPE_INT, CONFIG_TYPE_LONG, CONFIG_TYPE_DOUBLE, CONFIG_TYPE_LIST = (
    1, 2, 3, 5, 6, 7)
LIST_CONFIGS = frozenset({"cleanup.policy", "leader.replication.throttled.replicas",
                          "follower.replication.throttled.replicas"})
INT_CONFIGS = frozenset({"segment.bytes", "max.message.bytes", "min.insync.replicas", "index.interval.bytes",
                         "segment.index.bytes", "compression.gzip.level", "compression.lz4.level",
                         "compression.zstd.level"})
STRING_CONFIGS = frozenset({"message.timestamp.type", "compression.type"})
DOUBLE_CONFIGS = frozenset({"min.cleanable.dirty.ratio"})
BROKER_SYNONYM = {topic_key: broker_key for broker_key, topic_key in TOPIC_DEFAULT_SYNONYMS.items()}
KAFKA_DEFAULTS = LogConfig().to_properties()


def describe_topic_configs(broker: BrokerNode, overrides: dict[str, str], keys, include_synonyms: bool) -> list[dict]:
    broker_defaults = broker.config.topic_defaults()
    effective = broker.log_config(overrides).to_properties()
    entries = []
    for name in sorted(effective):
        if keys is not None and name not in keys:
            continue
        synonyms = []
        if name in overrides:
            synonyms.append({"name": name, "value": overrides[name], "source": TOPIC_CONFIG})
        broker_key = BROKER_SYNONYM.get(name)
        if broker_key and broker_defaults[name] != KAFKA_DEFAULTS[name]:
            synonyms.append({"name": broker_key, "value": broker_defaults[name], "source": STATIC_BROKER_CONFIG})
        synonyms.append({"name": broker_key or name, "value": KAFKA_DEFAULTS[name], "source": DEFAULT_CONFIG})
        entries.append({
            "name": name, "value": effective[name], "read_only": False, "config_source": synonyms[0]["source"],
            "is_default": synonyms[0]["source"] == DEFAULT_CONFIG, "is_sensitive": False,
            "synonyms": synonyms if include_synonyms else [], "config_type": _config_type(name),
            "documentation": None,
        })
    return entries


def describe_broker_configs(broker: BrokerNode, keys, include_synonyms: bool) -> list[dict]:
    defaults = BrokerConfig()
    entries = []
    for field in fields(BrokerConfig):
        name = field.name.replace("_", ".")
        if keys is not None and name not in keys:
            continue
        value, default = getattr(broker.config, field.name), getattr(defaults, field.name)
        source = DEFAULT_CONFIG if value == default else STATIC_BROKER_CONFIG
        synonyms = [{"name": name, "value": _text(value), "source": source}]
        entries.append({
            "name": name, "value": _text(value), "read_only": True, "config_source": source,
            "is_default": source == DEFAULT_CONFIG, "is_sensitive": False,
            "synonyms": synonyms if include_synonyms else [],
            "config_type": {"bool": 1, "int": CONFIG_TYPE_LONG}.get(field.type, CONFIG_TYPE_STRING),
            "documentation": None,
        })
    return entries


def describe_group_configs(broker: BrokerNode, group_id: str, keys, include_synonyms: bool) -> list[dict]:
    """A group's configs: its own values over the broker's group.consumer.* values."""
    overrides = broker.image.group_configs.get(group_id, {})
    defaults = BrokerConfig()
    entries = []
    for name, broker_key in GROUP_CONFIG_SYNONYMS.items():
        if keys is not None and name not in keys:
            continue
        field_name = broker_key.replace(".", "_")
        value, default = getattr(broker.config, field_name), getattr(defaults, field_name)
        synonyms = [{"name": broker_key, "value": _text(value),
                     "source": DEFAULT_CONFIG if value == default else STATIC_BROKER_CONFIG}]
        if name in overrides:
            synonyms.insert(0, {"name": name, "value": overrides[name], "source": DYNAMIC_GROUP_CONFIG})
        entries.append({
            "name": name, "value": synonyms[0]["value"], "read_only": False, "config_source": synonyms[0]["source"],
            "is_default": synonyms[0]["source"] == DEFAULT_CONFIG, "is_sensitive": False,
            "synonyms": synonyms if include_synonyms else [], "config_type": CONFIG_TYPE_INT, "documentation": None,
        })
    return entries


def check_group_configs(broker: BrokerNode, names, overrides: dict[str, str]) -> None:
    """A group's own values: known names, integers within the broker's group.consumer.min/max.* bounds,
    and a heartbeat interval below the session timeout (GroupConfig.validate); KafkaError(INVALID_CONFIG)."""
    unknown = sorted(set(names) - set(GROUP_CONFIG_SYNONYMS))
    if unknown:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"unknown group config(s) {', '.join(unknown)}; a group has "
                         f"{', '.join(GROUP_CONFIG_SYNONYMS)}")
    config = broker.config
    bounds = {"consumer.session.timeout.ms": (config.group_consumer_min_session_timeout_ms,
                                              config.group_consumer_max_session_timeout_ms),
              "consumer.heartbeat.interval.ms": (config.group_consumer_min_heartbeat_interval_ms,
                                                 config.group_consumer_max_heartbeat_interval_ms)}
    effective = {}
    for name, broker_key in GROUP_CONFIG_SYNONYMS.items():
        if name not in overrides:
            effective[name] = getattr(config, broker_key.replace(".", "_"))
            continue
        try:
            effective[name] = int(overrides[name])
        except ValueError:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name}={overrides[name]!r} is not an integer") from None
        low, high = bounds[name]
        if not low <= effective[name] <= high:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name}={effective[name]} is outside [{low}, {high}], the "
                             f"broker's {broker_key.replace('group.consumer.', 'group.consumer.min.')} and "
                             f"{broker_key.replace('group.consumer.', 'group.consumer.max.')}")
    if effective["consumer.heartbeat.interval.ms"] >= effective["consumer.session.timeout.ms"]:
        raise KafkaError(ErrorCode.INVALID_CONFIG, "consumer.heartbeat.interval.ms must be less than "
                         "consumer.session.timeout.ms")


def _config_type(name: str) -> int:
    """A topic config's type as Kafka's LogConfig defines it (DescribeConfigs ConfigType, KIP-569)."""
    for names, config_type in ((LIST_CONFIGS, CONFIG_TYPE_LIST), (INT_CONFIGS, CONFIG_TYPE_INT),
                               (STRING_CONFIGS, CONFIG_TYPE_STRING), (DOUBLE_CONFIGS, CONFIG_TYPE_DOUBLE),
                               (BOOLEAN_CONFIGS, CONFIG_TYPE_BOOLEAN)):
        if name in names:
            return config_type
    return CONFIG_TYPE_LONG


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
