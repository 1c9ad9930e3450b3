"""A hypothesis state machine over one partition's transaction state (PartitionTransactions).

Two transactional producers write batches in numbered transactions; each write is verified
with the coordinator when it is sent (KIP-890 part 1) but may reach the partition late,
after the coordinator ended its transaction with a marker. Writes pass the idempotent
producer's sequence check first, as in the Log (a write out of sequence is refused). The coordinator commits or
aborts; a read_committed consumer reads below the last stable offset and drops what the
aborted-transaction index names. After every step:

  TXN-2  a read_committed consumer sees no record of an aborted or still open transaction
  TXN-1  once a committed transaction's marker is below the LSO, it sees every record of it
         (before that it may see the part below the LSO: another producer's open transaction
         can hold the LSO back)

Every historical switch of TransactionBugs must make the machine fail (the mutation check).
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, Record, RecordBatch, build_batch,
                                        build_control_batch)
from reference.transaction.partition import PartitionTransactions, TransactionBugs

LONG = os.environ.get("KSPEC_SPEC_PROFILE") == "long"
PRODUCERS = (1, 2)
PRODUCER_EPOCH = 0
IN_FLIGHT_MAX = 4


def machine_for(bugs: TransactionBugs):
    class Transactions(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.partition = PartitionTransactions(bugs)
            self.batches: list[tuple[int, RecordBatch]] = []   # (base offset, batch), the partition's log
            self.transaction = {p: 0 for p in PRODUCERS}         # each producer's current transaction number
            self.sequence = {p: 0 for p in PRODUCERS}
            self.appended_sequence = {p: -1 for p in PRODUCERS}  # the partition's producer state
            self.written = {p: False for p in PRODUCERS}         # has its current transaction written yet
            self.in_flight: list[tuple[RecordBatch, object]] = []
            self.outcome: dict[tuple[int, int], bool] = {}       # (producer, transaction) -> committed
            self.records: dict[tuple[int, int], list[int]] = {}  # (producer, transaction) -> offsets written
            self.markers: dict[tuple[int, int], int] = {}        # (producer, transaction) -> marker offset

        @property
        def log_end_offset(self) -> int:
            return len(self.batches)

        def _append(self, batch: RecordBatch) -> None:
            offset = self.log_end_offset
            self.batches.append((offset, batch))
            self.partition.on_append(batch, offset)

        @precondition(lambda self: len(self.in_flight) < IN_FLIGHT_MAX)
        @rule(producer=st.sampled_from(PRODUCERS))
        def send(self, producer: int) -> None:
            """A write in the producer's current transaction, verified as it is sent."""
            transaction = self.transaction[producer]
            value = b"%d:%d" % (producer, transaction)
            batch = RecordBatch(build_batch([Record(0, 0, None, value)], producer_id=producer,
                                            producer_epoch=PRODUCER_EPOCH, base_sequence=self.sequence[producer],
                                            is_transactional=True))
            self.sequence[producer] += 1
            guard = self.partition.start_verification(producer) if self.partition.needs_verification(producer) \
                else None
            self.in_flight.append((batch, guard))
            self.written[producer] = True

        @precondition(lambda self: self.in_flight)
        @rule(data=st.data())
        def deliver(self, data) -> None:
            """Any write in flight reaches the partition, possibly after its transaction ended."""
            batch, guard = self.in_flight.pop(data.draw(st.integers(0, len(self.in_flight) - 1)))
            if batch.base_sequence != self.appended_sequence[batch.producer_id] + 1:
                return  # OUT_OF_ORDER_SEQUENCE_NUMBER or a duplicate: the idempotent producer state (IDM-1)
            try:
                self.partition.check_transactional_append(batch, guard)
            except KafkaError as error:
                assert error.code == ErrorCode.INVALID_TXN_STATE
                return
            producer, transaction = (int(x) for x in batch.records()[0].value.split(b":"))
            self.records.setdefault((producer, transaction), []).append(self.log_end_offset)
            self.appended_sequence[producer] = batch.base_sequence
            self._append(batch)

        @precondition(lambda self: any(self.written.values()))
        @rule(data=st.data(), commit=st.booleans())
        def end_transaction(self, data, commit: bool) -> None:
            """The coordinator writes the marker; the producer moves on to its next transaction."""
            producer = data.draw(st.sampled_from([p for p in PRODUCERS if self.written[p]]))
            control = CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT
            self._append(RecordBatch(build_control_batch(control, producer_id=producer, producer_epoch=PRODUCER_EPOCH,
                                                         coordinator_epoch=0, timestamp_ms=0)))
            self.outcome[producer, self.transaction[producer]] = commit
            self.markers[producer, self.transaction[producer]] = self.log_end_offset - 1
            self.transaction[producer] += 1
            self.written[producer] = False

        def read_committed(self) -> list[tuple[int, int, int]]:
            """(offset, producer, transaction) of what a read_committed consumer returns."""
            stable = self.partition.last_stable_offset(self.log_end_offset)
            aborted = self.partition.aborted_transactions(0, stable)
            seen = []
            for offset, batch in self.batches[:stable]:
                if batch.is_control:
                    continue
                if any(a.producer_id == batch.producer_id and a.first_offset <= offset <= a.last_offset
                       for a in aborted):
                    continue
                producer, transaction = (int(x) for x in batch.records()[0].value.split(b":"))
                seen.append((offset, producer, transaction))
            return seen

        @invariant()
        def read_committed_sees_only_whole_committed_transactions(self) -> None:
            seen = self.read_committed()
            for offset, producer, transaction in seen:
                assert self.outcome.get((producer, transaction)) is True, (
                    f"TXN-2: read_committed returned offset {offset} of producer {producer}'s transaction "
                    f"{transaction}, which is {'aborted' if (producer, transaction) in self.outcome else 'open'}")
            stable = self.partition.last_stable_offset(self.log_end_offset)
            for key, marker in self.markers.items():
                if self.outcome[key] and marker < stable:
                    offsets = [offset for offset, producer, transaction in seen if (producer, transaction) == key]
                    assert offsets == self.records.get(key, []), f"TXN-1: transaction {key} seen in part: {offsets}"

    return Transactions


def profile(examples: int, shrink: bool = True) -> settings:
    return settings(max_examples=examples, stateful_step_count=30, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                    phases=tuple(Phase) if shrink else (Phase.explicit, Phase.generate))


def test_transactions_hold_with_late_writes():
    run_state_machine_as_test(machine_for(TransactionBugs()), settings=profile(1_000 if LONG else 40))


@pytest.mark.parametrize("switch", ["serve_aborted_to_read_committed", "late_produce_joins_next_transaction"])
def test_every_transaction_bug_switch_is_caught(switch):
    """Finding the violation is the point here, so the (slow) shrinking is skipped."""
    with pytest.raises(AssertionError, match="TXN-"):
        run_state_machine_as_test(machine_for(TransactionBugs(**{switch: True})), settings=profile(200, shrink=False))
