"""ListOffsets (key 2) and DeleteRecords (key 21): find offsets in a log, move its start.

ListOffsets special timestamps (ListOffsetsRequest): -1 LATEST (the high watermark, or the
last stable offset for isolation_level=read_committed, v2+; the log end offset when the asker
is not a consumer, e.g. replica_id -2, the debugging id tools use), -2 EARLIEST (log start),
-3 MAX_TIMESTAMP (KIP-734), -4 EARLIEST_LOCAL (KIP-405: the log start, nothing is tiered),
-5 LATEST_TIERED and -6 EARLIEST_PENDING_UPLOAD (nothing is tiered: no offset). Any other
value finds the first offset whose timestamp is at least that value; read_committed
consumers see none at or above the last stable offset.
"""
from __future__ import annotations

from reference.handlers.context import RequestContext
from reference.handlers.leader_epoch import check_current_leader_epoch
from reference.node.broker import TopicPartition
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode, KafkaError

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6
READ_COMMITTED = 1
CONSUMER_REPLICA_ID = -1
NO_TIMESTAMP = -1
NO_OFFSET = -1
NO_LEADER_EPOCH = -1
DELETE_UP_TO_HIGH_WATERMARK = -1  # DeleteRecords offset -1


def handle_list_offsets(broker: BrokerNode, request, context: RequestContext) -> dict:
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            try:
                topic_partition = TopicPartition(topic.name, wanted.partition_index)
                partition = broker.partition(topic_partition)
                check_current_leader_epoch(partition, wanted.get("current_leader_epoch", -1))  # v4+
                visible_offset = partition.high_watermark
                if request.replica_id != CONSUMER_REPLICA_ID:
                    # A follower, or a tool with the debugging id -2: Kafka answers the log end offset, no isolation.
                    visible_offset = partition.log.log_end_offset
                elif request.get("isolation_level", 0) == READ_COMMITTED:
                    visible_offset = context.services.transactions.last_stable_offset(topic_partition)
                timestamp, offset = _lookup(partition, wanted.timestamp, visible_offset)
                answer = {"error_code": ErrorCode.NONE, "timestamp": timestamp, "offset": offset,
                          "leader_epoch": partition.leader_epoch if offset != NO_OFFSET else NO_LEADER_EPOCH}
            except KafkaError as e:
                answer = {"error_code": e.code, "timestamp": NO_TIMESTAMP, "offset": NO_OFFSET,
                          "leader_epoch": NO_LEADER_EPOCH}
            partitions.append({"partition_index": wanted.partition_index, **answer})
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


def _lookup(partition, timestamp: int, visible_offset: int) -> tuple[int, int]:
    """`visible_offset`: the high watermark, or the last stable offset for read_committed."""
    log = partition.log
    if timestamp == LATEST_TIMESTAMP:
        return NO_TIMESTAMP, visible_offset
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return NO_TIMESTAMP, log.log_start_offset
    if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
        return NO_TIMESTAMP, NO_OFFSET
    if timestamp == MAX_TIMESTAMP:
        found = log.max_timestamp_offset()
    elif timestamp < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {timestamp}")
    else:
        found = log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= visible_offset:
        return NO_TIMESTAMP, NO_OFFSET
    offset, timestamp = found
    return timestamp, offset


def handle_delete_records(broker: BrokerNode, request, context: RequestContext) -> dict:
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            try:
                partition = broker.partition(TopicPartition(topic.name, wanted.partition_index))
                offset = partition.high_watermark if wanted.offset == DELETE_UP_TO_HIGH_WATERMARK else wanted.offset
                if not 0 <= offset <= partition.high_watermark:
                    raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                     f"offset {offset} is above the high watermark {partition.high_watermark}")
                partition.log.delete_records_before(offset)
                answer = {"error_code": ErrorCode.NONE, "low_watermark": partition.log.log_start_offset}
            except KafkaError as e:
                answer = {"error_code": e.code, "low_watermark": NO_OFFSET}
            partitions.append({"partition_index": wanted.partition_index, **answer})
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
