"""The transaction coordinator of one node and its partitions' transactions: the sans-IO
TransactionCoordinator and the per-partition PartitionTransactions, with the asyncio tasks
that write state records and markers (Kafka's TransactionCoordinator, TransactionStateManager
and TransactionMarkerChannelManager, and the transactional side of its ReplicaManager).

Coordinator. A node coordinates the transactional ids whose `__transaction_state` partition
it leads (the topic is replicated: transaction.state.log.replication.factor replicas, made once
that many brokers are unfenced; one on a single node). It loads a partition once its log is
committed to the end, replaying it under the partition's leader epoch, which becomes the
coordinator epoch its markers carry; it resumes every transaction prepared there but not
completed, and drops the partition when it stops leading (Kafka's onElection / onResignation).
Other ids get NOT_COORDINATOR, or COORDINATOR_LOAD_IN_PROGRESS while loading. State records are
appended with acks=all and a reply waits until the high watermark passes them; while an id's
records are in flight its requests get CONCURRENT_TRANSACTIONS (Kafka's pending state), and a
failed write drops the partition, so that its state is read again from the log.

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
import logging
import weakref
from typing import Awaitable, Iterator

from reference.coordinator.records import (
    CONSUMER_OFFSETS_TOPIC, OffsetAndMetadata, OffsetCommitKey, encode_key, encode_offset_value,
)
from reference.node.broker import TopicPartition
from reference.node.interface import BrokerNode
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import (
    CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, Record, RecordBatch, build_batch, build_control_batch, iter_batches,
)
from reference.runtime.capabilities import PEER_ERRORS, InterBrokerSender, ProducerIdManager, ReplicationWaiter
from reference.runtime.groups import GroupCoordinatorRuntime
from reference.runtime.leadership import (
    ACKS_ALL, PartitionLeadershipRuntime, appended, coordinator_error, partition_exists, read_batches,
)
from reference.storage import AppendOrigin, Log
from reference.transaction.coordinator import (
    TransactionCoordinator, TransactionCoordinatorConfig, TxnEffects, TxnMarkers,
)
from reference.transaction.partition import AbortedTxn, PartitionTransactions, TransactionBugs, VerificationGuard
from reference.transaction.records import TRANSACTION_STATE_TOPIC, decode_key

log = logging.getLogger("kspec.transactions")

VERIFY_ONLY_BATCH_VERSION = 4  # AddPartitionsToTxn v4+: batches of transactions, sent by brokers (KIP-890)
WRITE_TXN_MARKERS_VERSION = 1
TRANSACTION_STATE_SEGMENT_BYTES = 100 * 1024 * 1024  # transaction.state.log.segment.bytes
STATE_WRITE_TIMEOUT_MS = 5000  # how long a state write waits for the ISR (Kafka: request.timeout.ms)
MARKER_WRITE_TIMEOUT_MS = 3000  # how long a marker waits for the ISR; below the peers' request timeout
MARKER_RETRY_BACKOFF_MS = 100  # between rounds of markers to partitions that did not take theirs yet
# kspec.bug.late.produce.joins.next.transaction (TransactionBugs): a late transactional write, as
# the network or a busy request queue delays one now and then. At most once every
# LATE_PRODUCE_INTERVAL_MS a node holds a producer's first write to a partition it leads until that
# producer's next marker lands on the partition (or LATE_PRODUCE_HOLD_MAX_MS passed), then handles it.
LATE_PRODUCE_INTERVAL_MS = 20_000
LATE_PRODUCE_HOLD_MAX_MS = 60_000
# What a producer is told when its partition's leader could not verify with the coordinator:
# a retriable error, as Kafka's AddPartitionsToTxnManager maps them (KIP-890).
VERIFICATION_RETRIABLE = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                          ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS}


class TransactionCoordinatorRuntime(PartitionLeadershipRuntime):
    topic = TRANSACTION_STATE_TOPIC

    def __init__(self, broker: BrokerNode, groups: GroupCoordinatorRuntime, replication: ReplicationWaiter,
                 peers: InterBrokerSender, producer_ids: ProducerIdManager, now_ms: int) -> None:
        super().__init__(broker, replication)
        config = broker.config
        self.groups = groups
        self.peers = peers
        self.producer_ids = producer_ids
        self.bugs = TransactionBugs(
            serve_aborted_to_read_committed=config.kspec_bug_serve_aborted_to_read_committed,
            late_produce_joins_next_transaction=config.kspec_bug_late_produce_joins_next_transaction)
        self.now_ms = now_ms  # the latest time this node was told (a request's or a tick's)
        self.coordinator = TransactionCoordinator(TransactionCoordinatorConfig(
            transaction_state_log_num_partitions=config.transaction_state_log_num_partitions,
            transaction_max_timeout_ms=config.transaction_max_timeout_ms,
            transaction_abort_timed_out_transaction_cleanup_interval_ms=(
                config.transaction_abort_timed_out_transaction_cleanup_interval_ms),
        ), lambda: producer_ids.take(self.now_ms), now_ms)
        self.writing: set[str] = set()  # transactional ids whose state records are not replicated yet
        self.completing: dict[TxnMarkers, asyncio.Task] = {}
        # (partition, producer id) -> (its verification guard, the remote coordinator's answer)
        self.verified: dict[tuple[TopicPartition, int], tuple[VerificationGuard, ErrorCode]] = {}
        self._partitions: weakref.WeakKeyDictionary[Log, tuple[int, PartitionTransactions]] = \
            weakref.WeakKeyDictionary()
        self._tasks: set[asyncio.Task] = set()
        self._late_produce_after_ms = now_ms + LATE_PRODUCE_INTERVAL_MS  # the next late write, not before
        self._held: dict[tuple[TopicPartition, int], asyncio.Event] = {}  # a held late write, set by its marker

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

    def load(self, partition: int, leader_epoch: int, now_ms: int) -> None:
        """Replay the partition under its leader epoch (the coordinator epoch of its markers), then
        resume the transactions prepared there but not completed."""
        records = [(record.key, record.value) for record in self.committed_records(partition)]
        self.coordinator.load(partition, leader_epoch, records)
        for markers in self.coordinator.pending_markers():
            if self.coordinator.partition_for(markers.transactional_id) == partition:
                self._start_completion(markers)

    def unload(self, partition: int) -> None:
        self.coordinator.unload(partition)

    def error_for(self, transactional_id: str) -> ErrorCode:
        if error := self.partition_error(self.coordinator.partition_for(transactional_id)):
            return error
        return ErrorCode.CONCURRENT_TRANSACTIONS if transactional_id in self.writing else ErrorCode.NONE

    def serve(self, transactional_id: str, now_ms: int) -> ErrorCode:
        """Before a coordinator request: is this node the id's coordinator, ready to answer?"""
        self.now_ms = now_ms
        self.ensure_state_topic(now_ms)
        self.follow_leadership(now_ms)
        return self.error_for(transactional_id)

    async def reserve_producer_id(self) -> ErrorCode:
        return await self.producer_ids.reserve()

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             wanted: list[tuple[str, int]], now_ms: int) -> dict[tuple[str, int], ErrorCode]:
        """AddPartitionsToTxn (and AddOffsetsToTxn): all the partitions, or none."""
        if error := self.serve(transactional_id, now_ms):
            return {key: error for key in wanted}
        unknown = [key for key in wanted if not partition_exists(self.broker, *key)]
        if unknown:  # all or nothing: the others are not attempted
            return {key: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if key in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                    for key in wanted}
        effects = self.coordinator.add_partitions(transactional_id, producer_id, producer_epoch, wanted, now_ms)
        error = await self.write(effects, now_ms) or effects.error
        return {key: error for key in wanted}

    async def commit_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             offsets_partition: TopicPartition, group_id: str,
                             offsets: dict[tuple[str, int], OffsetAndMetadata], now_ms: int) -> ErrorCode:
        """TxnOffsetCommit on the group coordinator: the offsets as a transactional batch on the
        group's `__consumer_offsets` partition (acks=all); the group sees them at the COMMIT marker."""
        error = await self.verify(transactional_id, producer_id, producer_epoch, offsets_partition)
        if error != ErrorCode.NONE or not offsets:
            return error
        records = [Record(timestamp=now_ms, key=encode_key(OffsetCommitKey(group_id, topic, index)),
                          value=encode_offset_value(value)) for (topic, index), value in offsets.items()]
        try:
            transactions = self.partition_transactions(offsets_partition)
            state = self.broker.partition(offsets_partition).log.producer_state.producers.get(producer_id)
            sequence = 0 if state is None or state.producer_epoch != producer_epoch else state.last_seq + 1
            batch = build_batch(records, producer_id=producer_id, producer_epoch=producer_epoch,
                                base_sequence=sequence, is_transactional=True)
            info = self.broker.append(offsets_partition, batch, now_ms, acks=ACKS_ALL)
            transactions.on_append(RecordBatch(batch), info.first_offset)
            error = await self.replicated([appended(self.broker, offsets_partition, info)], STATE_WRITE_TIMEOUT_MS)
        except KafkaError as e:
            error = e.code
        return coordinator_error(error)

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
            error, required = self.append(by_partition, now_ms)
            if error == ErrorCode.NONE:
                error = coordinator_error(await self.replicated(required, STATE_WRITE_TIMEOUT_MS))
            if error != ErrorCode.NONE:
                for partition in by_partition:
                    self.drop(partition)
                return error
        finally:
            self.writing -= transactional_ids
        for markers in effects.markers:
            self._start_completion(markers)
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
            response = await self.peers(leader_id, ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, {
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
                if (held := self._held.get((topic_partition, producer_id))) is not None:
                    held.set()  # the late write comes in now, after the marker
                    self._late_produce_after_ms = now_ms + LATE_PRODUCE_INTERVAL_MS
                if committed and first_offset is not None and topic_partition.topic == CONSUMER_OFFSETS_TOPIC:
                    self._commit_offsets(topic_partition, producer_id, first_offset, info.first_offset, now_ms)
                required[key] = appended(self.broker, topic_partition, info)
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
        groups = self.groups
        groups.start(now_ms)
        if offsets_partition.partition not in groups.loaded:
            return
        for batch in read_batches(self.broker.partition(offsets_partition).log, first_offset):
            if batch.base_offset >= marker_offset:
                break
            if isinstance(batch, RecordBatch) and batch.producer_id == producer_id and not batch.is_control:
                for record in batch.records():
                    groups.coordinator.replay(record.key, record.value, now_ms)

    def next_deadline_ms(self) -> int:
        return self.coordinator.next_deadline_ms()

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
        if coordinator is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        try:
            response = await self.peers(coordinator[0], ApiKey.ADD_PARTITIONS_TO_TXN,
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
            transactions.rebuild(read_batches(partition.log, partition.log.log_start_offset))
            cached = self._partitions[partition.log] = (partition.leader_epoch, transactions)
        return cached[1]

    def verify_produce(self, request, now_ms: int) -> Awaitable | None:
        """Before a transactional Produce whose coordinator is on another node: ask it about each
        first write to a partition here; None when nothing needs asking."""
        transactional_id = request.transactional_id
        if transactional_id is None:
            return None
        self.now_ms = now_ms
        wanted = [(topic_partition, batch)
                  for topic_partition, batch, transactions in self._transactional_writes(request)
                  if transactions.needs_verification(batch.producer_id)]
        if not wanted or self.serve(transactional_id, now_ms) != ErrorCode.NOT_COORDINATOR:
            return None
        return self._verify_remotely(transactional_id, wanted)

    def hold_late_produce(self, request, now_ms: int) -> Awaitable | None:
        """With kspec.bug.late.produce.joins.next.transaction only: now and then (at most once every
        LATE_PRODUCE_INTERVAL_MS) a producer's first write to a partition here, sent in its
        transaction, arrives late. It is held until the producer's next marker lands on the
        partition, as a Produce delayed in the network or in the request queue past the client's
        timeouts lands after the coordinator's WriteTxnMarkers (KIP-890's motivating case): the
        client gave up on it and aborted. Without KIP-890 verification it then opens a
        transaction that the producer's next one, in a later epoch, commits or aborts with its own
        records; with verification it would be refused."""
        if (not self.bugs.late_produce_joins_next_transaction or request.transactional_id is None or self._held
                or now_ms < self._late_produce_after_ms):
            return None
        for topic_partition, batch, transactions in self._transactional_writes(request):
            if batch.producer_id not in transactions.ongoing:
                return self._hold(request.transactional_id, topic_partition, batch, now_ms)
        return None

    async def _hold(self, transactional_id: str, topic_partition: TopicPartition, batch: RecordBatch,
                    now_ms: int) -> None:
        key = (topic_partition, batch.producer_id)
        marker_landed = self._held[key] = asyncio.Event()
        try:  # only a write of the transaction it was sent in (not one to a partition never added to it)
            if await self.verify(transactional_id, batch.producer_id, batch.producer_epoch,
                                 topic_partition) != ErrorCode.NONE:
                return
            self._late_produce_after_ms = now_ms + LATE_PRODUCE_HOLD_MAX_MS + LATE_PRODUCE_INTERVAL_MS
            where = f"{topic_partition.topic}-{topic_partition.partition}"
            log.info("kspec.bug.late.produce.joins.next.transaction: holding the first write of producer %d to %s "
                     "until its next marker there", batch.producer_id, where)
            try:
                await asyncio.wait_for(marker_landed.wait(), LATE_PRODUCE_HOLD_MAX_MS / 1000)
            except asyncio.TimeoutError:
                pass
            log.info("kspec.bug.late.produce.joins.next.transaction: the held write of producer %d to %s comes in %s",
                     batch.producer_id, where, "after its marker" if marker_landed.is_set() else "unmarked")
        finally:
            del self._held[key]

    def _transactional_writes(self, request) -> Iterator[tuple[TopicPartition, RecordBatch, PartitionTransactions]]:
        """(partition, batch, its PartitionTransactions) of each transactional batch of a Produce
        request for a partition this node leads."""
        for topic_data in request.topic_data:
            name = topic_data.get("name") or self.broker.image.topics_by_id.get(topic_data.get("topic_id"))
            for partition_data in topic_data.partition_data:
                batch = _single_batch(partition_data.records)
                if batch is None or not batch.is_transactional or name is None:
                    continue
                topic_partition = TopicPartition(name, partition_data.index)
                try:
                    transactions = self.partition_transactions(topic_partition)
                except KafkaError:
                    continue  # not the leader: the append says so
                yield topic_partition, batch, transactions

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


def _single_batch(records: bytes | None) -> RecordBatch | None:
    """The produced batch, if the bytes hold one v2 batch; anything else is left to validation."""
    batches = list(iter_batches(memoryview(records or b"")))
    return batches[0] if len(batches) == 1 and isinstance(batches[0], RecordBatch) else None
