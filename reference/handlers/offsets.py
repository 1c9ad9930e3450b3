"""ListOffsets (key 2) and DeleteRecords (key 21): find offsets in a log, move its start.

The per-partition work, and what each special timestamp means, is reference/runtime/replica_manager.py.
"""
from __future__ import annotations

from reference.handlers.context import RequestContext
from reference.handlers.leader_epoch import check_current_leader_epoch
from reference.node.broker import TopicPartition
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode, KafkaError
from reference.runtime.replica_manager import NO_OFFSET, NO_TIMESTAMP, delete_records, fetch_offset_for_timestamp

NO_LEADER_EPOCH = -1


def handle_list_offsets(broker: BrokerNode, request, context: RequestContext) -> dict:
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            try:
                topic_partition = TopicPartition(topic.name, wanted.partition_index)
                partition = broker.partition(topic_partition)
                check_current_leader_epoch(partition, wanted.get("current_leader_epoch", -1))  # v4+
                timestamp, offset = fetch_offset_for_timestamp(
                    partition, context.services.transactions, topic_partition, wanted.timestamp, request.replica_id,
                    request.get("isolation_level", 0))
                answer = {"error_code": ErrorCode.NONE, "timestamp": timestamp, "offset": offset,
                          "leader_epoch": partition.leader_epoch if offset != NO_OFFSET else NO_LEADER_EPOCH}
            except KafkaError as e:
                answer = {"error_code": e.code, "timestamp": NO_TIMESTAMP, "offset": NO_OFFSET,
                          "leader_epoch": NO_LEADER_EPOCH}
            partitions.append({"partition_index": wanted.partition_index, **answer})
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


def handle_delete_records(broker: BrokerNode, request, context: RequestContext) -> dict:
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            try:
                low_watermark = delete_records(broker, TopicPartition(topic.name, wanted.partition_index), wanted.offset)
                answer = {"error_code": ErrorCode.NONE, "low_watermark": low_watermark}
            except KafkaError as e:
                answer = {"error_code": e.code, "low_watermark": NO_OFFSET}
            partitions.append({"partition_index": wanted.partition_index, **answer})
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
