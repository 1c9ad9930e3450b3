"""Transactions of one transactional.id: coordinator, producer epochs, markers, read_committed.

One transaction coordinator keeps the producer epoch and the transaction state of the
transactional id (KIP-98). Two producer instances share the id: c0 starts initialized;
InitProducerId from either bumps the epoch, which fences the other (a zombie keeps its
old epoch and may still send writes to partitions it had added). A producer begins a
transaction, adds partitions (AddPartitionsToTxn), and writes one record per added
partition; a write is in flight until it lands on its partition, at any later time and
in any order, so a write can land after its transaction ended. EndTxn writes PrepareCommit
or PrepareAbort, then the coordinator writes a marker to each added partition, one at a
time in any order, and completes. InitProducerId during an open transaction aborts it
with the new epoch. A partition appends a write unless its epoch is older than the
newest epoch the partition holds (the fence); a read_committed consumer reads below the
last stable offset and drops records whose transaction a marker aborted.

Records and markers carry the number of the coordinator transaction they belong to: a
history variable the brokers never look at, which the invariants use to say what went
wrong. Two switches re-create historical bugs:
  late_produce_joins_next_transaction  no epoch bump at EndTxn (before KIP-890 part 2): a
      write delayed past its transaction's marker lands with a still-valid epoch and joins
      the next transaction (KAFKA-17754)
  serve_aborted_to_read_committed      the consumer is not told which transactions aborted
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple

from spec.model import Action, Invariant

NO_EPOCH = -1
NO_TRANSACTION = -1
DATA, COMMIT, ABORT = "data", "commit", "abort"
OPEN = "open"  # a transaction's outcome before EndTxn (or a fencing InitProducerId) decides it
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT = (
    "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort")
ACCEPTS_ADD_PARTITIONS = frozenset({EMPTY, ONGOING, COMPLETE_COMMIT, COMPLETE_ABORT})  # else CONCURRENT_TRANSACTIONS
PRODUCERS = 2
TRANSACTION_BUGS = ("late-produce-joins-next-transaction", "serve-aborted-to-read-committed")  # the config's switches


class Entry(NamedTuple):
    kind: str          # DATA, or the marker's COMMIT / ABORT
    epoch: int         # the producer epoch it was written with
    transaction: int   # history: the coordinator transaction it belongs to


class Write(NamedTuple):
    producer: int
    partition: int
    epoch: int
    transaction: int


class Producer(NamedTuple):
    epoch: int
    in_transaction: bool
    transaction: int               # the coordinator's number for it, once a partition is added
    added: frozenset[int]
    written: frozenset[int]


class Coordinator(NamedTuple):
    producer_epoch: int
    state: str
    transaction: int               # the current or last transaction
    partitions: frozenset[int]     # added to the current transaction
    pending_markers: frozenset[int]


class TransactionsState(NamedTuple):
    coordinator: Coordinator
    outcomes: tuple[str, ...]      # history: per transaction OPEN, COMMIT or ABORT
    inits: int                     # InitProducerId calls so far
    producers: tuple[Producer, ...]
    in_flight: frozenset[Write]
    logs: tuple[tuple[Entry, ...], ...]
    positions: tuple[int, ...]     # the read_committed consumer's next offset per partition
    read: tuple[tuple[int, ...], ...]  # the transactions of the records it returned, per partition


@dataclass(frozen=True)
class TransactionsConfig:
    partitions: int = 2
    max_transactions: int = 2
    max_inits: int = 1
    late_produce_joins_next_transaction: bool = False
    serve_aborted_to_read_committed: bool = False


def partition_epoch(log: tuple[Entry, ...]) -> int:
    return max((entry.epoch for entry in log), default=NO_EPOCH)


def last_stable_offset(log: tuple[Entry, ...]) -> int:
    """The first offset of the open transaction (one producer id: at most one is open), else the log end."""
    offset = len(log)
    while offset > 0 and log[offset - 1].kind == DATA:
        offset -= 1
    return offset


def segments(log: tuple[Entry, ...]) -> Iterator[tuple[tuple[Entry, ...], Entry | None]]:
    """The partition's view of the producer's transactions: data records and the marker ending them."""
    data: list[Entry] = []
    for entry in log:
        if entry.kind == DATA:
            data.append(entry)
        else:
            yield tuple(data), entry
            data = []
    if data:
        yield tuple(data), None


def _replace_at(items: tuple, index: int, item) -> tuple:
    return items[:index] + (item,) + items[index + 1:]


class TransactionsModel:
    name = "transactions"

    def __init__(self, config: TransactionsConfig) -> None:
        if config.partitions < 1 or config.max_transactions < 1 or config.max_inits < 0:
            raise ValueError("partitions and transactions must be at least 1, InitProducerId calls 0 or more")
        self.config = config
        self.invariants = (
            Invariant("TXN-1", "nothing from a fenced epoch appended after the fence", self.no_append_after_fence),
            Invariant("TXN-1", "a late write never joins the next transaction", self.no_late_write_joins),
            Invariant("TXN-1", "one marker outcome for every partition of a transaction", self.one_outcome),
            Invariant("TXN-2", "read_committed returns only committed records", self.read_only_committed),
        )
        self.step_invariants = ()

    def initial_states(self) -> list[TransactionsState]:
        partitions = self.config.partitions
        ready = Producer(0, False, NO_TRANSACTION, frozenset(), frozenset())
        uninitialized = ready._replace(epoch=NO_EPOCH)
        return [TransactionsState(
            Coordinator(0, EMPTY, NO_TRANSACTION, frozenset(), frozenset()), (), 0,
            (ready,) + (uninitialized,) * (PRODUCERS - 1), frozenset(),
            ((),) * partitions, (0,) * partitions, ((),) * partitions)]

    def successors(self, state: TransactionsState) -> Iterator[tuple[Action, TransactionsState]]:
        coordinator = state.coordinator
        for c, producer in enumerate(state.producers):
            current = producer.epoch == coordinator.producer_epoch
            if state.inits < self.config.max_inits and coordinator.state in ACCEPTS_ADD_PARTITIONS:
                yield ("InitProducerId", c), self.init_producer_id(state, c)
            if producer.epoch == NO_EPOCH:
                continue
            if not producer.in_transaction and len(state.outcomes) < self.config.max_transactions:
                begun = producer._replace(in_transaction=True, transaction=NO_TRANSACTION,
                                          added=frozenset(), written=frozenset())
                yield ("Begin", c), self._with_producer(state, c, begun)
            if not producer.in_transaction:
                continue
            for p in range(self.config.partitions):
                if current and p not in producer.added and coordinator.state in ACCEPTS_ADD_PARTITIONS \
                        and (coordinator.state == ONGOING or len(state.outcomes) < self.config.max_transactions):
                    yield ("AddPartitionsToTxn", c, p), self.add_partition(state, c, p)
                if p in producer.added and p not in producer.written:
                    yield ("Produce", c, p), self.produce(state, c, p)
            owns = current and coordinator.state == ONGOING and producer.transaction == coordinator.transaction
            if owns:
                yield ("EndTxn", c, ABORT), self.end_transaction(state, c, ABORT)
                # commitTransaction flushes first: every write of the transaction has landed
                if not any(w.producer == c and w.transaction == producer.transaction for w in state.in_flight):
                    yield ("EndTxn", c, COMMIT), self.end_transaction(state, c, COMMIT)
        for write in sorted(state.in_flight):
            yield ("Land", *write), self.land(state, write)
        for p in sorted(coordinator.pending_markers):
            yield ("WriteTxnMarker", p), self.write_marker(state, p)
        for p, log in enumerate(state.logs):
            if last_stable_offset(log) > state.positions[p]:
                yield ("ReadCommitted", p), self.read_committed(state, p)

    def init_producer_id(self, state: TransactionsState, c: int) -> TransactionsState:
        """Bump the epoch; an open transaction is aborted with the new epoch (KIP-98 fencing)."""
        coordinator = state.coordinator
        epoch = coordinator.producer_epoch + 1
        if coordinator.state == ONGOING:
            coordinator = coordinator._replace(producer_epoch=epoch, state=PREPARE_ABORT,
                                               pending_markers=coordinator.partitions)
            state = state._replace(outcomes=_replace_at(state.outcomes, coordinator.transaction, ABORT))
        else:
            coordinator = coordinator._replace(producer_epoch=epoch)
        producer = Producer(epoch, False, NO_TRANSACTION, frozenset(), frozenset())
        state = state._replace(coordinator=coordinator, inits=state.inits + 1)
        return self._with_producer(state, c, producer)

    def add_partition(self, state: TransactionsState, c: int, p: int) -> TransactionsState:
        coordinator = state.coordinator
        if coordinator.state != ONGOING:
            coordinator = coordinator._replace(state=ONGOING, transaction=len(state.outcomes), partitions=frozenset())
            state = state._replace(outcomes=state.outcomes + (OPEN,))
        coordinator = coordinator._replace(partitions=coordinator.partitions | {p})
        producer = state.producers[c]
        producer = producer._replace(transaction=coordinator.transaction, added=producer.added | {p})
        return self._with_producer(state._replace(coordinator=coordinator), c, producer)

    def produce(self, state: TransactionsState, c: int, p: int) -> TransactionsState:
        producer = state.producers[c]
        write = Write(c, p, producer.epoch, producer.transaction)
        state = state._replace(in_flight=state.in_flight | {write})
        return self._with_producer(state, c, producer._replace(written=producer.written | {p}))

    def end_transaction(self, state: TransactionsState, c: int, outcome: str) -> TransactionsState:
        """PrepareCommit / PrepareAbort; since KIP-890 part 2 every EndTxn bumps the epoch, so the
        markers and the next transaction carry an epoch no write of this one has."""
        coordinator = state.coordinator
        epoch = coordinator.producer_epoch + (0 if self.config.late_produce_joins_next_transaction else 1)
        coordinator = coordinator._replace(producer_epoch=epoch, pending_markers=coordinator.partitions,
                                           state=PREPARE_COMMIT if outcome == COMMIT else PREPARE_ABORT)
        state = state._replace(coordinator=coordinator,
                               outcomes=_replace_at(state.outcomes, coordinator.transaction, outcome))
        producer = state.producers[c]._replace(epoch=epoch, in_transaction=False)
        return self._with_producer(state, c, producer)

    def land(self, state: TransactionsState, write: Write) -> TransactionsState:
        """The partition appends the write unless its epoch is fenced (INVALID_PRODUCER_EPOCH)."""
        log = state.logs[write.partition]
        state = state._replace(in_flight=state.in_flight - {write})
        if write.epoch < partition_epoch(log):
            return state
        entry = Entry(DATA, write.epoch, write.transaction)
        return state._replace(logs=_replace_at(state.logs, write.partition, log + (entry,)))

    def write_marker(self, state: TransactionsState, p: int) -> TransactionsState:
        coordinator = state.coordinator
        assert coordinator.state in (PREPARE_COMMIT, PREPARE_ABORT) and p in coordinator.pending_markers
        outcome = state.outcomes[coordinator.transaction]
        marker = Entry(outcome, coordinator.producer_epoch, coordinator.transaction)
        pending = coordinator.pending_markers - {p}
        completed = COMPLETE_COMMIT if coordinator.state == PREPARE_COMMIT else COMPLETE_ABORT
        coordinator = coordinator._replace(pending_markers=pending, state=coordinator.state if pending else completed)
        return state._replace(coordinator=coordinator, logs=_replace_at(state.logs, p, state.logs[p] + (marker,)))

    def read_committed(self, state: TransactionsState, p: int) -> TransactionsState:
        """Fetch with isolation.level=read_committed: below the LSO, without aborted transactions."""
        log = state.logs[p]
        stable = last_stable_offset(log)
        returned = []
        for offset in range(state.positions[p], stable):
            if log[offset].kind == DATA:
                marker = next(entry for entry in log[offset:] if entry.kind != DATA)  # below the LSO: ended
                if marker.kind == COMMIT or self.config.serve_aborted_to_read_committed:
                    returned.append(log[offset].transaction)
        return state._replace(positions=_replace_at(state.positions, p, stable),
                              read=_replace_at(state.read, p, state.read[p] + tuple(returned)))

    @staticmethod
    def _with_producer(state: TransactionsState, c: int, producer: Producer) -> TransactionsState:
        return state._replace(producers=_replace_at(state.producers, c, producer))

    @staticmethod
    def no_append_after_fence(state: TransactionsState) -> str | None:
        """Once a partition holds an epoch, nothing with an older one follows it (KIP-98 fencing)."""
        for p, log in enumerate(state.logs):
            for offset in range(1, len(log)):
                if log[offset].epoch < partition_epoch(log[:offset]):
                    return f"partition {p} appended epoch {log[offset].epoch} at offset {offset} " \
                           f"after epoch {partition_epoch(log[:offset])}"
        return None

    @staticmethod
    def no_late_write_joins(state: TransactionsState) -> str | None:
        """Every record belongs to the transaction whose marker ends it on its partition, or will:
        an open record joins the coordinator's transaction when that one still has a marker
        to write there (KIP-890, the KAFKA-17754 scenario)."""
        coordinator = state.coordinator
        for p, log in enumerate(state.logs):
            marker_due = p in (coordinator.partitions if coordinator.state == ONGOING else coordinator.pending_markers)
            for data, marker in segments(log):
                owners = {entry.transaction for entry in data}
                if marker is not None or marker_due:
                    owners.add(coordinator.transaction if marker is None else marker.transaction)
                if len(owners) > 1:
                    return f"partition {p} holds records of transactions {sorted(owners)} in one transaction"
        return None

    @staticmethod
    def one_outcome(state: TransactionsState) -> str | None:
        """Every marker of a transaction says what the coordinator decided for it."""
        for p, log in enumerate(state.logs):
            for entry in log:
                if entry.kind != DATA and entry.kind != state.outcomes[entry.transaction]:
                    return f"partition {p} ended transaction {entry.transaction} with {entry.kind}, " \
                           f"but the coordinator decided {state.outcomes[entry.transaction]}"
        return None

    @staticmethod
    def read_only_committed(state: TransactionsState) -> str | None:
        for p, transactions in enumerate(state.read):
            for t in transactions:
                if state.outcomes[t] != COMMIT:
                    return f"read_committed returned a record of transaction {t} from partition {p}, " \
                           f"which is {'still open' if state.outcomes[t] == OPEN else 'aborted'}"
        return None

    def canonical(self, state: TransactionsState) -> TransactionsState:
        return state  # the default configuration is exhausted in seconds without merging partition renamings

    def renamings(self, state: TransactionsState) -> tuple[TransactionsState, ...]:
        return (state,)

    def describe_action(self, action: Action) -> str:
        name, *rest = action
        if name == "Land":
            c, p, epoch, t = rest
            return f"c{c}'s write to partition {p} (epoch {epoch}, transaction {t}) lands"
        return {
            "InitProducerId": "c{} calls InitProducerId: the epoch is bumped, fencing older instances and aborting an open transaction",
            "Begin": "c{} begins a transaction",
            "AddPartitionsToTxn": "c{} adds partition {} to its transaction",
            "Produce": "c{} sends a write to partition {} (in flight)",
            "EndTxn": "c{} ends its transaction: EndTxn({})",
            "WriteTxnMarker": "the coordinator writes its marker to partition {}",
            "ReadCommitted": "a read_committed consumer fetches partition {}",
        }[name].format(*rest)

    def describe_state(self, state: TransactionsState) -> list[str]:
        coordinator = state.coordinator
        lines = [f"coordinator: epoch {coordinator.producer_epoch}, {coordinator.state} transaction "
                 f"{coordinator.transaction}, partitions {sorted(coordinator.partitions)}, markers pending "
                 f"{sorted(coordinator.pending_markers)}; outcomes {list(state.outcomes)}"]
        lines += [f"c{c}: epoch {p.epoch}, {'in transaction ' + str(p.transaction) if p.in_transaction else 'idle'}"
                  for c, p in enumerate(state.producers)]
        if state.in_flight:
            lines.append("in flight: " + ", ".join(f"c{w.producer}->p{w.partition} (epoch {w.epoch}, "
                                                   f"transaction {w.transaction})" for w in sorted(state.in_flight)))
        for p, log in enumerate(state.logs):
            entries = " ".join(f"{e.kind}(e{e.epoch},t{e.transaction})" for e in log) or "empty"
            lines.append(f"partition {p}: {entries}; LSO {last_stable_offset(log)}, read {list(state.read[p])}")
        return lines
