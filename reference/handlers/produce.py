"""Produce (key 0): validate each partition's batch, append it as leader, answer per partition.

acks=0 gets no response at all; if such a produce fails, the connection is closed so the
producer notices (as Kafka does). acks=-1 waits for the ISR, which on one node is the
leader itself, so it is answered at once unless the ISR is smaller than
min.insync.replicas (NOT_ENOUGH_REPLICAS, nothing appended). transactional_id is not
checked yet: transactions arrive with the transaction coordinator.
"""
from __future__ import annotations

from reference.handlers.context import CloseConnection, RequestContext
from reference.node.broker import Broker, TopicPartition
from reference.protocol.errors import ErrorCode, KafkaError

ACKS_NONE, ACKS_LEADER, ACKS_ALL = 0, 1, -1
NO_OFFSET = -1
NO_TIMESTAMP = -1


def handle_produce(broker: Broker, request, context: RequestContext) -> dict | None:
    responses = []
    failures = []
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
            try:
                if topic_error:
                    raise topic_error
                response = _append(broker, request.acks, TopicPartition(name, partition_data.index),
                                   partition_data.records, context.now_ms)
            except KafkaError as e:
                failures.append(f"{name}-{partition_data.index}: {e}")
                response = {"error_code": e.code, "base_offset": NO_OFFSET, "log_append_time_ms": NO_TIMESTAMP,
                            "log_start_offset": NO_OFFSET, "record_errors": [], "error_message": e.message or None}
            partition_responses.append({"index": partition_data.index, **response})
        responses.append({"name": name, "topic_id": topic_data.get("topic_id"),
                          "partition_responses": partition_responses})
    if request.acks == ACKS_NONE:
        if failures:
            raise CloseConnection("acks=0 produce failed: " + "; ".join(failures))
        return None
    return {"responses": responses, "throttle_time_ms": 0}


def _append(broker: Broker, acks: int, topic_partition: TopicPartition, records, now_ms: int) -> dict:
    if acks not in (ACKS_NONE, ACKS_LEADER, ACKS_ALL):
        raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks}; use -1, 0 or 1")
    partition = broker.partition(topic_partition)
    log_config = partition.log.config
    in_sync_replicas = 1
    if acks == ACKS_ALL and in_sync_replicas < log_config.min_insync_replicas:
        raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                         f"ISR size {in_sync_replicas} < min.insync.replicas={log_config.min_insync_replicas}")
    info = broker.append(topic_partition, records if records is not None else b"", now_ms)  # validates
    return {"error_code": ErrorCode.NONE, "base_offset": info.first_offset,
            "log_append_time_ms": info.log_append_time_ms, "log_start_offset": info.log_start_offset,
            "record_errors": [], "error_message": None}
