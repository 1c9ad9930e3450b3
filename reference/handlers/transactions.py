"""Transaction APIs and the transactional paths of Produce, Fetch and ListOffsets.

`TxnNode` is the shell around the sans-IO TransactionCoordinator and the per-partition
PartitionTransactions of one broker, alone or in a cluster.

Coordinator. A node coordinates the transactional ids whose `__transaction_state` partition
it leads (the topic is replicated: RF min(transaction.state.log.replication.factor, live
brokers)). It loads a partition once its log is committed to the end, replaying it under the
partition's leader epoch, which becomes the coordinator epoch its markers carry; it resumes
every transaction prepared there but not completed, and drops the partition when it stops
leading (Kafka's onElection / onResignation). Other ids get NOT_COORDINATOR, or
COORDINATOR_LOAD_IN_PROGRESS while loading. State records are appended with acks=all and
a reply waits until the high watermark passes them; while an id's records are in flight its
requests get CONCURRENT_TRANSACTIONS (Kafka's pending state), and a failed write drops the
partition, so that its state is read again from the log.

Markers. Once PrepareCommit/PrepareAbort is replicated, EndTxn is answered and the markers
go to the leader of every partition of the transaction: appended here with the coordinator
origin, or sent as WriteTxnMarkers over the cluster's inter-broker connections. Each is
acks=all and carries the coordinator epoch, and a leader refuses a marker from an older
coordinator epoch. They are retried until every partition has its marker, then the
coordinator records CompleteCommit/CompleteAbort; a coordinator that loses the partition stops.

Partitions. A leader keeps each partition's open transactions, last stable offset and
aborted-transaction index, rebuilt from the log whenever it leads in a new leader epoch. A
producer's first transactional write to a partition is verified with the coordinator
(KIP-890 part 1), here or with AddPartitionsToTxn v4 verify_only on the coordinator's node. A
TxnOffsetCommit is a transactional batch on the group's `__consumer_offsets` partition; when
the COMMIT marker lands there, the transaction's offsets are replayed into the group
coordinator (KIP-447: the group sees them only if the transaction commits).

Transaction version 1 (KIP-98 with KIP-890 part 1 verification) is what clients speak here:
EndTxn and TxnOffsetCommit stop below v5, AddPartitionsToTxn v4+ is the broker-to-broker
verification batch.
"""
from __future__ import annotations

import asyncio
import weakref
from typing import Awaitable, Iterator

from reference.coordinator.records import (
    CONSUMER_OFFSETS_TOPIC, OffsetAndMetadata, OffsetCommitKey, encode_key, encode_offset_value,
)
from reference.coordinator.records import partition_for as offsets_partition_for
from reference.handlers.context import RequestContext
from reference.handlers.groups import coordinator_error, partition_exists, group_node
from reference.node.broker import Broker, TopicPartition
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import (
    CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, Record, RecordBatch, build_batch, build_control_batch, iter_batches,
)
from reference.storage import AppendOrigin, Log
from reference.transaction.coordinator import (
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TransactionCoordinator, TransactionCoordinatorConfig, TxnEffects, TxnMarkers,
)
from reference.transaction.partition import (
    AbortedTxn, PartitionTransactions, TransactionBugs, VerificationGuard, committed_records,
)
from reference.transaction.records import TRANSACTION_STATE_TOPIC, decode_key

READ_BYTES_MAX = 1 << 20
VERIFY_ONLY_BATCH_VERSION = 4  # AddPartitionsToTxn v4+: batches of transactions, sent by brokers (KIP-890)
WRITE_TXN_MARKERS_VERSION = 1
INIT_PRODUCER_ID_VERSION = 0  # a plain producer id from the controller, for a new transactional id
TRANSACTION_STATE_SEGMENT_BYTES = 100 * 1024 * 1024  # transaction.state.log.segment.bytes
ACKS_ALL = -1
STATE_WRITE_TIMEOUT_MS = 5000  # how long a state write waits for the ISR (Kafka: request.timeout.ms)
MARKER_WRITE_TIMEOUT_MS = 3000  # how long a marker waits for the ISR; below the peers' request timeout
MARKER_RETRY_BACKOFF_MS = 100  # between rounds of markers to partitions that did not take theirs yet
END_TXN_COMPLETION_WAIT_MS = 3000  # how long EndTxn waits for the markers before it answers anyway
PEER_ERRORS = (OSError, asyncio.TimeoutError, KafkaError)  # a call to another node failed, or was refused
# What a producer is told when its partition's leader could not verify with the coordinator:
# a retriable error, as Kafka's AddPartitionsToTxnManager maps them (KIP-890).
VERIFICATION_RETRIABLE = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                          ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS}


class TxnNode:
    def __init__(self, broker: Broker, now_ms: int) -> None:
        config = broker.config
        self.broker = broker
        self.bugs = TransactionBugs(
            serve_aborted_to_read_committed=config.kspec_bug_serve_aborted_to_read_committed,
            late_produce_joins_next_transaction=config.kspec_bug_late_produce_joins_next_transaction)
        self.now_ms = now_ms  # the latest time this node was told (a request's or a tick's)
        self.coordinator = TransactionCoordinator(TransactionCoordinatorConfig(
            transaction_state_log_num_partitions=config.transaction_state_log_num_partitions,
            transaction_max_timeout_ms=config.transaction_max_timeout_ms,
            transaction_abort_timed_out_transaction_cleanup_interval_ms=(
                config.transaction_abort_timed_out_transaction_cleanup_interval_ms),
        ), self._allocate_producer_id, now_ms)
        self.loaded: dict[int, int] = {}  # __transaction_state partition -> the leader epoch it was loaded in
        self.leading: set[int] = set()
        self.writing: set[str] = set()  # transactional ids whose state records are not replicated yet
        self.completing: dict[TxnMarkers, asyncio.Task] = {}
        self.spare_producer_ids: list[int] = []  # in a cluster: ids from the controller, for new transactional ids
        # (partition, producer id) -> (its verification guard, the remote coordinator's answer)
        self.verified: dict[tuple[TopicPartition, int], tuple[VerificationGuard, ErrorCode]] = {}
        self._partitions: weakref.WeakKeyDictionary[Log, tuple[int, PartitionTransactions]] = \
            weakref.WeakKeyDictionary()
        self._tasks: set[asyncio.Task] = set()

    # -- coordinator: leadership of __transaction_state ----------------------------------

    def ensure_state_topic(self, now_ms: int) -> None:
        config = self.broker.config
        self.broker.create_internal_topic(
            TRANSACTION_STATE_TOPIC, config.transaction_state_log_num_partitions,
            config.transaction_state_log_replication_factor,
            {"cleanup.policy": "compact", "segment.bytes": str(TRANSACTION_STATE_SEGMENT_BYTES)}, now_ms)

    def coordinator_node(self, transactional_id: str, now_ms: int) -> tuple[int, str, int] | None:
        """FindCoordinator: the leader of the id's `__transaction_state` partition."""
        self.ensure_state_topic(now_ms)
        return self.broker.partition_leader(TRANSACTION_STATE_TOPIC, self.coordinator.partition_for(transactional_id))

    def follow_leadership(self, now_ms: int) -> None:
        """Load the state partitions this node now leads, drop those it no longer leads."""
        led = self.broker.led_partitions(TRANSACTION_STATE_TOPIC)
        for partition, epoch in list(self.loaded.items()):
            if led.get(partition, (None,))[0] != epoch:
                self._unload(partition)
        for partition, (epoch, ready) in sorted(led.items()):
            if ready and partition not in self.loaded:
                self._load(partition, epoch)
        self.leading = set(led)

    def _load(self, partition: int, leader_epoch: int) -> None:
        log = self.broker.partitions[TopicPartition(TRANSACTION_STATE_TOPIC, partition)].log
        records = [(record.key, record.value) for record in committed_records(_batches(log, log.log_start_offset))
                   if record.offset >= log.log_start_offset]
        self.coordinator.load(partition, leader_epoch, records)
        self.loaded[partition] = leader_epoch
        for markers in self.coordinator.pending_markers():
            if self.coordinator.partition_for(markers.transactional_id) == partition:
                self._start_completion(markers)

    def _unload(self, partition: int) -> None:
        del self.loaded[partition]
        self.coordinator.unload(partition)

    def error_for(self, transactional_id: str) -> ErrorCode:
        partition = self.coordinator.partition_for(transactional_id)
        if partition not in self.loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if partition in self.leading else ErrorCode.NOT_COORDINATOR
        return ErrorCode.CONCURRENT_TRANSACTIONS if transactional_id in self.writing else ErrorCode.NONE

    def serve(self, transactional_id: str, now_ms: int) -> ErrorCode:
        """Before a coordinator request: is this node the id's coordinator, ready to answer?"""
        self.now_ms = now_ms
        self.ensure_state_topic(now_ms)
        self.follow_leadership(now_ms)
        return self.error_for(transactional_id)

    def _allocate_producer_id(self) -> int:
        if self.broker.send_request is None:
            return self.broker.allocate_producer_id(self.now_ms)
        return self.spare_producer_ids.pop()  # InitProducerId fetched one before it called the coordinator

    async def reserve_producer_id(self) -> ErrorCode:
        """In a cluster, producer ids come from the active controller: ask for one (an
        InitProducerId without a transactional id, which this node forwards to it)."""
        if self.broker.send_request is None or self.spare_producer_ids:
            return ErrorCode.NONE
        try:
            response = await self.broker.send_request(self.broker.config.node_id, ApiKey.INIT_PRODUCER_ID,
                                                      INIT_PRODUCER_ID_VERSION,
                                                      {"transactional_id": None, "transaction_timeout_ms": 0})
        except PEER_ERRORS:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if response.error_code != ErrorCode.NONE:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        self.spare_producer_ids.append(response.producer_id)
        return ErrorCode.NONE

    # -- coordinator: state writes and markers -------------------------------------------

    async def write(self, effects: TxnEffects, now_ms: int) -> ErrorCode:
        """Append the state records (acks=all) and wait until they are replicated; then start
        the markers. A failed write drops the partition: its state is read again from the log."""
        by_partition: dict[int, list[Record]] = {}
        for record in effects.records:
            by_partition.setdefault(record.partition, []).append(Record(timestamp=now_ms, key=record.key,
                                                                        value=record.value))
        transactional_ids = {decode_key(record.key) for record in effects.records} - self.writing
        self.writing |= transactional_ids
        try:
            error, required = ErrorCode.NONE, []
            for partition, records in sorted(by_partition.items()):
                topic_partition = TopicPartition(TRANSACTION_STATE_TOPIC, partition)
                try:
                    info = self.broker.append(topic_partition, build_batch(records), now_ms, acks=ACKS_ALL)
                    required.append((topic_partition, info.last_offset + 1))
                except KafkaError as e:
                    error = coordinator_error(e.code)
            if error == ErrorCode.NONE:
                error = coordinator_error(await self.replicated(required, STATE_WRITE_TIMEOUT_MS))
            if error != ErrorCode.NONE:
                for partition in by_partition:
                    if partition in self.loaded:
                        self._unload(partition)
                return error
        finally:
            self.writing -= transactional_ids
        for markers in effects.markers:
            self._start_completion(markers)
        return ErrorCode.NONE

    async def replicated(self, required: list[tuple[TopicPartition, int]], timeout_ms: int) -> ErrorCode:
        """NONE once each partition's high watermark passed its offset (at once on one node)."""
        for topic_partition, offset in required:
            if self.broker.acks_purgatory is not None:
                status = await self.broker.acks_purgatory.wait_for_replication(self.broker, topic_partition, offset,
                                                                               timeout_ms)
                if status != ErrorCode.NONE:
                    return status
        return ErrorCode.NONE

    def spawn(self, coroutine: Awaitable) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _start_completion(self, markers: TxnMarkers) -> None:
        if markers not in self.completing:
            task = asyncio.get_running_loop().create_task(self._complete(markers))
            self.completing[markers] = task
            task.add_done_callback(lambda _: self.completing.pop(markers, None))

    async def _complete(self, markers: TxnMarkers) -> None:
        """Write the transaction's markers until every partition has one, then record the end.
        Stops if this node stops coordinating the transaction (a newer coordinator resumes it)."""
        state_partition = self.coordinator.partition_for(markers.transactional_id)
        pending = set(markers.partitions)
        while pending and self.loaded.get(state_partition) == markers.coordinator_epoch:
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for topic, index in sorted(pending):
                if not partition_exists(self.broker, topic, index):
                    pending.discard((topic, index))  # deleted since it joined the transaction
                elif (leader := self.broker.partition_leader(topic, index)) is not None:
                    by_leader.setdefault(leader[0], []).append((topic, index))
            errors = {}
            for answered in await asyncio.gather(*(self._send_markers(leader_id, markers, partitions)
                                                   for leader_id, partitions in sorted(by_leader.items()))):
                errors |= answered
            if {ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH} & set(errors.values()):
                return  # a newer coordinator or producer epoch owns these partitions now
            pending -= {key for key, error in errors.items() if error == ErrorCode.NONE}
            if pending:
                await asyncio.sleep(MARKER_RETRY_BACKOFF_MS / 1000)
        if self.loaded.get(state_partition) == markers.coordinator_epoch:
            await self.write(self.coordinator.complete(markers, self.now_ms), self.now_ms)

    async def _send_markers(self, leader_id: int, markers: TxnMarkers,
                            partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        if leader_id == self.broker.config.node_id:
            return await self.write_markers_here(markers.producer_id, markers.producer_epoch, markers.committed,
                                                 markers.coordinator_epoch, partitions, self.now_ms)
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        try:
            response = await self.broker.send_request(leader_id, ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, {
                "markers": [{"producer_id": markers.producer_id, "producer_epoch": markers.producer_epoch,
                             "transaction_result": markers.committed, "coordinator_epoch": markers.coordinator_epoch,
                             "topics": [{"name": topic, "partition_indexes": indexes}
                                        for topic, indexes in by_topic.items()]}]})
        except PEER_ERRORS:
            return {}
        return {(topic.name, p.partition_index): ErrorCode(p.error_code)
                for marker in response.markers for topic in marker.topics for p in topic.partitions}

    async def write_markers_here(self, producer_id: int, producer_epoch: int, committed: bool,
                                 coordinator_epoch: int, partitions: list[tuple[str, int]],
                                 now_ms: int) -> dict[tuple[str, int], ErrorCode]:
        """WriteTxnMarkers on the partitions' leader: append each marker, wait until replicated."""
        errors, required = {}, {}
        for key in partitions:
            topic_partition = TopicPartition(*key)
            try:
                transactions = self.partition_transactions(topic_partition)
                transactions.check_marker(producer_id, coordinator_epoch)
                first_offset = transactions.ongoing.get(producer_id)
                marker = build_control_batch(CONTROL_TYPE_COMMIT if committed else CONTROL_TYPE_ABORT,
                                             producer_id=producer_id, producer_epoch=producer_epoch,
                                             coordinator_epoch=coordinator_epoch, timestamp_ms=now_ms)
                info = self.broker.append(topic_partition, marker, now_ms, acks=ACKS_ALL,
                                          origin=AppendOrigin.COORDINATOR)
                transactions.on_append(RecordBatch(marker), info.first_offset)
                if committed and first_offset is not None and topic_partition.topic == CONSUMER_OFFSETS_TOPIC:
                    self._commit_offsets(topic_partition, producer_id, first_offset, info.first_offset, now_ms)
                required[key] = (topic_partition, info.last_offset + 1)
                errors[key] = ErrorCode.NONE
            except KafkaError as e:
                errors[key] = e.code
        for key, wanted in required.items():
            errors[key] = await self.replicated([wanted], MARKER_WRITE_TIMEOUT_MS)
        return errors

    def _commit_offsets(self, offsets_partition: TopicPartition, producer_id: int, first_offset: int,
                        marker_offset: int, now_ms: int) -> None:
        """A COMMIT marker on `__consumer_offsets`: the group coordinator takes the offsets the
        producer committed in this transaction (a partition still loading replays them itself)."""
        groups = group_node(self.broker, now_ms)
        if offsets_partition.partition not in groups.loaded:
            return
        for batch in _batches(self.broker.partition(offsets_partition).log, first_offset):
            if batch.base_offset >= marker_offset:
                break
            if isinstance(batch, RecordBatch) and batch.producer_id == producer_id and not batch.is_control:
                for record in batch.records():
                    groups.coordinator.replay(record.key, record.value, now_ms)

    def tick(self, now_ms: int) -> None:
        """Follow leadership; abort timed-out transactions (transaction.timeout.ms)."""
        self.now_ms = now_ms
        self.follow_leadership(now_ms)
        effects = self.coordinator.tick(now_ms)
        if effects.records:
            self.spawn(self.write(effects, now_ms))

    # -- coordinator: verification (KIP-890 part 1) ---------------------------------------

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     topic_partition: TopicPartition) -> ErrorCode:
        """Is the partition in the ongoing transaction of this producer id and epoch? Asked of
        the coordinator here, or of the coordinator's node."""
        if self.serve(transactional_id, self.now_ms) != ErrorCode.NOT_COORDINATOR:
            return self._verify_here(transactional_id, producer_id, producer_epoch, topic_partition)
        coordinator = self.broker.partition_leader(TRANSACTION_STATE_TOPIC,
                                                   self.coordinator.partition_for(transactional_id))
        if coordinator is None or self.broker.send_request is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        try:
            response = await self.broker.send_request(coordinator[0], ApiKey.ADD_PARTITIONS_TO_TXN,
                                                      VERIFY_ONLY_BATCH_VERSION, {"transactions": [{
                                                          "transactional_id": transactional_id,
                                                          "producer_id": producer_id, "producer_epoch": producer_epoch,
                                                          "verify_only": True, "topics": [{
                                                              "name": topic_partition.topic,
                                                              "partitions": [topic_partition.partition]}]}]})
        except PEER_ERRORS:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if response.error_code != ErrorCode.NONE:
            return ErrorCode(response.error_code)
        (transaction,) = response.results_by_transaction
        (topic,) = transaction.topic_results
        (partition,) = topic.results_by_partition
        return ErrorCode(partition.partition_error_code)

    def _verify_here(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     topic_partition: TopicPartition) -> ErrorCode:
        if error := self.error_for(transactional_id):
            return error
        key = (topic_partition.topic, topic_partition.partition)
        return self.coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, [key])[key]

    # -- partitions ---------------------------------------------------------------------

    def partition_transactions(self, topic_partition: TopicPartition) -> PartitionTransactions:
        """This leader's transactions of the partition, rebuilt from the log in a new leader epoch."""
        partition = self.broker.partition(topic_partition)
        cached = self._partitions.get(partition.log)
        if cached is None or cached[0] != partition.leader_epoch:
            transactions = PartitionTransactions(self.bugs)
            transactions.rebuild(_batches(partition.log, partition.log.log_start_offset))
            cached = self._partitions[partition.log] = (partition.leader_epoch, transactions)
        return cached[1]

    def verify_produce(self, request, now_ms: int) -> Awaitable | None:
        """Before a transactional Produce whose coordinator is on another node: ask it about each
        first write to a partition here; None when nothing needs asking."""
        transactional_id = request.transactional_id
        if transactional_id is None or self.broker.send_request is None:
            return None
        self.now_ms = now_ms
        wanted = []
        for topic_data in request.topic_data:
            name = topic_data.get("name") or self.broker.image.topics_by_id.get(topic_data.get("topic_id"))
            for partition_data in topic_data.partition_data:
                batch = _single_batch(partition_data.records)
                topic_partition = TopicPartition(name, partition_data.index)
                if batch is None or not batch.is_transactional or name is None:
                    continue
                try:
                    if self.partition_transactions(topic_partition).needs_verification(batch.producer_id):
                        wanted.append((topic_partition, batch))
                except KafkaError:
                    continue  # not the leader: the append says so
        if not wanted or self.serve(transactional_id, now_ms) != ErrorCode.NOT_COORDINATOR:
            return None
        return self._verify_remotely(transactional_id, wanted)

    async def _verify_remotely(self, transactional_id: str, wanted: list[tuple[TopicPartition, RecordBatch]]) -> None:
        for topic_partition, batch in wanted:
            try:
                guard = self.partition_transactions(topic_partition).start_verification(batch.producer_id)
            except KafkaError:
                continue
            error = await self.verify(transactional_id, batch.producer_id, batch.producer_epoch, topic_partition)
            self.verified[topic_partition, batch.producer_id] = (guard, error)

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
        guard = None
        if transactions.needs_verification(batch.producer_id):
            guard = transactions.start_verification(batch.producer_id)
            guard_asked, error = self.verified.pop((topic_partition, batch.producer_id), (None, None))
            if guard_asked is not guard:
                error = self._verify_here(transactional_id, batch.producer_id, batch.producer_epoch, topic_partition)
            if error in VERIFICATION_RETRIABLE:
                raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, f"verifying {topic_partition} with the coordinator "
                                 f"of {transactional_id!r}: {error.name}")
            if error == ErrorCode.PRODUCER_FENCED:  # as Kafka's AddPartitionsToTxnManager answers a Produce:
                raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,  # clients take it as fatal, fenced
                                 f"producer {batch.producer_id} epoch {batch.producer_epoch} of {transactional_id!r} "
                                 "was fenced by a newer epoch")
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


_nodes: weakref.WeakKeyDictionary[Broker, TxnNode] = weakref.WeakKeyDictionary()


def txn_node(broker: Broker, now_ms: int) -> TxnNode:
    if broker not in _nodes:
        _nodes[broker] = TxnNode(broker, now_ms)
    node = _nodes[broker]
    node.now_ms = now_ms
    return node


def transactions_next_deadline_ms(broker: Broker) -> int | None:
    """When the transaction coordinator's timer next has work (None before it exists)."""
    return _nodes[broker].coordinator.next_deadline_ms() if broker in _nodes else None


def tick_transactions(broker: Broker, now_ms: int) -> None:
    txn_node(broker, now_ms).tick(now_ms)


def _batches(log: Log, start_offset: int) -> Iterator:
    offset = start_offset
    while offset < log.log_end_offset:
        read = log.read(offset, READ_BYTES_MAX)
        if not read.records:
            return
        for batch in iter_batches(read.records):
            if batch.last_offset >= offset:
                yield batch
            offset = batch.last_offset + 1


def _single_batch(records: bytes | None) -> RecordBatch | None:
    """The produced batch, if the bytes hold one v2 batch; anything else is left to validation."""
    batches = list(iter_batches(memoryview(records or b"")))
    return batches[0] if len(batches) == 1 and isinstance(batches[0], RecordBatch) else None


# ---------------------------------------------------------------------------------------------
# Handlers


def _fenced_before_v2(error: ErrorCode, api_version: int) -> ErrorCode:
    """PRODUCER_FENCED is new in v2 of the transaction APIs (KIP-588); older clients get INVALID_PRODUCER_EPOCH."""
    return ErrorCode.INVALID_PRODUCER_EPOCH if api_version < 2 and error == ErrorCode.PRODUCER_FENCED else error


def _response(error: ErrorCode, effects: TxnEffects | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": error,
            "producer_id": effects.producer_id if effects and not error else NO_PRODUCER_ID,
            "producer_epoch": effects.producer_epoch if effects and not error else NO_PRODUCER_EPOCH}


async def handle_init_producer_id_transactional(broker: Broker, request, context: RequestContext) -> dict:
    node = txn_node(broker, context.now_ms)
    if error := node.serve(request.transactional_id, context.now_ms) or await node.reserve_producer_id():
        return _response(error)
    if error := node.error_for(request.transactional_id):  # asked again: the reservation awaited
        return _response(error)
    effects = node.coordinator.init_producer_id(
        request.transactional_id, request.transaction_timeout_ms, request.get("producer_id", NO_PRODUCER_ID),
        request.get("producer_epoch", NO_PRODUCER_EPOCH), context.now_ms)
    # A fenced open transaction is aborted first: CONCURRENT_TRANSACTIONS, and the client retries.
    error = await node.write(effects, context.now_ms) or effects.error
    return _response(_fenced_before_v2(error, context.api_version), effects)


async def handle_add_partitions_to_txn(broker: Broker, request, context: RequestContext) -> dict:
    node = txn_node(broker, context.now_ms)
    if context.api_version >= VERIFY_ONLY_BATCH_VERSION:
        results = []
        for transaction in request.transactions:
            wanted = [(t.name, p) for t in transaction.topics for p in t.partitions]
            if transaction.verify_only:
                error = node.serve(transaction.transactional_id, context.now_ms)
                errors = {key: error for key in wanted} if error else node.coordinator.verify_partitions(
                    transaction.transactional_id, transaction.producer_id, transaction.producer_epoch, wanted)
            else:
                errors = await _add_partitions(node, broker, transaction.transactional_id, transaction.producer_id,
                                               transaction.producer_epoch, wanted, context.now_ms)
            results.append({"transactional_id": transaction.transactional_id,
                            "topic_results": _topic_results(wanted, errors)})
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results_by_transaction": results}
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    errors = await _add_partitions(node, broker, request.v3_and_below_transactional_id,
                                   request.v3_and_below_producer_id, request.v3_and_below_producer_epoch, wanted,
                                   context.now_ms)
    errors = {key: _fenced_before_v2(error, context.api_version) for key, error in errors.items()}
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(wanted, errors)}


async def _add_partitions(node: TxnNode, broker: Broker, transactional_id: str, producer_id: int,
                          producer_epoch: int, wanted: list[tuple[str, int]],
                          now_ms: int) -> dict[tuple[str, int], ErrorCode]:
    if error := node.serve(transactional_id, now_ms):
        return {key: error for key in wanted}
    unknown = [key for key in wanted if not partition_exists(broker, *key)]
    if unknown:  # all or nothing: the others are not attempted
        return {key: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if key in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                for key in wanted}
    effects = node.coordinator.add_partitions(transactional_id, producer_id, producer_epoch, wanted, now_ms)
    error = await node.write(effects, now_ms) or effects.error
    return {key: error for key in wanted}


def _topic_results(wanted: list[tuple[str, int]], errors: dict[tuple[str, int], ErrorCode]) -> list[dict]:
    by_topic: dict[str, list[dict]] = {}
    for topic, partition in wanted:
        by_topic.setdefault(topic, []).append({"partition_index": partition,
                                               "partition_error_code": errors[topic, partition]})
    return [{"name": name, "results_by_partition": results} for name, results in by_topic.items()]


def _offsets_partition(broker: Broker, group_id: str) -> TopicPartition:
    return TopicPartition(CONSUMER_OFFSETS_TOPIC,
                          offsets_partition_for(group_id, broker.config.offsets_topic_num_partitions))


async def handle_add_offsets_to_txn(broker: Broker, request, context: RequestContext) -> dict:
    node = txn_node(broker, context.now_ms)
    offsets_partition = _offsets_partition(broker, request.group_id)
    errors = await _add_partitions(node, broker, request.transactional_id, request.producer_id,
                                   request.producer_epoch, [(offsets_partition.topic, offsets_partition.partition)],
                                   context.now_ms)
    (error,) = errors.values()
    return {"throttle_time_ms": 0, "error_code": _fenced_before_v2(error, context.api_version)}


async def handle_txn_offset_commit(broker: Broker, request, context: RequestContext) -> dict:
    """On the group coordinator: write the offsets to the group's __consumer_offsets partition
    as part of the transaction (a transactional batch, acks=all); the group sees them when the
    commit marker lands."""
    node = txn_node(broker, context.now_ms)
    offsets_partition = _offsets_partition(broker, request.group_id)
    offsets = {}
    for topic in request.topics:
        for p in topic.partitions:
            offsets[topic.name, p.partition_index] = OffsetAndMetadata(
                p.committed_offset, p.get("committed_leader_epoch", -1), p.committed_metadata or "", context.now_ms)
    error = await node.verify(request.transactional_id, request.producer_id, request.producer_epoch,
                              offsets_partition)
    if error == ErrorCode.NONE and offsets:
        records = [Record(timestamp=context.now_ms, key=encode_key(OffsetCommitKey(request.group_id, topic, index)),
                          value=encode_offset_value(value)) for (topic, index), value in offsets.items()]
        try:
            transactions = node.partition_transactions(offsets_partition)
            state = broker.partition(offsets_partition).log.producer_state.producers.get(request.producer_id)
            sequence = 0 if state is None or state.producer_epoch != request.producer_epoch else state.last_seq + 1
            batch = build_batch(records, producer_id=request.producer_id, producer_epoch=request.producer_epoch,
                                base_sequence=sequence, is_transactional=True)
            info = broker.append(offsets_partition, batch, context.now_ms, acks=ACKS_ALL)
            transactions.on_append(RecordBatch(batch), info.first_offset)
            error = await node.replicated([(offsets_partition, info.last_offset + 1)], STATE_WRITE_TIMEOUT_MS)
        except KafkaError as e:
            error = e.code
        error = coordinator_error(error)
    error = _fenced_before_v2(error, context.api_version)
    return {"throttle_time_ms": 0, "topics": [
        {"name": topic.name, "partitions": [{"partition_index": p.partition_index, "error_code": error}
                                            for p in topic.partitions]}
        for topic in request.topics]}


async def handle_end_txn(broker: Broker, request, context: RequestContext) -> dict:
    node = txn_node(broker, context.now_ms)
    if error := node.serve(request.transactional_id, context.now_ms):
        return _response(error)
    effects = node.coordinator.end_transaction(request.transactional_id, request.producer_id, request.producer_epoch,
                                               request.committed, context.now_ms)
    error = await node.write(effects, context.now_ms) or effects.error
    completing = [node.completing[markers] for markers in effects.markers if markers in node.completing]
    if completing:
        # The outcome is decided once the Prepare record is replicated; waiting for the markers
        # as well spares the client's next transaction CONCURRENT_TRANSACTIONS and its back-off.
        await asyncio.wait(completing, timeout=END_TXN_COMPLETION_WAIT_MS / 1000)
    return _response(_fenced_before_v2(error, context.api_version), effects)


async def handle_write_txn_markers(broker: Broker, request, context: RequestContext) -> dict:
    """Markers sent by a transaction coordinator on another broker."""
    node = txn_node(broker, context.now_ms)
    markers = []
    for marker in request.markers:
        wanted = [(topic.name, index) for topic in marker.topics for index in topic.partition_indexes]
        errors = await node.write_markers_here(marker.producer_id, marker.producer_epoch, marker.transaction_result,
                                               marker.coordinator_epoch, wanted, context.now_ms)
        markers.append({"producer_id": marker.producer_id, "topics": [
            {"name": topic.name, "partitions": [{"partition_index": index, "error_code": errors[topic.name, index]}
                                                for index in topic.partition_indexes]}
            for topic in marker.topics]})
    return {"markers": markers}


def handle_list_transactions(broker: Broker, request, context: RequestContext) -> dict:
    """The transactions this node coordinates."""
    node = txn_node(broker, context.now_ms)
    node.follow_leadership(context.now_ms)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "unknown_state_filters": [],
            "transaction_states": node.coordinator.list_transactions(
                request.state_filters, request.producer_id_filters, request.get("duration_filter", -1),
                context.now_ms)}


def handle_describe_transactions(broker: Broker, request, context: RequestContext) -> dict:
    node = txn_node(broker, context.now_ms)
    node.follow_leadership(context.now_ms)
    states = []
    for transactional_id in request.transactional_ids:
        described = node.coordinator.describe_transaction(transactional_id)
        if (error := node.error_for(transactional_id)) and error != ErrorCode.CONCURRENT_TRANSACTIONS:
            described["error_code"] = error
        states.append(described)
    return {"throttle_time_ms": 0, "transaction_states": states}
