"""Refinement: the storage Log, driven in lock-step with the spec's log model.

Every rule applies one action of spec.models.log to the model state and the matching call
to a real Log in a temporary directory (real segment files). After every step the Log's
observable state (log start offset, log end offset, the records a read returns) must map
onto the model state, and every invariant of the model must hold. The high watermark is
the replication layer's, so the machine keeps it on the model side and passes it to reads
as `max_offset`, as the broker does, and moves it only to batch boundaries. Retention and DeleteRecords must only ever move the
log start to where the model allows: never above the high watermark.

Budget: KSPEC_SPEC_PROFILE=long (nightly, `make bench`) runs far more and longer programs
than the default CI profile.
"""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from reference.protocol.errors import KafkaError
from reference.protocol.records import Record, build_batch, iter_batches
from reference.storage import Log, LogConfig
from spec.models import log as model
from spec.model import first_step_violation, first_violation

LONG = os.environ.get("KSPEC_SPEC_PROFILE") == "long"
CONFIG = LogConfig(segment_bytes=400, index_interval_bytes=64, retention_bytes=900, retention_ms=-1)
BATCH_RECORDS_MAX = 3
READ_BYTES_MAX = 64 * 1024


def encode_batch(values: range, now_ms: int) -> bytes:
    return build_batch([Record(0, now_ms, None, b"v%d" % v) for v in values])


def stored_values(log: Log, high_watermark: int | None = None) -> list[tuple[int, int]]:
    """(offset, value) of every record a reader gets from the log start, below `high_watermark`."""
    offset, found = log.log_start_offset, []
    limit = log.log_end_offset if high_watermark is None else high_watermark
    while offset < limit:
        info = log.read(offset, READ_BYTES_MAX, max_offset=high_watermark)
        batches = list(iter_batches(info.records))
        if not batches:
            break
        for batch in batches:
            found.extend((r.offset, int(r.value[1:])) for r in batch.records() if r.offset >= offset)
        offset = batches[-1].next_offset
    return found


class StorageRefinement(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir_path = tempfile.mkdtemp(prefix="kspec-refinement-")
        self.now_ms = 0
        self.log = Log(os.path.join(self.dir_path, "topic-0"), CONFIG, now_ms=self.now_ms)
        self.state = model.LogModel(model.LogConfig()).initial_states()[0]
        self.spec = model.LogModel(model.LogConfig())
        self.batch_bases: list[int] = []  # where a truncation may cut: the storage cuts at batch starts

    def teardown(self) -> None:
        for segment in self.log.segments:
            segment.close()
        shutil.rmtree(self.dir_path, ignore_errors=True)

    def step(self, after: model.LogState) -> None:
        violation = first_step_violation(self.spec.step_invariants, self.state, after)
        assert violation is None, violation[1]
        self.state = after

    @rule(count=st.integers(1, BATCH_RECORDS_MAX))
    def append(self, count: int) -> None:
        self.now_ms += 1
        after = model.append(self.state, count)
        info = self.log.append_as_leader(encode_batch(range(self.state.next_value, after.next_value), self.now_ms),
                                         leader_epoch=0, now_ms=self.now_ms)
        assert (info.first_offset, info.last_offset) == (self.state.log_end_offset, after.log_end_offset - 1)
        self.batch_bases.append(info.first_offset)
        self.step(after)

    @precondition(lambda self: self.state.high_watermark < self.state.log_end_offset)
    @rule(data=st.data())
    def advance_high_watermark(self, data) -> None:
        """Followers fetch whole batches, so the high watermark moves from batch end to batch end
        (a read bounded by it returns no batch that straddles it, as in Kafka)."""
        ends = [b for b in self.batch_bases if b > self.state.high_watermark] + [self.state.log_end_offset]
        offset = data.draw(st.sampled_from(ends))
        self.step(model.advance_high_watermark(self.state, offset))

    @precondition(lambda self: self.state.log_start_offset < self.state.high_watermark)
    @rule(data=st.data())
    def delete_records_before(self, data) -> None:
        offset = data.draw(st.integers(self.state.log_start_offset + 1, self.state.high_watermark))
        assert self.log.delete_records_before(offset) == offset
        self.step(model.delete_records_before(self.state, offset))

    @precondition(lambda self: any(self.state.high_watermark <= b < self.state.log_end_offset
                                   and b >= self.state.log_start_offset for b in self.batch_bases))
    @rule(data=st.data())
    def truncate_to(self, data) -> None:
        cuts = [b for b in self.batch_bases
                if self.state.high_watermark <= b < self.state.log_end_offset and b >= self.state.log_start_offset]
        offset = data.draw(st.sampled_from(cuts))
        self.log.truncate_to(offset)
        self.batch_bases = [b for b in self.batch_bases if b < offset]
        self.step(model.truncate_to(self.state, offset))

    @rule()
    def enforce_retention(self) -> None:
        """Retention may only delete what the model's DeleteRecords could: below the HW."""
        self.now_ms += 1
        self.log.enforce_retention(self.now_ms, high_watermark=self.state.high_watermark)
        start = self.log.log_start_offset
        if start > self.state.log_start_offset:
            assert start <= self.state.high_watermark, (
                f"retention moved the log start to {start}, above the high watermark {self.state.high_watermark}")
            self.step(model.delete_records_before(self.state, start))

    @precondition(lambda self: model.can_fetch(self.state))
    @rule()
    def fetch(self) -> None:
        position = self.state.consumer_position
        after = model.fetch(self.state)
        if position < self.log.log_start_offset:
            try:
                self.log.read(position, READ_BYTES_MAX, max_offset=self.state.high_watermark)
            except KafkaError as error:
                assert error.code.name == "OFFSET_OUT_OF_RANGE"
            else:
                raise AssertionError(f"read below the log start {self.log.log_start_offset} succeeded")
        else:
            info = self.log.read(position, READ_BYTES_MAX, max_offset=self.state.high_watermark)
            records = [r for b in iter_batches(info.records) for r in b.records() if r.offset >= position]
            assert records, f"nothing readable at {position} below the high watermark"
            assert (records[0].offset, int(records[0].value[1:])) == tuple(after.consumed[-1])
        self.step(after)

    @rule(clean=st.booleans())
    def reopen(self, clean: bool) -> None:
        """A restart: after close() (clean shutdown) or without it (the process died)."""
        if clean:
            self.log.close()
        else:
            for segment in self.log.segments:
                segment.close()
        self.log = Log(os.path.join(self.dir_path, "topic-0"), CONFIG, now_ms=self.now_ms)

    @invariant()
    def log_maps_onto_the_model(self) -> None:
        state = self.state
        assert (self.log.log_start_offset, self.log.log_end_offset) == (state.log_start_offset,
                                                                        state.log_end_offset)
        assert stored_values(self.log) == [tuple(r) for r in state.records]
        assert all(offset < state.high_watermark for offset, _ in stored_values(self.log, state.high_watermark))
        violation = first_violation(self.spec.invariants, state)
        assert violation is None, violation[1]


StorageRefinement.TestCase.settings = settings(
    max_examples=400 if LONG else 40, stateful_step_count=80 if LONG else 30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestStorageRefinement = StorageRefinement.TestCase


def test_retention_never_deletes_above_the_high_watermark(tmp_path):
    """Found by StorageRefinement (long profile): with nothing committed yet (high watermark
    0), size retention deleted whole segments, moving the log start to 5 and destroying
    records no consumer could have read (RET-1: log start <= high watermark)."""
    config = LogConfig(segment_bytes=200, index_interval_bytes=64, retention_bytes=300, retention_ms=-1)
    log = Log(str(tmp_path / "topic-0"), config, now_ms=0)
    for value in range(12):
        log.append_as_leader(encode_batch(range(value, value + 1), value), leader_epoch=0, now_ms=value)
    high_watermark = 0
    try:
        log.enforce_retention(now_ms=100, high_watermark=high_watermark)
        assert log.log_start_offset <= high_watermark, f"log start {log.log_start_offset} above the high watermark"
    finally:
        for segment in log.segments:
            segment.close()
