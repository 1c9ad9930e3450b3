"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44): topic, broker and
group resources. How each config is described and which group values are valid is
reference/node/configs.py; topic overrides and group values are ConfigRecords in the metadata
log. Broker configs are described but not altered: they are static, read at start.
AlterConfigs replaces a resource's overrides; IncrementalAlterConfigs sets, deletes, appends
to or subtracts from them (KIP-339).
"""
from __future__ import annotations

from collections import Counter

from reference.handlers.context import RequestContext
from reference.node.configs import (
    LIST_CONFIGS, check_group_configs, describe_broker_configs, describe_group_configs, describe_topic_configs,
)
from reference.node.interface import BrokerNode
from reference.node.metadata import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE
from reference.protocol.errors import ErrorCode, KafkaError

# IncrementalAlterConfigs operations (KIP-339).
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

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
                result["configs"] = describe_broker_configs(broker, resource.configuration_keys,
                                                             request.include_synonyms)
            elif resource.resource_type == GROUP_RESOURCE:
                result["configs"] = describe_group_configs(broker, resource.resource_name,
                                                            resource.configuration_keys, request.include_synonyms)
            else:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"resource type {resource.resource_type} has no configs here")
        except KafkaError as e:
            result.update(error_code=e.code, error_message=e.message or None)
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}


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
    check_group_configs(broker, changes, {name: value for name, value in {**current, **changes}.items() if value is not None})
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
