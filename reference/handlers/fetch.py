"""Fetch (key 1): read whole batches from each partition, never above the high watermark.

Sans-IO: `read_fetch` answers from the logs as they are now and says whether the answer
is complete; the shell's purgatory re-runs it when an append lands on a watched partition
or max_wait_ms passes (long polling, as Kafka's DelayedFetch). Limits: partition_max_bytes
per partition and max_bytes overall (for consumers, no more than the broker's fetch.max.bytes),
except that the first non-empty partition returns at least one whole batch so a consumer can
always progress (KIP-74).

A fetch with a replica id (ReplicaId before v15, ReplicaState from v15, KIP-903) comes from a
follower: the partition's replica core answers it (handle_follower_fetch), which moves the
follower's log end offset, the high watermark and the ISR.

From v11 (KIP-392) a consumer may fetch from a follower: Kafka serves every consumer fetch of
v11+ from the local replica, leader or follower (FetchParams.fetchOnlyLeader is false once the
request carries client metadata), bounded by that replica's own high watermark. A follower
serves read_uncommitted fetches here; read_committed ones are refused NOT_LEADER_OR_FOLLOWER
(the follower keeps no transaction index to compute a last stable offset from).

A partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH (v12+) names the leader this
broker knows, with its endpoint from v16 (KIP-951, handlers/leader_epoch.py).

Fetch sessions (KIP-227) are declined: every answer carries session_id 0, which tells the
client to send full fetches. v13+ names topics by topic id. isolation_level=read_committed
reads below the last stable offset only and gets the aborted transactions of what it read
(TXN-2, reference/runtime/transactions.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from reference.handlers.context import RequestContext
from reference.handlers.leader_epoch import LEADER_HINT_ERRORS, check_current_leader_epoch, current_leader
from reference.node.broker import TopicPartition
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import iter_batches
from reference.replication import ReplicaFetch
from reference.runtime import NodeServices

READ_COMMITTED = 1
SESSIONLESS_EPOCHS = (0, -1)  # INITIAL_EPOCH and FINAL_EPOCH: a full fetch without a session
NO_OFFSET = -1
NO_PREFERRED_READ_REPLICA = -1
FOLLOWER_FETCH_VERSION = 11  # from v11 consumers may read from followers (KIP-392)
CURRENT_LEADER_VERSION = 12  # from v12 a partition answer can name the current leader (KIP-951; endpoints from v16)


@dataclass
class FetchResult:
    response: dict
    bytes_read: int
    watched: set[TopicPartition] = field(default_factory=set)
    complete: bool = False


def read_fetch(broker: BrokerNode, request, context: RequestContext) -> FetchResult:
    version = context.api_version
    if request.get("session_id", 0) != 0:  # v7+
        return _session_error(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if request.get("session_epoch", -1) not in SESSIONLESS_EPOCHS:
        return _session_error(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    replica_id = request.replica_state.replica_id if version >= 15 else request.get("replica_id", -1)
    bytes_left = request.max_bytes if replica_id >= 0 else min(request.max_bytes, broker.config.fetch_max_bytes)
    bytes_read = 0
    any_error = False
    watched = set()
    responses = []
    leader_endpoints: dict[int, dict] = {}  # NodeEndpoints of the leaders named in CurrentLeader
    for fetch_topic in request.topics:
        name, topic_error = _topic_name(broker, fetch_topic, version)
        partitions = []
        for wanted in fetch_topic.partitions:
            try:
                if topic_error:
                    raise topic_error
                topic_partition = TopicPartition(name, wanted.partition)
                if replica_id >= 0:
                    answer, records_bytes = _read_for_follower(broker, topic_partition, wanted, replica_id,
                                                               bytes_left, context.now_ms)
                elif (version >= FOLLOWER_FETCH_VERSION and request.isolation_level != READ_COMMITTED
                      and broker.follower_replica(topic_partition) is not None):
                    answer, records_bytes = _read_follower_for_consumer(
                        broker, topic_partition, wanted, bytes_left, min_one_batch=bytes_read == 0)
                else:
                    answer, records_bytes = _read_partition(
                        broker, topic_partition, wanted, bytes_left, min_one_batch=bytes_read == 0,
                        read_committed=request.isolation_level == READ_COMMITTED, services=context.services)
                watched.add(topic_partition)
                any_error = any_error or answer["error_code"] != ErrorCode.NONE
                bytes_read += records_bytes
                bytes_left = max(0, bytes_left - records_bytes)
            except KafkaError as e:
                any_error = True
                answer = {"error_code": e.code, "high_watermark": NO_OFFSET, "last_stable_offset": NO_OFFSET,
                          "log_start_offset": NO_OFFSET, "records": b"", "aborted_transactions": None}
            answer["preferred_read_replica"] = NO_PREFERRED_READ_REPLICA
            if answer["error_code"] in LEADER_HINT_ERRORS and version >= CURRENT_LEADER_VERSION:
                answer["current_leader"] = current_leader(broker, TopicPartition(name, wanted.partition),
                                                          leader_endpoints)
            partitions.append({"partition_index": wanted.partition, **answer})
        responses.append({"topic": name, "topic_id": fetch_topic.get("topic_id"), "partitions": partitions})
    response = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0, "responses": responses,
                "node_endpoints": list(leader_endpoints.values())}
    complete = any_error or bytes_read >= request.min_bytes or request.max_wait_ms <= 0
    return FetchResult(response, bytes_read, watched, complete)


def _topic_name(broker: BrokerNode, fetch_topic, version: int) -> tuple[str | None, KafkaError | None]:
    if version < 13:
        return fetch_topic.topic, None
    try:
        return broker.topic_name_by_id(fetch_topic.topic_id), None
    except KafkaError as e:
        return None, e


def _read_partition(broker: BrokerNode, topic_partition: TopicPartition, wanted, bytes_left: int,
                    min_one_batch: bool, read_committed: bool, services: NodeServices) -> tuple[dict, int]:
    partition = broker.partition(topic_partition)
    check_current_leader_epoch(partition, wanted.get("current_leader_epoch", -1))  # v9+
    log = partition.log
    high_watermark = partition.high_watermark
    if not log.log_start_offset <= wanted.fetch_offset <= log.log_end_offset:
        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"{topic_partition} offset {wanted.fetch_offset} outside "
                         f"[{log.log_start_offset}, {log.log_end_offset}]")
    max_bytes = min(wanted.partition_max_bytes, bytes_left)
    transactions = services.transactions
    last_stable_offset = transactions.last_stable_offset(topic_partition)
    aborted = None
    if read_committed:  # below the last stable offset only, with the aborted transactions read (TXN-2)
        records = log.read(wanted.fetch_offset, max_bytes, max_offset=last_stable_offset,
                           min_one_batch=min_one_batch).records if wanted.fetch_offset < last_stable_offset else b""
        upper_bound_offset = max((batch.next_offset for batch in iter_batches(records)), default=wanted.fetch_offset)
        aborted = [{"producer_id": entry.producer_id, "first_offset": entry.first_offset}
                   for entry in transactions.aborted_transactions(topic_partition, wanted.fetch_offset,
                                                                  upper_bound_offset)]
    else:
        records = partition.read_for_consumer(wanted.fetch_offset, max_bytes, min_one_batch=min_one_batch).records
    answer = {"error_code": ErrorCode.NONE, "high_watermark": high_watermark,
              "last_stable_offset": last_stable_offset, "log_start_offset": log.log_start_offset,
              "records": records, "aborted_transactions": aborted}
    return answer, len(records)


def _read_follower_for_consumer(broker: BrokerNode, topic_partition: TopicPartition, wanted, bytes_left: int,
                                min_one_batch: bool) -> tuple[dict, int]:
    """A consumer's read of a follower replica (KIP-392): below the follower's high watermark."""
    replica = broker.follower_replica(topic_partition)
    check_current_leader_epoch(replica, wanted.get("current_leader_epoch", -1))
    log = replica.log
    if not log.log_start_offset <= wanted.fetch_offset <= log.log_end_offset:
        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"{topic_partition} offset {wanted.fetch_offset} outside "
                         f"[{log.log_start_offset}, {log.log_end_offset}]")
    high_watermark = replica.high_watermark
    records = log.read(wanted.fetch_offset, min(wanted.partition_max_bytes, bytes_left), max_offset=high_watermark,
                       min_one_batch=min_one_batch).records
    answer = {"error_code": ErrorCode.NONE, "high_watermark": high_watermark, "last_stable_offset": high_watermark,
              "log_start_offset": log.log_start_offset, "records": records, "aborted_transactions": None}
    return answer, len(records)


def _read_for_follower(broker: BrokerNode, topic_partition: TopicPartition, wanted, replica_id: int,
                       bytes_left: int, now_ms: int) -> tuple[dict, int]:
    fetch = ReplicaFetch(replica_id, wanted.fetch_offset, wanted.get("last_fetched_epoch", -1),
                         wanted.get("current_leader_epoch", -1))
    answer = broker.follower_fetch(topic_partition, fetch, min(wanted.partition_max_bytes, bytes_left), now_ms)
    return {"error_code": answer.error, "high_watermark": answer.high_watermark,
            "last_stable_offset": answer.high_watermark, "log_start_offset": answer.log_start_offset,
            "records": answer.records, "aborted_transactions": None}, len(answer.records)


def _session_error(error: ErrorCode) -> FetchResult:
    response = {"throttle_time_ms": 0, "error_code": error, "session_id": 0, "responses": []}
    return FetchResult(response, 0, complete=True)
