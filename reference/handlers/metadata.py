"""Metadata (key 3) and DescribeCluster (key 60): brokers, controller, topics, partitions.

Brokers, ControllerId and each partition's leader, leader epoch, replicas and ISR come from
the broker's metadata (on one node: itself, for everything; in a cluster: the replayed
metadata log, with the unfenced brokers listed and the active controller as ControllerId).
kafkajs sends InitProducerId, and every client sends admin requests, to the controller.
Unknown topics are created with the broker defaults when auto.create.topics.enable is on
and the request allows it (AllowAutoTopicCreation, v4+; always allowed before v4).
"""
from __future__ import annotations

from reference.handlers.context import RequestContext
from reference.node.base import check_topic_name
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.primitives import ZERO_UUID
from reference.runtime.replica_manager import INTERNAL_TOPICS
from reference.security.acls import ResourceType, all_supported_operations

ENDPOINT_TYPE_BROKER = 1


def handle_metadata(broker: BrokerNode, request, context: RequestContext) -> dict:
    version = context.api_version
    topic_operations = all_supported_operations(ResourceType.TOPIC,
                                                request.get("include_topic_authorized_operations", False))
    if request.topics is None or (version == 0 and not request.topics):
        topics = [_describe_topic(broker, name) for name in sorted(broker.image.topics_by_name)]
    else:
        allow_create = request.allow_auto_topic_creation if version >= 4 else True
        topics = [_requested_topic(broker, wanted, allow_create, context.now_ms) for wanted in request.topics]
    for topic in topics:
        topic["topic_authorized_operations"] = topic_operations
    return {
        "brokers": [{"node_id": node_id, "host": host, "port": port, "rack": None}
                    for node_id, host, port, fenced in broker.metadata_brokers() if not fenced],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.controller_id,
        "topics": topics,
        "cluster_authorized_operations": all_supported_operations(
            ResourceType.CLUSTER, request.get("include_cluster_authorized_operations", False)),
        "error_code": ErrorCode.NONE,
    }


def handle_describe_cluster(broker: BrokerNode, request, context: RequestContext) -> dict:
    error = ErrorCode.NONE
    if context.api_version >= 1 and request.endpoint_type != ENDPOINT_TYPE_BROKER:
        error = ErrorCode.MISMATCHED_ENDPOINT_TYPE  # this node serves broker endpoints only
    return {
        "error_code": error,
        "endpoint_type": ENDPOINT_TYPE_BROKER,
        "cluster_id": broker.cluster_id,
        "controller_id": broker.controller_id,
        "brokers": [] if error else [
            {"broker_id": node_id, "host": host, "port": port, "rack": None, "is_fenced": fenced}
            for node_id, host, port, fenced in broker.metadata_brokers()
        ],
        "cluster_authorized_operations": all_supported_operations(
            ResourceType.CLUSTER, request.include_cluster_authorized_operations),
    }


def _requested_topic(broker: BrokerNode, wanted, allow_create: bool, now_ms: int) -> dict:
    name = wanted.name
    topic_id = wanted.get("topic_id", ZERO_UUID)  # v10+
    try:
        if name is None:  # a lookup by topic id (v10+)
            name = broker.topic_name_by_id(topic_id)
        elif name not in broker.image.topics_by_name:
            check_topic_name(name)
            if not (allow_create and broker.config.auto_create_topics_enable):
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name)
            broker.create_topic(name, -1, -1, {}, validate_only=False, now_ms=now_ms)
        return _describe_topic(broker, name)
    except KafkaError as e:
        return {"error_code": e.code, "name": name, "topic_id": topic_id, "is_internal": False, "partitions": []}


def _describe_topic(broker: BrokerNode, name: str) -> dict:
    topic = broker.topic(name)
    partitions = [broker.partition_metadata(name, index) for index in range(topic.partition_count)]
    return {"error_code": ErrorCode.NONE, "name": name, "topic_id": topic.topic_id, "is_internal": name in INTERNAL_TOPICS,
            "partitions": partitions}

