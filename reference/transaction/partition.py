"""The transactions of one partition: which are open, the last stable offset, which were aborted.

For every producer with an open transaction on this partition the leader keeps the offset of
the transaction's first batch. The last stable offset (LSO) is the first offset of the oldest
open transaction, or the high watermark when none is open: read_committed consumers read
below it only (TXN-2). A marker (a control batch, COMMIT or ABORT) closes the producer's
transaction; an ABORT adds an entry to the aborted-transaction index (Kafka's `.txnindex`:
producer id, first offset, last offset, and the LSO after it), which Fetch returns to
read_committed consumers so they drop the aborted batches.

KIP-890 part 1 closes the window in which a late write opens a transaction the coordinator
never heard of: the first transactional write of a producer to a partition must carry a
VerificationGuard, handed out when the leader started checking with the coordinator that
the partition is in the producer's transaction. A marker removes the producer's guard, so a
write verified before the marker and appended after it is refused. TransactionBugs switches
historical behaviour back on.

Each marker carries its coordinator's epoch (the leader epoch of the coordinator's
`__transaction_state` partition). A marker from an older coordinator epoch than the last one
this partition saw for that producer comes from a coordinator that has since been replaced,
and is refused with TRANSACTION_COORDINATOR_FENCED (KIP-98).

Sans-IO and in memory: `rebuild` replays a log's batches after a restart.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable

from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, ControlRecord, Record, RecordBatch


@dataclass(frozen=True)
class TransactionBugs:
    """Historical transaction bugs, re-created on request; the defaults are today's Kafka.

    late_produce_joins_next_transaction is Kafka before KIP-890 part 1 (3.6): a Produce delayed
    in the network or a broker's request queue, that its client gave up on (librdkafka aborts the
    transaction and bumps its epoch after a message timeout), reaches the leader after the
    transaction's ABORT marker; nothing ties it to the transaction it was sent in, so, epoch-valid
    and in sequence, it opens a transaction on the partition that the producer's next transaction
    commits (or aborts) with its own records: a write of an aborted transaction read as committed,
    an input counted twice by a consume-transform-produce application. A client never sends such
    a write after its transaction ended, so with the switch on the node's runtime also re-creates
    the delay, now and then (reference/runtime/transactions.py hold_late_produce)."""

    serve_aborted_to_read_committed: bool = False  # Fetch omits the aborted transactions (aborted reads)
    late_produce_joins_next_transaction: bool = False  # no KIP-890 verification: any epoch-valid write opens a transaction


@dataclass(frozen=True)
class AbortedTxn:
    """One entry of the aborted-transaction index."""

    producer_id: int
    first_offset: int
    last_offset: int  # the offset of the ABORT marker
    last_stable_offset: int


class VerificationGuard:
    """An identity token: equal only to itself (KIP-890 part 1)."""

    __slots__ = ()


@dataclass
class PartitionTransactions:
    bugs: TransactionBugs = field(default_factory=TransactionBugs)
    ongoing: dict[int, int] = field(default_factory=dict)  # producer id -> first offset of its open transaction
    aborted: list[AbortedTxn] = field(default_factory=list)  # by last offset
    guards: dict[int, VerificationGuard] = field(default_factory=dict)  # producer id -> guard
    coordinator_epochs: dict[int, int] = field(default_factory=dict)  # producer id -> epoch of its last marker

    def first_unstable_offset(self) -> int | None:
        return min(self.ongoing.values(), default=None)

    def last_stable_offset(self, high_watermark: int) -> int:
        first_unstable = self.first_unstable_offset()
        return high_watermark if first_unstable is None else min(first_unstable, high_watermark)

    # -- writes -------------------------------------------------------------------------

    def needs_verification(self, producer_id: int) -> bool:
        """True for a transactional write of a producer with no open transaction here."""
        return not self.bugs.late_produce_joins_next_transaction and producer_id not in self.ongoing

    def start_verification(self, producer_id: int) -> VerificationGuard:
        """Called before asking the coordinator; the answer is good only while this guard lives."""
        return self.guards.setdefault(producer_id, VerificationGuard())

    def check_transactional_append(self, batch: RecordBatch, guard: VerificationGuard | None) -> None:
        """Raise INVALID_TXN_STATE for a first write of a transaction whose verification is
        missing or stale (a marker came in between)."""
        assert batch.is_transactional and not batch.is_control
        if not self.needs_verification(batch.producer_id):
            return
        if guard is None or self.guards.get(batch.producer_id) is not guard:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             f"producer {batch.producer_id}: the transaction was not verified with its coordinator, "
                             "or it ended since (KIP-890)")

    def check_marker(self, producer_id: int, coordinator_epoch: int) -> None:
        """Raise TRANSACTION_COORDINATOR_FENCED for a marker from a replaced coordinator."""
        if coordinator_epoch < self.coordinator_epochs.get(producer_id, coordinator_epoch):
            raise KafkaError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                             f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                             f"after one from epoch {self.coordinator_epochs[producer_id]}")

    def on_append(self, batch: RecordBatch, base_offset: int) -> None:
        """Record a batch appended at `base_offset`, a write from a client or a marker."""
        if not batch.is_transactional:
            return
        producer_id = batch.producer_id
        if not batch.is_control:
            self.ongoing.setdefault(producer_id, base_offset)
            self.guards.pop(producer_id, None)
            return
        (record,) = batch.records()
        marker = ControlRecord.from_record(record)
        self.guards.pop(producer_id, None)
        self.coordinator_epochs[producer_id] = max(marker.coordinator_epoch,
                                                   self.coordinator_epochs.get(producer_id, marker.coordinator_epoch))
        first_offset = self.ongoing.pop(producer_id, None)
        if marker.control_type == CONTROL_TYPE_ABORT and first_offset is not None:
            last_stable_offset = self.first_unstable_offset()
            self.aborted.append(AbortedTxn(producer_id, first_offset, base_offset,
                                           base_offset + 1 if last_stable_offset is None else last_stable_offset))
        assert all(a.last_offset <= b.last_offset for a, b in zip(self.aborted, self.aborted[1:]))

    def rebuild(self, batches: Iterable[RecordBatch]) -> None:
        """Replay a log's batches in offset order (open transactions and aborted index)."""
        assert not self.ongoing and not self.aborted
        for batch in batches:
            if isinstance(batch, RecordBatch) and batch.producer_id >= 0:
                self.on_append(batch, batch.base_offset)
        self.guards.clear()

    # -- reads --------------------------------------------------------------------------

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of [fetch_offset, upper_bound_offset)
        must know about: those whose records overlap that range."""
        if self.bugs.serve_aborted_to_read_committed:
            return []
        start = bisect.bisect_left([a.last_offset for a in self.aborted], fetch_offset)
        return [a for a in self.aborted[start:] if a.first_offset < upper_bound_offset]


def committed_records(batches: Iterable) -> list[Record]:
    """The records of a log that no transaction aborted, in log order, without markers: what a
    coordinator replays from its internal topic (records of a transaction still open are left out)."""
    out: list[Record] = []
    open_records: dict[int, list[Record]] = {}
    for batch in batches:
        if isinstance(batch, RecordBatch) and batch.is_transactional:
            if batch.is_control:
                (marker,) = batch.records()
                kept = open_records.pop(batch.producer_id, [])
                if ControlRecord.from_record(marker).control_type == CONTROL_TYPE_COMMIT:
                    out += kept
            else:
                open_records.setdefault(batch.producer_id, []).extend(batch.records())
        else:
            out += batch.records()
    return out
