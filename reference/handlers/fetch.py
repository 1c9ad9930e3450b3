"""Fetch (key 1): read whole batches from each partition, never above the high watermark.

Sans-IO: `read_fetch` answers from the logs as they are now and says whether the answer
is complete; the shell's purgatory re-runs it when an append lands on a watched partition
or max_wait_ms passes (long polling, as Kafka's DelayedFetch). Limits: partition_max_bytes
per partition and max_bytes overall, except that the first non-empty partition returns at
least one whole batch so a consumer can always progress (KIP-74).

Fetch sessions (KIP-227) are declined: every answer carries session_id 0, which tells the
client to send full fetches. v13+ names topics by topic id.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from reference.handlers.context import RequestContext
from reference.handlers.leader_epoch import check_current_leader_epoch
from reference.node.broker import Broker, TopicPartition
from reference.protocol.errors import ErrorCode, KafkaError

READ_COMMITTED = 1
SESSIONLESS_EPOCHS = (0, -1)  # INITIAL_EPOCH and FINAL_EPOCH: a full fetch without a session
NO_OFFSET = -1
NO_PREFERRED_READ_REPLICA = -1


@dataclass
class FetchResult:
    response: dict
    bytes_read: int
    watched: set[TopicPartition] = field(default_factory=set)
    complete: bool = False


def read_fetch(broker: Broker, request, context: RequestContext) -> FetchResult:
    version = context.api_version
    if request.get("session_id", 0) != 0:  # v7+
        return _session_error(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if request.get("session_epoch", -1) not in SESSIONLESS_EPOCHS:
        return _session_error(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    bytes_left = request.max_bytes
    bytes_read = 0
    any_error = False
    watched = set()
    responses = []
    for fetch_topic in request.topics:
        name, topic_error = _topic_name(broker, fetch_topic, version)
        partitions = []
        for wanted in fetch_topic.partitions:
            try:
                if topic_error:
                    raise topic_error
                topic_partition = TopicPartition(name, wanted.partition)
                answer, records_bytes = _read_partition(broker, topic_partition, wanted, bytes_left,
                                                        min_one_batch=bytes_read == 0)
                watched.add(topic_partition)
                bytes_read += records_bytes
                bytes_left = max(0, bytes_left - records_bytes)
            except KafkaError as e:
                any_error = True
                answer = {"error_code": e.code, "high_watermark": NO_OFFSET, "last_stable_offset": NO_OFFSET,
                          "log_start_offset": NO_OFFSET, "records": b""}
            answer["aborted_transactions"] = [] if request.isolation_level == READ_COMMITTED else None
            answer["preferred_read_replica"] = NO_PREFERRED_READ_REPLICA
            partitions.append({"partition_index": wanted.partition, **answer})
        responses.append({"topic": name, "topic_id": fetch_topic.get("topic_id"), "partitions": partitions})
    response = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0, "responses": responses}
    complete = any_error or bytes_read >= request.min_bytes or request.max_wait_ms <= 0
    return FetchResult(response, bytes_read, watched, complete)


def _topic_name(broker: Broker, fetch_topic, version: int) -> tuple[str | None, KafkaError | None]:
    if version < 13:
        return fetch_topic.topic, None
    try:
        return broker.topic_name_by_id(fetch_topic.topic_id), None
    except KafkaError as e:
        return None, e


def _read_partition(broker: Broker, topic_partition: TopicPartition, wanted, bytes_left: int,
                    min_one_batch: bool) -> tuple[dict, int]:
    partition = broker.partition(topic_partition)
    check_current_leader_epoch(partition, wanted.get("current_leader_epoch", -1))  # v9+
    log = partition.log
    high_watermark = partition.high_watermark
    if not log.log_start_offset <= wanted.fetch_offset <= log.log_end_offset:
        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"{topic_partition} offset {wanted.fetch_offset} outside "
                         f"[{log.log_start_offset}, {log.log_end_offset}]")
    records = b""
    if wanted.fetch_offset < high_watermark:
        max_bytes = min(wanted.partition_max_bytes, bytes_left)
        read = log.read(wanted.fetch_offset, max_bytes, max_offset=high_watermark, min_one_batch=min_one_batch)
        records = read.records
    answer = {"error_code": ErrorCode.NONE, "high_watermark": high_watermark,
              "last_stable_offset": high_watermark,  # no transactions yet: LSO = HW
              "log_start_offset": log.log_start_offset, "records": records}
    return answer, len(records)


def _session_error(error: ErrorCode) -> FetchResult:
    response = {"throttle_time_ms": 0, "error_code": error, "session_id": 0, "responses": []}
    return FetchResult(response, 0, complete=True)
