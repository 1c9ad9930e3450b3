"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44): topic, broker and
group resources. How each config is described and which group values are valid is
reference/node/configs.py; topic overrides and group values are ConfigRecords in the metadata
log. Which changes an alteration asks for, and their checks, are reference/node/config_admin.py
(Kafka's ConfigAdminManager).
"""
from __future__ import annotations

from reference.handlers.context import RequestContext
from reference.node.config_admin import alter_configs, describe_configs, incremental_changes, replaced_overrides
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode, KafkaError


def handle_describe_configs(broker: BrokerNode, request, context: RequestContext) -> dict:
    results = []
    for resource in request.resources:
        result = {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": resource.resource_type,
                  "resource_name": resource.resource_name, "configs": []}
        try:
            result["configs"] = describe_configs(broker, resource.resource_type, resource.resource_name,
                                                 resource.configuration_keys, request.include_synonyms)
        except KafkaError as e:
            result.update(error_code=e.code, error_message=e.message or None)
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}


def handle_alter_configs(broker: BrokerNode, request, context: RequestContext) -> dict:
    """Legacy AlterConfigs: the given configs replace all of the resource's overrides."""
    return {"throttle_time_ms": 0, "responses": [
        _alter(broker, resource, lambda current, configs=resource.configs: replaced_overrides(configs, current),
               request.validate_only, context.now_ms) for resource in request.resources]}


def handle_incremental_alter_configs(broker: BrokerNode, request, context: RequestContext) -> dict:
    return {"throttle_time_ms": 0, "responses": [
        _alter(broker, resource, lambda current, configs=resource.configs: incremental_changes(broker, configs, current),
               request.validate_only, context.now_ms) for resource in request.resources]}


def _alter(broker: BrokerNode, resource, changes_for, validate_only: bool, now_ms: int) -> dict:
    response = {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": resource.resource_type,
                "resource_name": resource.resource_name}
    try:
        alter_configs(broker, resource.resource_type, resource.resource_name, changes_for, validate_only, now_ms)
    except KafkaError as e:
        response.update(error_code=e.code, error_message=e.message or None)
    return response
