"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44).

A topic's effective config is its overrides (stored as ConfigRecords in the metadata log)
over the broker's defaults, which come from the command line or Kafka's defaults. Each
entry says where its value came from (config_source) and, when asked, lists its synonyms
in precedence order (KIP-226): topic override, broker property, Kafka default. Broker
configs are described but not altered: they are static, read at start. A group's configs
(Kafka 4.0's GROUP resource, KIP-848's GroupConfig) are consumer.session.timeout.ms and
consumer.heartbeat.interval.ms: a group's own value (a GROUP ConfigRecord in the metadata log,
source DYNAMIC_GROUP_CONFIG) over the broker's group.consumer.* value, and a group's own value
must lie within the broker's group.consumer.min/max.* bounds.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import fields

from reference.config import TOPIC_DEFAULT_SYNONYMS, BrokerConfig
from reference.handlers.context import RequestContext
from reference.node.interface import BrokerNode
from reference.node.metadata import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE
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
# IncrementalAlterConfigs operations (KIP-339).
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

BROKER_SYNONYM = {topic_key: broker_key for broker_key, topic_key in TOPIC_DEFAULT_SYNONYMS.items()}
KAFKA_DEFAULTS = LogConfig().to_properties()


def handle_describe_configs(broker: BrokerNode, request, context: RequestContext) -> dict:
    results = []
    for resource in request.resources:
        result = {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": resource.resource_type,
                  "resource_name": resource.resource_name, "configs": []}
        try:
            if resource.resource_type == TOPIC_RESOURCE:
                overrides = broker.topic(resource.resource_name).configs
                result["configs"] = describe_topic_configs(broker, overrides, resource.configuration_keys,
                                                           request.include_synonyms)
            elif resource.resource_type == BROKER_RESOURCE:
                _check_broker_name(broker, resource.resource_name)
                result["configs"] = _describe_broker_configs(broker, resource.configuration_keys,
                                                             request.include_synonyms)
            elif resource.resource_type == GROUP_RESOURCE:
                result["configs"] = _describe_group_configs(broker, resource.resource_name,
                                                            resource.configuration_keys, request.include_synonyms)
            else:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"resource type {resource.resource_type} has no configs here")
        except KafkaError as e:
            result.update(error_code=e.code, error_message=e.message or None)
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}


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


def _describe_broker_configs(broker: BrokerNode, keys, include_synonyms: bool) -> list[dict]:
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


def _describe_group_configs(broker: BrokerNode, group_id: str, keys, include_synonyms: bool) -> list[dict]:
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


def _check_group_configs(broker: BrokerNode, names, overrides: dict[str, str]) -> None:
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


def handle_alter_configs(broker: BrokerNode, request, context: RequestContext) -> dict:
    """Legacy AlterConfigs: the given configs replace all of the topic's overrides."""
    responses = []
    for resource in request.resources:
        def replace_overrides(current: dict[str, str]) -> dict[str, str | None]:
            _check_unique(resource.configs)
            wanted = {config.name: config.value for config in resource.configs if config.value is not None}
            return {**{name: None for name in current if name not in wanted}, **wanted}
        responses.append(_alter(broker, resource, replace_overrides, request.validate_only, context.now_ms))
    return {"throttle_time_ms": 0, "responses": responses}


def handle_incremental_alter_configs(broker: BrokerNode, request, context: RequestContext) -> dict:
    responses = []
    for resource in request.resources:
        def apply_operations(current: dict[str, str]) -> dict[str, str | None]:
            _check_unique(resource.configs)
            return {config.name: _operation(broker, current, config) for config in resource.configs}
        responses.append(_alter(broker, resource, apply_operations, request.validate_only, context.now_ms))
    return {"throttle_time_ms": 0, "responses": responses}


def _alter(broker: BrokerNode, resource, changes_for, validate_only: bool, now_ms: int) -> dict:
    response = {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": resource.resource_type,
                "resource_name": resource.resource_name}
    try:
        if resource.resource_type == BROKER_RESOURCE:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "broker configs are static here: set them with --config or --set at start")
        if resource.resource_type == GROUP_RESOURCE:
            _alter_group(broker, resource.resource_name, changes_for, validate_only, now_ms)
        elif resource.resource_type != TOPIC_RESOURCE:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"resource type {resource.resource_type} has no configs here")
        else:
            topic = broker.topic(resource.resource_name)
            broker.alter_topic_configs(topic.name, changes_for(dict(topic.configs)), validate_only, now_ms)
    except KafkaError as e:
        response.update(error_code=e.code, error_message=e.message or None)
    return response


def _alter_group(broker: BrokerNode, group_id: str, changes_for, validate_only: bool, now_ms: int) -> None:
    if not group_id:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "a GROUP config resource needs a group id")
    current = dict(broker.image.group_configs.get(group_id, {}))
    changes = changes_for(current)
    _check_group_configs(broker, changes, {name: value for name, value in {**current, **changes}.items() if value is not None})
    broker.alter_group_configs(group_id, changes, validate_only, now_ms)


def _operation(broker: BrokerNode, current: dict[str, str], config) -> str | None:
    if config.config_operation == OP_SET:
        return config.value
    if config.config_operation == OP_DELETE:
        return None
    if config.config_operation not in (OP_APPEND, OP_SUBTRACT):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown config operation {config.config_operation}")
    if config.name not in LIST_CONFIGS:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"{config.name} is not a list: APPEND and SUBTRACT need one")
    effective = broker.log_config(current).to_properties()[config.name]
    items = [item for item in effective.split(",") if item]
    given = [item for item in (config.value or "").split(",") if item]
    if config.config_operation == OP_APPEND:
        items += [item for item in given if item not in items]
    else:
        items = [item for item in items if item not in given]
    return ",".join(items)


def _check_unique(configs) -> None:
    repeated = [name for name, count in Counter(config.name for config in configs).items() if count > 1]
    if repeated:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"config(s) given more than once: {', '.join(repeated)}")


def _check_broker_name(broker: BrokerNode, resource_name: str) -> None:
    if resource_name not in ("", str(broker.config.node_id)):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"this is broker {broker.config.node_id}, not {resource_name!r}")


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
