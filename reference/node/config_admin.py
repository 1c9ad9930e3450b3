"""Config alterations, apart from the request: Kafka's ConfigAdminManager. Which changes an
AlterConfigs or IncrementalAlterConfigs (KIP-339) resource asks for, checked, then written
through the node (topic overrides and group values are ConfigRecords in the metadata log).
How a resource is described is here too (describe_configs, from reference/node/configs.py).
Broker configs are described but not altered: they are static, read at start.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable

from reference.node.configs import (
    LIST_CONFIGS, check_group_configs, describe_broker_configs, describe_group_configs, describe_topic_configs,
)
from reference.node.interface import BrokerNode
from reference.node.metadata import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE
from reference.protocol.errors import ErrorCode, KafkaError

# IncrementalAlterConfigs operations (KIP-339).
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

Changes = dict[str, "str | None"]  # config name -> new value, None: remove the override


def describe_configs(broker: BrokerNode, resource_type: int, resource_name: str, keys, include_synonyms: bool) -> list:
    """The described configs of one resource (reference/node/configs.py), or its KafkaError."""
    if resource_type == TOPIC_RESOURCE:
        return describe_topic_configs(broker, broker.topic(resource_name).configs, keys, include_synonyms)
    if resource_type == BROKER_RESOURCE:
        check_broker_name(broker, resource_name)
        return describe_broker_configs(broker, keys, include_synonyms)
    if resource_type == GROUP_RESOURCE:
        return describe_group_configs(broker, resource_name, keys, include_synonyms)
    raise KafkaError(ErrorCode.INVALID_REQUEST, f"resource type {resource_type} has no configs here")


def replaced_overrides(configs, current: dict[str, str]) -> Changes:
    """Legacy AlterConfigs: the given configs replace all of the resource's overrides."""
    check_unique(configs)
    wanted = {config.name: config.value for config in configs if config.value is not None}
    return {**{name: None for name in current if name not in wanted}, **wanted}


def incremental_changes(broker: BrokerNode, configs, current: dict[str, str]) -> Changes:
    """IncrementalAlterConfigs: each config set, deleted, appended to or subtracted from."""
    check_unique(configs)
    return {config.name: _operation(broker, current, config) for config in configs}


def alter_configs(broker: BrokerNode, resource_type: int, resource_name: str,
                  changes_for: Callable[[dict[str, str]], Changes], validate_only: bool, now_ms: int) -> None:
    """Apply `changes_for(current overrides)` to one resource, or raise its KafkaError."""
    if resource_type == BROKER_RESOURCE:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         "broker configs are static here: set them with --config or --set at start")
    if resource_type == GROUP_RESOURCE:
        if not resource_name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "a GROUP config resource needs a group id")
        current = dict(broker.image.group_configs.get(resource_name, {}))
        changes = changes_for(current)
        check_group_configs(broker, changes,
                            {name: value for name, value in {**current, **changes}.items() if value is not None})
        broker.alter_group_configs(resource_name, changes, validate_only, now_ms)
    elif resource_type != TOPIC_RESOURCE:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"resource type {resource_type} has no configs here")
    else:
        topic = broker.topic(resource_name)
        broker.alter_topic_configs(topic.name, changes_for(dict(topic.configs)), validate_only, now_ms)


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


def check_unique(configs) -> None:
    repeated = [name for name, count in Counter(config.name for config in configs).items() if count > 1]
    if repeated:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"config(s) given more than once: {', '.join(repeated)}")


def check_broker_name(broker: BrokerNode, resource_name: str) -> None:
    if resource_name not in ("", str(broker.config.node_id)):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"this is broker {broker.config.node_id}, not {resource_name!r}")
