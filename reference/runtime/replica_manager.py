"""What Kafka's ReplicaManager does for one partition of a client request, apart from the
request: append a produced batch as leader, find an offset by timestamp (ListOffsets), move a
log's start (DeleteRecords). Handlers decode the request, call these per partition and shape
the answer; a KafkaError raised here is that partition's error.

ListOffsets special timestamps (ListOffsetsRequest): -1 LATEST (the high watermark, or the
last stable offset for isolation_level=read_committed, v2+; the log end offset when the asker
is not a consumer, e.g. replica_id -2, the debugging id tools use), -2 EARLIEST (log start),
-3 MAX_TIMESTAMP (KIP-734), -4 EARLIEST_LOCAL (KIP-405: the log start, nothing is tiered),
-5 LATEST_TIERED and -6 EARLIEST_PENDING_UPLOAD (nothing is tiered: no offset). Any other
value finds the first offset whose timestamp is at least that value; read_committed
consumers see none at or above the last stable offset.
"""
from __future__ import annotations

from reference.coordinator.records import CONSUMER_OFFSETS_TOPIC
from reference.node.broker import PartitionState, TopicPartition
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.validator import ValidatedBatch
from reference.runtime.transactions import TransactionCoordinatorRuntime
from reference.storage.log import LogAppendInfo
from reference.transaction.records import TRANSACTION_STATE_TOPIC

# Kafka's Topic.INTERNAL_TOPICS: written by the coordinators only, reported with is_internal=true.
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
ACKS_NONE, ACKS_LEADER, ACKS_ALL = 0, 1, -1

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
DELETE_UP_TO_HIGH_WATERMARK = -1  # DeleteRecords offset -1


def append_records(broker: BrokerNode, transactions: TransactionCoordinatorRuntime, acks: int,
                   topic_partition: TopicPartition, records, validated: ValidatedBatch | None,
                   transactional_id: str | None, now_ms: int) -> LogAppendInfo:
    """Append a client's batch as leader; the batch is validated here unless `validated` is it
    (runtime/produce_validation.py). A transactional batch is checked against its transaction."""
    if acks not in (ACKS_NONE, ACKS_LEADER, ACKS_ALL):
        raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks}; use -1, 0 or 1")
    if topic_partition.topic in INTERNAL_TOPICS:  # as Kafka's ReplicaManager refuses appends from clients
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"cannot append to internal topic {topic_partition.topic}")
    transactions.check_produce(topic_partition, transactional_id, records)  # KIP-890 verification
    info = broker.append(topic_partition, validated or (records if records is not None else b""), now_ms, acks)
    transactions.on_produced(topic_partition, records, info.first_offset)
    return info


def fetch_offset_for_timestamp(partition: PartitionState, transactions: TransactionCoordinatorRuntime,
                               topic_partition: TopicPartition, timestamp: int, replica_id: int,
                               isolation_level: int) -> tuple[int, int]:
    """(timestamp, offset) for a ListOffsets partition of this leader, NO_OFFSET when there is none."""
    visible_offset = partition.high_watermark
    if replica_id != CONSUMER_REPLICA_ID:
        # A follower, or a tool with the debugging id -2: Kafka answers the log end offset, no isolation.
        visible_offset = partition.log.log_end_offset
    elif isolation_level == READ_COMMITTED:
        visible_offset = transactions.last_stable_offset(topic_partition)
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


def delete_records(broker: BrokerNode, topic_partition: TopicPartition, offset: int) -> int:
    """Move the log start to `offset` (-1: the high watermark); the new low watermark."""
    partition = broker.partition(topic_partition)
    if offset == DELETE_UP_TO_HIGH_WATERMARK:
        offset = partition.high_watermark
    if not 0 <= offset <= partition.high_watermark:
        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"offset {offset} is above the high watermark {partition.high_watermark}")
    partition.log.delete_records_before(offset)
    return partition.log.log_start_offset
