"""Refinement: the storage Log's idempotent producer state, driven with the idempotence model.

Rules are the model's actions (send, deliver in order or retry, acknowledge) plus broker
restarts; a delivery is a real append_as_leader of a batch with the producer id and the
batch's sequence. After each step the sequences the Log holds must be exactly the model's
log; a delivery the model appends must be appended at the log end, one it treats as a
duplicate must be answered with the original offset, and a gap must be refused with
OUT_OF_ORDER_SEQUENCE_NUMBER. IDM-1 and ORD-2 must hold throughout, across restarts.

The long profile of this machine once found the model too permissive: it let the producer
send a sixth batch while the first was unanswered, which the broker (like Kafka, keeping
five batches per producer) cannot recognise as a duplicate; the model's send window now
counts from the oldest unanswered batch (test_a_retry_beyond_five_batches_is_not_recognised).
"""
from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import Record, build_batch, iter_batches
from reference.storage import Log, LogConfig
from spec.model import first_violation
from spec.models import idempotence as model

LONG = os.environ.get("KSPEC_SPEC_PROFILE") == "long"
PRODUCER_ID = 7
PRODUCER_EPOCH = 0
BATCHES_MAX = 12
CONFIG = LogConfig(segment_bytes=300, index_interval_bytes=64, retention_ms=-1)


def batch_for(sequence: int) -> bytes:
    return build_batch([Record(0, 1_000 + sequence, None, b"s%d" % sequence)], producer_id=PRODUCER_ID,
                       producer_epoch=PRODUCER_EPOCH, base_sequence=sequence)


class ProducerStateRefinement(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir_path = tempfile.mkdtemp(prefix="kspec-producer-refinement-")
        self.spec = model.IdempotenceModel(model.IdempotenceConfig(records=BATCHES_MAX))
        self.state = self.spec.initial_states()[0]
        self.log = self._open()

    def _open(self) -> Log:
        return Log(os.path.join(self.dir_path, "topic-0"), CONFIG, now_ms=0)

    def teardown(self) -> None:
        for segment in self.log.segments:
            segment.close()
        shutil.rmtree(self.dir_path, ignore_errors=True)

    @precondition(lambda self: self.state.next_sequence < BATCHES_MAX
                  and model.may_send(self.state, model.MAX_IN_FLIGHT_REQUESTS))
    @rule()
    def send(self) -> None:
        self.state = model.send(self.state)

    @precondition(lambda self: any(s <= self.state.delivered for s in self.state.in_flight))
    @rule(data=st.data())
    def deliver(self, data) -> None:
        """The first delivery of the next batch, or a retry of any batch still in flight."""
        sequence = data.draw(st.sampled_from(sorted(s for s in self.state.in_flight if s <= self.state.delivered)))
        after = model.deliver(self.state, sequence, deduplicate=True)
        end_before = self.log.log_end_offset
        try:
            info = self.log.append_as_leader(batch_for(sequence), leader_epoch=0, now_ms=0)
        except KafkaError as error:
            assert after.log == self.state.log and sequence not in self.state.log, (sequence, error)
            assert error.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, error
        else:
            if after.log != self.state.log:
                assert info.first_offset == end_before, "an accepted batch goes at the log end"
            else:
                assert sequence in self.state.log, f"batch {sequence} accepted out of order"
                assert info.first_offset == self.state.log.index(sequence), "a duplicate gets its original offset"
                assert self.log.log_end_offset == end_before, "a duplicate is not appended"
        self.state = after

    @precondition(lambda self: any(s in self.state.log for s in self.state.in_flight))
    @rule(data=st.data())
    def acknowledge(self, data) -> None:
        sequence = data.draw(st.sampled_from(sorted(s for s in self.state.in_flight if s in self.state.log)))
        self.state = model.acknowledge(self.state, sequence)

    @rule(clean=st.booleans())
    def restart_broker(self, clean: bool) -> None:
        """Producer state must come back from the snapshot and the replayed batches."""
        if clean:
            self.log.close()
        else:
            for segment in self.log.segments:
                segment.close()
        self.log = self._open()

    @invariant()
    def log_maps_onto_the_model(self) -> None:
        offset, sequences = 0, []
        while offset < self.log.log_end_offset:
            batches = list(iter_batches(self.log.read(offset, 1 << 20).records))
            sequences.extend(b.base_sequence for b in batches)
            offset = batches[-1].next_offset
        assert tuple(sequences) == self.state.log
        violation = first_violation(self.spec.invariants, self.state)
        assert violation is None, violation[1]


ProducerStateRefinement.TestCase.settings = settings(
    max_examples=300 if LONG else 30, stateful_step_count=80 if LONG else 40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestProducerStateRefinement = ProducerStateRefinement.TestCase


def test_a_retry_beyond_five_batches_is_not_recognised(tmp_path):
    """The broker dedups against the last five batches only, so the producer must never be
    more than five batches ahead of an unanswered one: the model's window."""
    log = Log(str(tmp_path / "topic-0"), CONFIG, now_ms=0)
    try:
        for sequence in range(6):
            log.append_as_leader(batch_for(sequence), leader_epoch=0, now_ms=0)
        try:
            log.append_as_leader(batch_for(0), leader_epoch=0, now_ms=0)
        except KafkaError as error:
            assert error.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        else:
            raise AssertionError("a retry six batches back was taken for a new or duplicate batch")
        state = model.IdempotenceState(6, frozenset({0}), 6, tuple(range(6)), 5)
        assert not model.may_send(state, model.MAX_IN_FLIGHT_REQUESTS)
    finally:
        for segment in log.segments:
            segment.close()
