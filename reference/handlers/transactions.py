"""Transaction APIs and the transactional paths of Produce, Fetch and ListOffsets.

`TxnNode` is the shell around the sans-IO TransactionCoordinator and the per-partition
PartitionTransactions of one broker: it appends the coordinator's records to
`__transaction_state` before any reply, writes transaction markers (control batches, built
at the partition's log end offset with its leader epoch) in-process on this node, completes
the transaction, and keeps the TxnOffsetCommit offsets pending until the marker reaches
their `__consumer_offsets` partition (KIP-447: the group sees them only if the transaction
commits). On start it replays `__transaction_state` and resumes every transaction that was
prepared but not completed.

Transaction version 1 (KIP-98 with KIP-890 part 1 verification) is what clients speak here:
EndTxn and TxnOffsetCommit stop below v5, AddPartitionsToTxn v4+ is the broker-to-broker
verification batch.
"""
from __future__ import annotations

import weakref

from reference.coordinator.records import (
    CONSUMER_OFFSETS_TOPIC, OffsetAndMetadata, OffsetCommitKey, encode_key, encode_offset_value,
)
from reference.handlers.context import RequestContext
from reference.handlers.groups import group_node
from reference.node.broker import Broker, TopicPartition
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import (
    CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, Record, RecordBatch, build_batch, build_control_batch, iter_batches,
)
from reference.storage import Log
from reference.transaction.coordinator import (
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TransactionCoordinator, TransactionCoordinatorConfig, TxnEffects, TxnMarkers,
)
from reference.transaction.partition import (
    AbortedTxn, PartitionTransactions, TransactionBugs, VerificationGuard, committed_records,
)
from reference.transaction.records import TRANSACTION_STATE_TOPIC

READ_BYTES_MAX = 1 << 20
VERIFY_ONLY_BATCH_VERSION = 4  # AddPartitionsToTxn v4+: batches of transactions, sent by brokers (KIP-890)
TRANSACTION_STATE_SEGMENT_BYTES = 100 * 1024 * 1024  # transaction.state.log.segment.bytes
READ_COMMITTED = 1


class TxnNode:
    def __init__(self, broker: Broker, now_ms: int) -> None:
        config = broker.config
        self.broker = broker
        self.bugs = TransactionBugs(
            serve_aborted_to_read_committed=config.kspec_bug_serve_aborted_to_read_committed,
            late_produce_joins_next_transaction=config.kspec_bug_late_produce_joins_next_transaction)
        self.now_ms = now_ms  # the time of the request being handled, for producer-id blocks
        self._coordinator: TransactionCoordinator | None = None
        self._partitions: weakref.WeakKeyDictionary[Log, PartitionTransactions] = weakref.WeakKeyDictionary()
        # (group id, producer id) -> offsets committed in the producer's open transaction
        self.pending_offsets: dict[tuple[str, int], dict[tuple[str, int], OffsetAndMetadata]] = {}

    @property
    def coordinator(self) -> TransactionCoordinator:
        """The transaction coordinator, loaded on first use: Produce and Fetch of plain
        records need only the partitions' transaction state, not `__transaction_state`."""
        if self._coordinator is None:
            self._coordinator = self._load_coordinator(self.now_ms)
        return self._coordinator

    def _load_coordinator(self, now_ms: int) -> TransactionCoordinator:
        """Create `__transaction_state` if needed, replay it, resume prepared transactions."""
        broker, config = self.broker, self.broker.config
        coordinator = TransactionCoordinator(TransactionCoordinatorConfig(
            transaction_state_log_num_partitions=config.transaction_state_log_num_partitions,
            transaction_max_timeout_ms=config.transaction_max_timeout_ms,
            transaction_abort_timed_out_transaction_cleanup_interval_ms=(
                config.transaction_abort_timed_out_transaction_cleanup_interval_ms),
        ), lambda: broker.allocate_producer_id(self.now_ms), now_ms)
        if TRANSACTION_STATE_TOPIC not in broker.image.topics_by_name:
            broker.create_topic(TRANSACTION_STATE_TOPIC, config.transaction_state_log_num_partitions, 1,
                                {"cleanup.policy": "compact", "segment.bytes": str(TRANSACTION_STATE_SEGMENT_BYTES)},
                                validate_only=False, now_ms=now_ms)
        topic = broker.topic(TRANSACTION_STATE_TOPIC)
        for index in range(topic.partition_count):
            partition = broker.partition(TopicPartition(TRANSACTION_STATE_TOPIC, index))
            coordinator.coordinator_epochs[index] = partition.leader_epoch
            for record in _records(partition.log):
                coordinator.replay(record.key, record.value)
        self._coordinator = coordinator
        for markers in coordinator.pending_markers():
            self.write_markers(markers, now_ms)
        return coordinator

    # -- partitions ---------------------------------------------------------------------

    def partition_transactions(self, topic_partition: TopicPartition) -> PartitionTransactions:
        log = self.broker.partition(topic_partition).log
        if log not in self._partitions:
            transactions = PartitionTransactions(self.bugs)
            transactions.rebuild(_batches(log))
            self._partitions[log] = transactions
        return self._partitions[log]

    def check_produce(self, topic_partition: TopicPartition, transactional_id: str | None, records: bytes) -> None:
        """Before a produced batch is appended: a transactional batch must come with its
        transactional id, and a first write to this partition must be verified with the
        coordinator (KIP-890 part 1). Raises KafkaError."""
        batch = _single_batch(records)
        if batch is None or not batch.is_transactional:
            return
        if transactional_id is None:
            raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                             "a transactional batch in a produce request without a transactional id")
        transactions = self.partition_transactions(topic_partition)
        guard: VerificationGuard | None = None
        if transactions.needs_verification(batch.producer_id):
            guard = transactions.start_verification(batch.producer_id)
            key = (topic_partition.topic, topic_partition.partition)
            error = self.coordinator.verify_partitions(transactional_id, batch.producer_id, batch.producer_epoch,
                                                       [key])[key]
            if error != ErrorCode.NONE:
                raise KafkaError(error, f"{topic_partition} is not in the transaction of {transactional_id!r}")
        transactions.check_transactional_append(batch, guard)

    def on_produced(self, topic_partition: TopicPartition, records: bytes, first_offset: int) -> None:
        batch = _single_batch(records)
        if batch is not None and batch.is_transactional:
            self.partition_transactions(topic_partition).on_append(batch, first_offset)

    def last_stable_offset(self, topic_partition: TopicPartition) -> int:
        partition = self.broker.partition(topic_partition)
        return self.partition_transactions(topic_partition).last_stable_offset(partition.high_watermark)

    def aborted_transactions(self, topic_partition: TopicPartition, fetch_offset: int,
                             upper_bound_offset: int) -> list[AbortedTxn]:
        return self.partition_transactions(topic_partition).aborted_transactions(fetch_offset, upper_bound_offset)

    # -- coordinator effects ------------------------------------------------------------

    def apply(self, effects: TxnEffects, now_ms: int) -> None:
        """Append the state records, then write any markers and complete those transactions."""
        by_partition: dict[int, list[Record]] = {}
        for record in effects.records:
            by_partition.setdefault(record.partition, []).append(Record(timestamp=now_ms, key=record.key,
                                                                        value=record.value))
        for partition, records in sorted(by_partition.items()):
            self.broker.append(TopicPartition(TRANSACTION_STATE_TOPIC, partition), build_batch(records), now_ms)
        for markers in effects.markers:
            self.write_markers(markers, now_ms)

    def write_markers(self, markers: TxnMarkers, now_ms: int) -> None:
        """WriteTxnMarkers on this node: one marker per partition, then CompleteCommit/Abort."""
        for topic, index in sorted(markers.partitions):
            error = self.write_marker(TopicPartition(topic, index), markers.producer_id, markers.producer_epoch,
                                      markers.committed, markers.coordinator_epoch, now_ms)
            assert error in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), (markers, error)
        self.apply(self.coordinator.complete(markers, now_ms), now_ms)

    def write_marker(self, topic_partition: TopicPartition, producer_id: int, producer_epoch: int, committed: bool,
                     coordinator_epoch: int, now_ms: int) -> ErrorCode:
        if topic_partition not in self.broker.partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # deleted since it joined the transaction
        partition = self.broker.partition(topic_partition)
        known = partition.log.producer_state.producers.get(producer_id)
        if known is not None and producer_epoch < known.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        marker = build_control_batch(CONTROL_TYPE_COMMIT if committed else CONTROL_TYPE_ABORT,
                                     producer_id=producer_id, producer_epoch=producer_epoch,
                                     coordinator_epoch=coordinator_epoch, timestamp_ms=now_ms,
                                     base_offset=partition.log.log_end_offset,
                                     partition_leader_epoch=partition.leader_epoch)
        transactions = self.partition_transactions(topic_partition)
        partition.log.append_as_follower(marker, now_ms)  # offsets already assigned: appended as built
        partition.advance_high_watermark()
        self.broker.appended.add(topic_partition)
        transactions.on_append(RecordBatch(marker), partition.log.log_end_offset - 1)
        if topic_partition.topic == CONSUMER_OFFSETS_TOPIC:
            self._complete_offsets(topic_partition.partition, producer_id, committed)
        return ErrorCode.NONE

    def _complete_offsets(self, offsets_partition: int, producer_id: int, committed: bool) -> None:
        groups = group_node(self.broker, self.now_ms).coordinator
        for group_id, pending_producer_id in list(self.pending_offsets):
            if pending_producer_id != producer_id or groups.partition_for(group_id) != offsets_partition:
                continue
            offsets = self.pending_offsets.pop((group_id, producer_id))
            if committed:
                groups.offsets.setdefault(group_id, {}).update(offsets)

    def tick(self, now_ms: int) -> None:
        self.now_ms = now_ms
        self.apply(self.coordinator.tick(now_ms), now_ms)


_nodes: weakref.WeakKeyDictionary[Broker, TxnNode] = weakref.WeakKeyDictionary()


def txn_node(broker: Broker, now_ms: int) -> TxnNode:
    if broker not in _nodes:
        _nodes[broker] = TxnNode(broker, now_ms)
    node = _nodes[broker]
    node.now_ms = now_ms
    return node


def tick_transactions(broker: Broker, now_ms: int) -> None:
    """Abort timed-out transactions (transaction.timeout.ms)."""
    txn_node(broker, now_ms).tick(now_ms)


def _batches(log: Log):
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        read = log.read(offset, READ_BYTES_MAX)
        if not read.records:
            return
        for batch in iter_batches(read.records):
            if batch.last_offset >= offset:
                yield batch
            offset = batch.last_offset + 1


def _records(log: Log) -> list[Record]:
    return [record for record in committed_records(_batches(log)) if record.offset >= log.log_start_offset]


def _single_batch(records: bytes | None) -> RecordBatch | None:
    """The produced batch, if the bytes hold one v2 batch; anything else is left to validation."""
    batches = list(iter_batches(memoryview(records or b"")))
    return batches[0] if len(batches) == 1 and isinstance(batches[0], RecordBatch) else None


# ---------------------------------------------------------------------------------------------
# Handlers


def _response(effects: TxnEffects) -> dict:
    return {"throttle_time_ms": 0, "error_code": effects.error, "producer_id": effects.producer_id,
            "producer_epoch": effects.producer_epoch}


def handle_init_producer_id_transactional(broker: Broker, request, context: RequestContext) -> dict:
    node = txn_node(broker, context.now_ms)
    effects = node.coordinator.init_producer_id(
        request.transactional_id, request.transaction_timeout_ms, request.get("producer_id", NO_PRODUCER_ID),
        request.get("producer_epoch", NO_PRODUCER_EPOCH), context.now_ms)
    node.apply(effects, context.now_ms)  # a fenced transaction is aborted here; the client retries
    response = _response(effects)
    if context.api_version < 2 and response["error_code"] == ErrorCode.PRODUCER_FENCED:
        response["error_code"] = ErrorCode.INVALID_PRODUCER_EPOCH  # PRODUCER_FENCED is new in v2+ clients (KIP-588)
    return response


def handle_add_partitions_to_txn(broker: Broker, request, context: RequestContext) -> dict:
    node = txn_node(broker, context.now_ms)
    if context.api_version >= VERIFY_ONLY_BATCH_VERSION:
        results = []
        for transaction in request.transactions:
            wanted = [(t.name, p) for t in transaction.topics for p in t.partitions]
            if transaction.verify_only:
                errors = node.coordinator.verify_partitions(transaction.transactional_id, transaction.producer_id,
                                                            transaction.producer_epoch, wanted)
            else:
                errors = _add_partitions(node, broker, transaction.transactional_id, transaction.producer_id,
                                         transaction.producer_epoch, wanted, context.now_ms)
            results.append({"transactional_id": transaction.transactional_id,
                            "topic_results": _topic_results(wanted, errors)})
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results_by_transaction": results}
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    errors = _add_partitions(node, broker, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                             request.v3_and_below_producer_epoch, wanted, context.now_ms)
    if context.api_version < 2:
        errors = {key: ErrorCode.INVALID_PRODUCER_EPOCH if error == ErrorCode.PRODUCER_FENCED else error
                  for key, error in errors.items()}
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(wanted, errors)}


def _add_partitions(node: TxnNode, broker: Broker, transactional_id: str, producer_id: int, producer_epoch: int,
                    wanted: list[tuple[str, int]], now_ms: int) -> dict[tuple[str, int], ErrorCode]:
    unknown = [key for key in wanted if TopicPartition(*key) not in broker.partitions]
    if unknown:  # all or nothing: the others are not attempted
        return {key: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if key in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                for key in wanted}
    effects = node.coordinator.add_partitions(transactional_id, producer_id, producer_epoch, wanted, now_ms)
    node.apply(effects, now_ms)
    return {key: effects.error for key in wanted}


def _topic_results(wanted: list[tuple[str, int]], errors: dict[tuple[str, int], ErrorCode]) -> list[dict]:
    by_topic: dict[str, list[dict]] = {}
    for topic, partition in wanted:
        by_topic.setdefault(topic, []).append({"partition_index": partition,
                                               "partition_error_code": errors[topic, partition]})
    return [{"name": name, "results_by_partition": results} for name, results in by_topic.items()]


def handle_add_offsets_to_txn(broker: Broker, request, context: RequestContext) -> dict:
    node = txn_node(broker, context.now_ms)
    offsets_partition = group_node(broker, context.now_ms).coordinator.partition_for(request.group_id)
    errors = _add_partitions(node, broker, request.transactional_id, request.producer_id, request.producer_epoch,
                             [(CONSUMER_OFFSETS_TOPIC, offsets_partition)], context.now_ms)
    (error,) = errors.values()
    if context.api_version < 2 and error == ErrorCode.PRODUCER_FENCED:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return {"throttle_time_ms": 0, "error_code": error}


def handle_txn_offset_commit(broker: Broker, request, context: RequestContext) -> dict:
    """Write the offsets to the group's __consumer_offsets partition as part of the
    transaction (a transactional batch); the group sees them when the commit marker lands."""
    node = txn_node(broker, context.now_ms)
    groups = group_node(broker, context.now_ms).coordinator
    offsets_partition = TopicPartition(CONSUMER_OFFSETS_TOPIC, groups.partition_for(request.group_id))
    key = (offsets_partition.topic, offsets_partition.partition)
    error = node.coordinator.verify_partitions(request.transactional_id, request.producer_id,
                                               request.producer_epoch, [key])[key]
    offsets = {}
    for topic in request.topics:
        for p in topic.partitions:
            offsets[topic.name, p.partition_index] = OffsetAndMetadata(
                p.committed_offset, p.get("committed_leader_epoch", -1), p.committed_metadata or "", context.now_ms)
    if error == ErrorCode.NONE and offsets:
        records = [Record(timestamp=context.now_ms, key=encode_key(OffsetCommitKey(request.group_id, topic, index)),
                          value=encode_offset_value(value)) for (topic, index), value in offsets.items()]
        transactions = node.partition_transactions(offsets_partition)
        state = broker.partition(offsets_partition).log.producer_state.producers.get(request.producer_id)
        sequence = 0 if state is None or state.producer_epoch != request.producer_epoch else state.last_seq + 1
        batch = build_batch(records, producer_id=request.producer_id, producer_epoch=request.producer_epoch,
                            base_sequence=sequence, is_transactional=True)
        try:
            info = broker.append(offsets_partition, batch, context.now_ms)
            transactions.on_append(RecordBatch(batch), info.first_offset)
            node.pending_offsets.setdefault((request.group_id, request.producer_id), {}).update(offsets)
        except KafkaError as e:
            error = e.code
    if context.api_version < 2 and error == ErrorCode.PRODUCER_FENCED:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return {"throttle_time_ms": 0, "topics": [
        {"name": topic.name, "partitions": [{"partition_index": p.partition_index, "error_code": error}
                                            for p in topic.partitions]}
        for topic in request.topics]}


def handle_end_txn(broker: Broker, request, context: RequestContext) -> dict:
    node = txn_node(broker, context.now_ms)
    effects = node.coordinator.end_transaction(request.transactional_id, request.producer_id, request.producer_epoch,
                                               request.committed, context.now_ms)
    node.apply(effects, context.now_ms)
    response = _response(effects)
    if context.api_version < 2 and response["error_code"] == ErrorCode.PRODUCER_FENCED:
        response["error_code"] = ErrorCode.INVALID_PRODUCER_EPOCH
    return response


def handle_write_txn_markers(broker: Broker, request, context: RequestContext) -> dict:
    """Markers sent by a transaction coordinator on another broker."""
    node = txn_node(broker, context.now_ms)
    markers = []
    for marker in request.markers:
        topics = []
        for topic in marker.topics:
            topics.append({"name": topic.name, "partitions": [
                {"partition_index": index, "error_code": node.write_marker(
                    TopicPartition(topic.name, index), marker.producer_id, marker.producer_epoch,
                    marker.transaction_result, marker.coordinator_epoch, context.now_ms)}
                for index in topic.partition_indexes]})
        markers.append({"producer_id": marker.producer_id, "topics": topics})
    return {"markers": markers}


def handle_list_transactions(broker: Broker, request, context: RequestContext) -> dict:
    node = txn_node(broker, context.now_ms)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "unknown_state_filters": [],
            "transaction_states": node.coordinator.list_transactions(
                request.state_filters, request.producer_id_filters, request.get("duration_filter", -1),
                context.now_ms)}


def handle_describe_transactions(broker: Broker, request, context: RequestContext) -> dict:
    node = txn_node(broker, context.now_ms)
    return {"throttle_time_ms": 0, "transaction_states": [
        node.coordinator.describe_transaction(transactional_id) for transactional_id in request.transactional_ids]}
