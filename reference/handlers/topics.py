"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37): topic changes through the
broker's metadata log. Each topic succeeds or fails on its own, with its own error code.

Replication factors and manual assignments must fit the live brokers, as Kafka's controller
checks (reference/node/topic_admin.py).
"""
from __future__ import annotations

from collections import Counter

from reference.node.configs import describe_topic_configs
from reference.handlers.context import RequestContext
from reference.node.interface import BrokerNode
from reference.node.topic_admin import (
    DEFAULT, check_new_partition_assignments, partitions_and_replication, refuse_duplicate,
)
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.primitives import ZERO_UUID
from reference.runtime.replica_manager import INTERNAL_TOPICS


def handle_create_topics(broker: BrokerNode, request, context: RequestContext) -> dict:
    counts = Counter(topic.name for topic in request.topics)
    results = []
    for wanted in request.topics:
        result = {"name": wanted.name, "topic_id": ZERO_UUID, "error_code": ErrorCode.NONE, "error_message": None,
                  "num_partitions": DEFAULT, "replication_factor": DEFAULT, "configs": []}
        try:
            refuse_duplicate(counts, wanted.name)
            num_partitions, replication_factor = partitions_and_replication(broker, wanted)
            configs = {config.name: config.value for config in wanted.configs if config.value is not None}
            topic = broker.create_topic(wanted.name, num_partitions, replication_factor, configs,
                                        request.validate_only, context.now_ms)
            result.update(topic_id=topic.topic_id if not request.validate_only else ZERO_UUID,
                          num_partitions=topic.partition_count, replication_factor=broker.live_broker_count,
                          configs=[
                              {"name": c["name"], "value": c["value"], "read_only": c["read_only"],
                               "config_source": c["config_source"], "is_sensitive": False}
                              for c in describe_topic_configs(broker, topic.configs, None, include_synonyms=False)
                          ])
        except KafkaError as e:
            result.update(error_code=e.code, error_message=e.message or None)
        results.append(result)
    return {"throttle_time_ms": 0, "topics": results}


def handle_delete_topics(broker: BrokerNode, request, context: RequestContext) -> dict:
    if context.api_version >= 6:
        wanted = [(topic.name, topic.topic_id) for topic in request.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in request.topic_names]
    counts = Counter(name if name is not None else topic_id for name, topic_id in wanted)
    responses = []
    for name, topic_id in wanted:
        response = {"name": name, "topic_id": topic_id, "error_code": ErrorCode.NONE, "error_message": None}
        try:
            refuse_duplicate(counts, name if name is not None else topic_id)
            if name is None:
                name = broker.topic_name_by_id(topic_id)
            topic = broker.topic(name)
            if name in INTERNAL_TOPICS:  # the coordinators' state: no client may delete it
                raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"internal topic {name} cannot be deleted")
            broker.delete_topic(name, context.now_ms)
            response.update(name=name, topic_id=topic.topic_id)
        except KafkaError as e:
            response.update(error_code=e.code, error_message=e.message or None)
        responses.append(response)
    return {"throttle_time_ms": 0, "responses": responses}


def handle_create_partitions(broker: BrokerNode, request, context: RequestContext) -> dict:
    counts = Counter(topic.name for topic in request.topics)
    results = []
    for wanted in request.topics:
        result = {"name": wanted.name, "error_code": ErrorCode.NONE, "error_message": None}
        try:
            refuse_duplicate(counts, wanted.name)
            check_new_partition_assignments(broker, wanted.name, wanted.count, wanted.assignments)
            broker.create_partitions(wanted.name, wanted.count, request.validate_only, context.now_ms)
        except KafkaError as e:
            result.update(error_code=e.code, error_message=e.message or None)
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}
