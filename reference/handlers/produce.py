"""Produce (key 0): validate each partition's batch, append it as leader, answer per partition.

acks=0 gets no response at all; if such a produce fails, the connection is closed so the
producer notices (as Kafka does). acks=-1 needs an ISR of at least min.insync.replicas
(NOT_ENOUGH_REPLICAS, nothing appended), then waits for the ISR to have the batch. On one
node the ISR is the leader itself, so it is answered at once; in a cluster the handler
waits in the node's acks purgatory (RequestContext.services.replication) until the partition's
acks_all_status settles (Kafka's DelayedProduce): NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
NOT_LEADER_OR_FOLLOWER, or REQUEST_TIMED_OUT after the request's timeout_ms. From v10 a
NOT_LEADER_OR_FOLLOWER answer names the leader this broker knows (handlers/leader_epoch.py).
A transactional batch is first checked against its transaction (reference/runtime/transactions.py).
A zstd batch needs Produce v7+ (KIP-110): older versions get UNSUPPORTED_COMPRESSION_TYPE.
A batch refused for some of its records (protocol/validator.py) names them in record_errors,
with error_message saying why (KIP-467): the producer fails those and may retry the rest.
"""
from __future__ import annotations

from reference.handlers.context import CloseConnection, RequestContext
from reference.handlers.leader_epoch import current_leader
from reference.node.broker import TopicPartition
from reference.node.interface import BrokerNode
from reference.protocol.compression import CompressionType
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import RecordBatch, iter_batches
from reference.protocol.validator import RecordValidationError
from reference.runtime.produce_validation import large_batches, validate_off_loop
from reference.runtime.replica_manager import ACKS_ALL, ACKS_NONE, append_records

ZSTD_MIN_VERSION = 7  # KIP-110: clients that can read zstd send Produce v7+
CURRENT_LEADER_VERSION = 10  # Produce answers carry CurrentLeader and NodeEndpoints from v10 (KIP-951)
NO_OFFSET = -1
NO_TIMESTAMP = -1


async def handle_produce(broker: BrokerNode, request, context: RequestContext) -> dict | None:
    transactions = context.services.transactions
    holding = transactions.hold_late_produce(request, context.now_ms)  # a late-produce switch only
    if holding is not None:
        await holding
    verifying = transactions.verify_produce(request, context.now_ms)  # KIP-890, coordinator elsewhere
    if verifying is not None:
        await verifying
    large = large_batches(broker, request, context.api_version)  # validated off the loop (runtime/produce_validation.py)
    validated = await validate_off_loop(large, context.now_ms) if large else {}
    responses = []
    failures = []
    leader_endpoints: dict[int, dict] = {}  # NodeEndpoints of the leaders named in NOT_LEADER_OR_FOLLOWER answers
    delayed = []  # (partition response, topic partition, offset the ISR must pass, epoch)
    for topic_data in request.topic_data:
        name = topic_data.name if context.api_version < 13 else None
        try:
            if name is None:
                name = broker.topic_name_by_id(topic_data.topic_id)
            topic_error = None
        except KafkaError as e:
            topic_error = e
        partition_responses = []
        for partition_data in topic_data.partition_data:
            topic_partition = TopicPartition(name, partition_data.index)
            try:
                if topic_error:
                    raise topic_error
                if context.api_version < ZSTD_MIN_VERSION:
                    _refuse_zstd(partition_data.records)
                info = append_records(broker, transactions, request.acks, topic_partition, partition_data.records,
                                      validated.get(id(partition_data)), request.transactional_id, context.now_ms)
                response = {"error_code": ErrorCode.NONE, "base_offset": info.first_offset,
                            "log_append_time_ms": info.log_append_time_ms, "log_start_offset": info.log_start_offset,
                            "record_errors": [], "error_message": None}
                required_offset = info.last_offset + 1  # what the ISR must pass before an acks=all answer
            except KafkaError as e:
                failures.append(f"{name}-{partition_data.index}: {e}")
                response = {"error_code": e.code, "base_offset": NO_OFFSET, "log_append_time_ms": NO_TIMESTAMP,
                            "log_start_offset": NO_OFFSET, "record_errors": _record_errors(e),
                            "error_message": e.message or None}
                _name_the_leader(broker, context, response, topic_partition, leader_endpoints)
                required_offset = None
            partition_responses.append({"index": partition_data.index, **response})
            if request.acks == ACKS_ALL and required_offset is not None:
                delayed.append((partition_responses[-1], topic_partition, required_offset,
                                broker.partition(topic_partition).leader_epoch))  # the append's epoch
        responses.append({"name": name, "topic_id": topic_data.get("topic_id"),
                          "partition_responses": partition_responses})
    if request.acks == ACKS_NONE:
        if failures:
            raise CloseConnection("acks=0 produce failed: " + "; ".join(failures))
        return None
    response = {"responses": responses, "throttle_time_ms": 0}
    for partition_response, topic_partition, required_offset, leader_epoch in delayed:  # Kafka's DelayedProduce
        error = await context.services.replication.wait_for_replication(broker, topic_partition, required_offset,
                                                                        request.timeout_ms, leader_epoch)
        if error != ErrorCode.NONE:
            partition_response.update(error_code=error, error_message=error.name)
            _name_the_leader(broker, context, partition_response, topic_partition, leader_endpoints)
    return {**response, "node_endpoints": list(leader_endpoints.values())}


def _refuse_zstd(records) -> None:
    """As Kafka's ProduceRequest.validateRecords: zstd before Produce v7 is UNSUPPORTED_COMPRESSION_TYPE."""
    batch = next(iter_batches(records or b""), None)
    if isinstance(batch, RecordBatch) and batch.compression == CompressionType.ZSTD:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                         f"zstd-compressed batches need Produce v{ZSTD_MIN_VERSION} or later")


def _record_errors(error: KafkaError) -> list[dict]:
    """The records that made a batch be refused, by index in the batch (KIP-467, Produce v8+)."""
    if not isinstance(error, RecordValidationError):
        return []
    return [{"batch_index": index, "batch_index_error_message": message} for index, message in error.record_errors]


def _name_the_leader(broker: BrokerNode, context: RequestContext, partition_response: dict,
                     topic_partition: TopicPartition, leader_endpoints: dict[int, dict]) -> None:
    """NOT_LEADER_OR_FOLLOWER from Produce v10+ names the leader this broker knows (KIP-951)."""
    if (partition_response["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
            and context.api_version >= CURRENT_LEADER_VERSION):
        partition_response["current_leader"] = current_leader(broker, topic_partition, leader_endpoints)

