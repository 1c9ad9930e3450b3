"""The transaction coordinator: every transactional id of this broker, as a state machine.

A transactional id maps to a producer id and epoch (InitProducerId), collects the partitions
of its current transaction (AddPartitionsToTxn, AddOffsetsToTxn) and ends it (EndTxn) in two
phases: PrepareCommit/PrepareAbort is written to `__transaction_state`, then the markers are
written to every partition of the transaction, then CompleteCommit/CompleteAbort. Every
change is a record (records.py) returned in `TxnEffects`; the caller appends the records
before it answers, writes the markers, and calls `complete` when all are written. `replay`
rebuilds the state from the log, and `pending_markers` says which completions a new
coordinator must resume (failover).

The legal transitions are data (VALID_PREVIOUS_STATES), checked on every change.
Fencing (KIP-98): InitProducerId bumps the epoch, so an older instance gets PRODUCER_FENCED;
an ongoing transaction of the fenced instance is aborted under the new epoch
(PrepareEpochFence). A timed-out transaction is aborted the same way. KIP-360: a producer
that already has an id may ask to bump its own epoch and retry that request safely.
KIP-890 part 2 (transaction version 2) bumps the epoch at every EndTxn, so a transaction is
identified by (producer id, epoch) and nothing from one can join the next.

Sans-IO: time comes in as `now_ms`, producer ids from the `allocate_producer_id` callable.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from reference.protocol.errors import ErrorCode
from reference.transaction.records import (
    TransactionLogValue, TransactionState, decode_key, decode_value, encode_key, encode_value, partition_for,
)

S = TransactionState
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
PRODUCER_EPOCH_MAX = (1 << 15) - 1  # Short.MAX_VALUE: an id whose epoch would pass it gets a new id
TRANSACTION_VERSION_1, TRANSACTION_VERSION_2 = 1, 2
END_TXN_TRANSACTION_VERSION_2 = 5  # EndTxn v5+ means the client uses transaction version 2 (KIP-890)

VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
PREPARE_STATES = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE})
COMPLETE_STATES = frozenset({S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


@dataclass(frozen=True)
class TransactionCoordinatorConfig:
    transaction_state_log_num_partitions: int = 8  # Kafka: 50; one node keeps every partition open
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_epoch: int  # the epoch before the last bump: a retried bump (KIP-360) is recognised by it
    transaction_timeout_ms: int
    state: TransactionState
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_timestamp_ms: int = -1
    last_update_timestamp_ms: int = -1
    transaction_version: int = TRANSACTION_VERSION_1

    def transition(self, state: TransactionState, now_ms: int) -> None:
        assert self.state in VALID_PREVIOUS_STATES[state], f"{self.transactional_id}: {self.state.name} -> {state.name}"
        self.state = state
        self.last_update_timestamp_ms = now_ms

    def log_value(self) -> TransactionLogValue:
        return TransactionLogValue(self.producer_id, self.producer_epoch, self.transaction_timeout_ms, self.state,
                                   frozenset(self.partitions), self.last_update_timestamp_ms, self.start_timestamp_ms)


@dataclass(frozen=True)
class TxnStateRecord:
    """One record for a partition of __transaction_state."""

    partition: int
    key: bytes
    value: bytes


@dataclass(frozen=True)
class TxnMarkers:
    """The markers to write for one ended transaction (a WriteTxnMarkers entry)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: frozenset[tuple[str, int]]


@dataclass
class TxnEffects:
    error: ErrorCode = ErrorCode.NONE
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    records: list[TxnStateRecord] = field(default_factory=list)
    markers: list[TxnMarkers] = field(default_factory=list)


class TransactionCoordinator:
    def __init__(self, config: TransactionCoordinatorConfig, allocate_producer_id: Callable[[], int],
                 now_ms: int) -> None:
        self.config = config
        self.allocate_producer_id = allocate_producer_id
        self.transactions: dict[str, TransactionMetadata] = {}
        self.coordinator_epochs: dict[int, int] = {}  # __transaction_state partition -> its leader epoch
        self._last_timeout_check_ms = now_ms

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.transaction_state_log_num_partitions)

    # -- InitProducerId -----------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int, expected_producer_id: int,
                         expected_producer_epoch: int, now_ms: int) -> TxnEffects:
        """Give the id its producer id and a new epoch, fencing every older instance."""
        if not transactional_id:
            return TxnEffects(ErrorCode.INVALID_REQUEST)
        if not 0 < transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
            return TxnEffects(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        metadata = self.transactions.get(transactional_id)
        if metadata is None:
            metadata = TransactionMetadata(transactional_id, self.allocate_producer_id(), NO_PRODUCER_EPOCH,
                                           NO_PRODUCER_EPOCH, transaction_timeout_ms, S.EMPTY)
            self.transactions[transactional_id] = metadata
        if metadata.state in PREPARE_STATES:
            return TxnEffects(ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected_producer_id != NO_PRODUCER_ID:  # KIP-360: the client asks to bump its own epoch
            if (expected_producer_id, expected_producer_epoch) == (metadata.producer_id, metadata.last_producer_epoch) \
                    and metadata.state == S.EMPTY:
                return TxnEffects(producer_id=metadata.producer_id, producer_epoch=metadata.producer_epoch)  # a retry
            if (expected_producer_id, expected_producer_epoch) != (metadata.producer_id, metadata.producer_epoch):
                return TxnEffects(ErrorCode.PRODUCER_FENCED)
        effects = TxnEffects()
        if metadata.state == S.ONGOING:
            # The previous instance left a transaction open: abort it under a fenced epoch; the
            # client retries on CONCURRENT_TRANSACTIONS and gets its epoch once the abort is complete.
            self._bump_epoch(metadata)
            metadata.transition(S.PREPARE_EPOCH_FENCE, now_ms)
            self._prepare(metadata, committed=False, now_ms=now_ms, effects=effects)
            effects.error = ErrorCode.CONCURRENT_TRANSACTIONS
            return effects
        self._bump_epoch(metadata)
        metadata.transaction_timeout_ms = transaction_timeout_ms
        metadata.partitions.clear()
        metadata.start_timestamp_ms = -1
        metadata.transaction_version = TRANSACTION_VERSION_1
        metadata.transition(S.EMPTY, now_ms)
        self._write(metadata, effects)
        effects.producer_id, effects.producer_epoch = metadata.producer_id, metadata.producer_epoch
        return effects

    def _bump_epoch(self, metadata: TransactionMetadata) -> None:
        if metadata.producer_epoch >= PRODUCER_EPOCH_MAX - 1:
            metadata.producer_id = self.allocate_producer_id()
            metadata.last_producer_epoch, metadata.producer_epoch = NO_PRODUCER_EPOCH, 0
        else:
            metadata.last_producer_epoch = metadata.producer_epoch
            metadata.producer_epoch += 1
        assert 0 <= metadata.producer_epoch < PRODUCER_EPOCH_MAX

    # -- AddPartitionsToTxn, AddOffsetsToTxn, verification --------------------------------

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[tuple[str, int]], now_ms: int,
                       transaction_version: int = TRANSACTION_VERSION_1) -> TxnEffects:
        """Add partitions to the ongoing transaction, starting one if needed."""
        metadata, error = self._check_producer(transactional_id, producer_id, producer_epoch)
        if error != ErrorCode.NONE:
            return TxnEffects(error)
        assert metadata is not None
        if metadata.state in PREPARE_STATES:
            return TxnEffects(ErrorCode.CONCURRENT_TRANSACTIONS)
        effects = TxnEffects(producer_id=metadata.producer_id, producer_epoch=metadata.producer_epoch)
        if metadata.state == S.ONGOING and set(partitions) <= metadata.partitions:
            return effects
        if metadata.state != S.ONGOING:  # a new transaction: the last one's partitions are done
            metadata.partitions.clear()
            metadata.start_timestamp_ms = now_ms
            metadata.transaction_version = transaction_version
        metadata.partitions |= set(partitions)
        metadata.transition(S.ONGOING, now_ms)
        self._write(metadata, effects)
        return effects

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """AddPartitionsToTxn verify_only (KIP-890 part 1): is each partition in the ongoing
        transaction of exactly this producer id and epoch? Nothing is written."""
        metadata, error = self._check_producer(transactional_id, producer_id, producer_epoch)
        if error == ErrorCode.NONE and metadata is not None and metadata.state in PREPARE_STATES:
            error = ErrorCode.CONCURRENT_TRANSACTIONS
        result = {}
        for partition in partitions:
            if error != ErrorCode.NONE:
                result[partition] = error
            elif metadata.state == S.ONGOING and partition in metadata.partitions:
                result[partition] = ErrorCode.NONE
            else:
                result[partition] = ErrorCode.INVALID_TXN_STATE
        return result

    def _check_producer(self, transactional_id: str, producer_id: int,
                        producer_epoch: int) -> tuple[TransactionMetadata | None, ErrorCode]:
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return metadata, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if metadata.producer_epoch != producer_epoch:
            return metadata, ErrorCode.PRODUCER_FENCED
        return metadata, ErrorCode.NONE

    # -- EndTxn -------------------------------------------------------------------------

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool,
                        now_ms: int) -> TxnEffects:
        """EndTxn: prepare the commit or abort; markers follow, then `complete`.
        A retried EndTxn of a transaction that is already ending gets the same answer."""
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return TxnEffects(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        wanted_prepare = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
        wanted_complete = S.COMPLETE_COMMIT if committed else S.COMPLETE_ABORT
        retry_epoch = metadata.last_producer_epoch if metadata.transaction_version == TRANSACTION_VERSION_2 \
            else metadata.producer_epoch  # version 2 bumped the epoch when it prepared
        if producer_epoch == retry_epoch and metadata.state in (wanted_prepare, wanted_complete) \
                and retry_epoch != metadata.producer_epoch:
            return TxnEffects(producer_id=metadata.producer_id, producer_epoch=metadata.producer_epoch)
        if producer_epoch != metadata.producer_epoch:
            return TxnEffects(ErrorCode.PRODUCER_FENCED)
        if metadata.state == wanted_prepare:
            return TxnEffects(ErrorCode.CONCURRENT_TRANSACTIONS)
        if metadata.state == wanted_complete:
            return TxnEffects(producer_id=metadata.producer_id, producer_epoch=metadata.producer_epoch)
        if metadata.state != S.ONGOING:
            return TxnEffects(ErrorCode.INVALID_TXN_STATE)
        effects = TxnEffects()
        if metadata.transaction_version == TRANSACTION_VERSION_2:
            self._bump_epoch(metadata)  # KIP-890 part 2: the next transaction has a new epoch
        self._prepare(metadata, committed, now_ms, effects)
        effects.producer_id, effects.producer_epoch = metadata.producer_id, metadata.producer_epoch
        return effects

    def _prepare(self, metadata: TransactionMetadata, committed: bool, now_ms: int, effects: TxnEffects) -> None:
        metadata.transition(S.PREPARE_COMMIT if committed else S.PREPARE_ABORT, now_ms)
        self._write(metadata, effects)
        effects.markers.append(self._markers(metadata))

    def _markers(self, metadata: TransactionMetadata) -> TxnMarkers:
        assert metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
        return TxnMarkers(metadata.transactional_id, metadata.producer_id, metadata.producer_epoch,
                          metadata.state == S.PREPARE_COMMIT,
                          self.coordinator_epochs.get(self.partition_for(metadata.transactional_id), 0),
                          frozenset(metadata.partitions))

    def complete(self, markers: TxnMarkers, now_ms: int) -> TxnEffects:
        """Every marker of `markers` is written: record CompleteCommit or CompleteAbort."""
        metadata = self.transactions.get(markers.transactional_id)
        effects = TxnEffects()
        if metadata is None or self._markers_if_pending(metadata) != markers:
            return effects  # already completed (a resumed completion racing the original)
        metadata.transition(S.COMPLETE_COMMIT if markers.committed else S.COMPLETE_ABORT, now_ms)
        self._write(metadata, effects)
        effects.producer_id, effects.producer_epoch = metadata.producer_id, metadata.producer_epoch
        return effects

    def _markers_if_pending(self, metadata: TransactionMetadata) -> TxnMarkers | None:
        return self._markers(metadata) if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT) else None

    def pending_markers(self) -> list[TxnMarkers]:
        """Transactions prepared but not completed, e.g. by a coordinator that failed: resume them."""
        return [markers for metadata in self.transactions.values()
                if (markers := self._markers_if_pending(metadata)) is not None]

    # -- timers -------------------------------------------------------------------------

    def next_deadline_ms(self) -> int:
        """When tick next looks for timed-out transactions: Kafka checks every
        transaction.abort.timed.out.transaction.cleanup.interval.ms."""
        return self._last_timeout_check_ms + self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms

    def tick(self, now_ms: int) -> TxnEffects:
        """Abort transactions open longer than their transaction.timeout.ms, fencing the producer."""
        effects = TxnEffects()
        if now_ms - self._last_timeout_check_ms < self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms:
            return effects
        self._last_timeout_check_ms = now_ms
        for metadata in self.transactions.values():
            if metadata.state == S.ONGOING and now_ms - metadata.start_timestamp_ms > metadata.transaction_timeout_ms:
                self._bump_epoch(metadata)
                metadata.transition(S.PREPARE_EPOCH_FENCE, now_ms)
                self._prepare(metadata, committed=False, now_ms=now_ms, effects=effects)
        return effects

    # -- operators ----------------------------------------------------------------------

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          duration_ms_min: int = -1, now_ms: int = 0) -> list[dict]:
        """ListTransactions: every id, optionally filtered by state name, producer id, and
        how long the transaction has been open (KIP-994)."""
        states, producer_ids = set(states), set(producer_ids)
        return [{"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                 "transaction_state": m.state.display_name}
                for m in sorted(self.transactions.values(), key=lambda m: m.transactional_id)
                if (not states or m.state.display_name in states) and (not producer_ids or m.producer_id in producer_ids)
                and (duration_ms_min < 0 or (m.state == S.ONGOING and now_ms - m.start_timestamp_ms >= duration_ms_min))]

    def describe_transaction(self, transactional_id: str) -> dict:
        metadata = self.transactions.get(transactional_id)
        if metadata is None:
            return {"error_code": ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, "transactional_id": transactional_id,
                    "transaction_state": "", "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                    "producer_id": NO_PRODUCER_ID, "producer_epoch": NO_PRODUCER_EPOCH, "topics": []}
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(metadata.partitions):
            by_topic.setdefault(topic, []).append(partition)
        return {"error_code": ErrorCode.NONE, "transactional_id": transactional_id,
                "transaction_state": metadata.state.display_name,
                "transaction_timeout_ms": metadata.transaction_timeout_ms,
                "transaction_start_time_ms": metadata.start_timestamp_ms,
                "producer_id": metadata.producer_id, "producer_epoch": metadata.producer_epoch,
                "topics": [{"topic": topic, "partitions": partitions} for topic, partitions in by_topic.items()]}

    # -- log ----------------------------------------------------------------------------

    def _write(self, metadata: TransactionMetadata, effects: TxnEffects) -> None:
        effects.records.append(TxnStateRecord(self.partition_for(metadata.transactional_id),
                                              encode_key(metadata.transactional_id), encode_value(metadata.log_value())))

    def load(self, partition: int, coordinator_epoch: int, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Become the coordinator of a `__transaction_state` partition: replay its records (key,
        value) in log order under the partition's leader epoch, the coordinator epoch its markers carry."""
        assert partition not in self.coordinator_epochs, partition
        self.coordinator_epochs[partition] = coordinator_epoch
        for key, value in records:
            assert self.partition_for(decode_key(key)) == partition
            self.replay(key, value)

    def unload(self, partition: int) -> None:
        """Stop coordinating a partition (leadership moved, or its log must be re-read)."""
        del self.coordinator_epochs[partition]
        for transactional_id in [t for t in self.transactions if self.partition_for(t) == partition]:
            del self.transactions[transactional_id]

    def replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one __transaction_state record, in log order (load and failover)."""
        transactional_id = decode_key(key)
        if value is None:
            self.transactions.pop(transactional_id, None)
            return
        decoded = decode_value(value)
        previous = self.transactions.get(transactional_id)
        last_epoch = previous.producer_epoch if previous and previous.producer_epoch != decoded.producer_epoch \
            else (previous.last_producer_epoch if previous else NO_PRODUCER_EPOCH)
        self.transactions[transactional_id] = TransactionMetadata(
            transactional_id, decoded.producer_id, decoded.producer_epoch, last_epoch, decoded.transaction_timeout_ms,
            decoded.state, set(decoded.partitions), decoded.start_timestamp_ms, decoded.last_update_timestamp_ms)
