"""A hypothesis state machine driving Log against a list of records (the model).

Rules: append (plain and idempotent), retry the last idempotent batch, read from any offset,
roll, reopen after a clean close or a crash, truncate, DeleteRecords and size retention. After
every step the log's start and end offsets match the model; reads must return exactly the
model's records (ORD-1, IDM-1, RET-1)."""
from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from .conftest import make_batch, read_all
from reference.protocol.records import iter_batches
from reference.storage import Log, LogConfig

CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=100, retention_bytes=1_500, retention_ms=-1)
PRODUCER_ID = 9


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir_path = tempfile.mkdtemp(prefix="kspec-log-machine-")
        self.now_ms = 0
        self.log = Log(self.dir_path + "/t-0", CONFIG, now_ms=self.now_ms)
        self.batches: list[tuple[int, int]] = []  # (base offset, last offset) of each stored batch
        self.values: dict[int, bytes] = {}  # offset -> value, the model's records
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.next_sequence = 0
        self.idempotent: list[tuple[bytes, int, int]] = []  # (batch, first offset, last offset) still in the log

    def teardown(self) -> None:
        for segment in self.log.segments:
            segment.close()
        shutil.rmtree(self.dir_path, ignore_errors=True)

    def _appended(self, data: bytes) -> tuple[int, int]:
        info = self.log.append_as_leader(data, leader_epoch=0, now_ms=self.now_ms)
        assert info.first_offset == self.log_end_offset, (info, self.log_end_offset)
        (batch,) = iter_batches(data)
        for i, record in enumerate(batch.records()):
            self.values[info.first_offset + i] = record.value
        self.log_end_offset = info.last_offset + 1
        self.batches.append((info.first_offset, info.last_offset))
        return info.first_offset, info.last_offset

    @rule(count=st.integers(1, 5), value_bytes=st.integers(0, 150), tag=st.integers(0, 25), compression=st.sampled_from([0, 1, 3]))
    def append(self, count, value_bytes, tag, compression):
        self.now_ms += 1
        self._appended(make_batch(count, value_bytes=value_bytes, tag=tag, compression=compression, timestamp_ms=self.now_ms))

    @rule(count=st.integers(1, 4))
    def append_idempotent(self, count):
        data = make_batch(count, producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=self.next_sequence, tag=count)
        first, last = self._appended(data)
        self.next_sequence += count
        self.idempotent.append((data, first, last))

    @precondition(lambda self: self.idempotent)
    @rule()
    def retry_last_idempotent_batch(self):
        data, first, last = self.idempotent[-1]
        info = self.log.append_as_leader(data, leader_epoch=0, now_ms=self.now_ms)
        assert (info.first_offset, info.last_offset) == (first, last)

    @rule(data=st.data(), max_bytes=st.integers(1, 3_000))
    def read(self, data, max_bytes):
        offset = data.draw(st.integers(self.log_start_offset, self.log_end_offset))
        info = self.log.read(offset, max_bytes)
        batches = list(iter_batches(info.records))
        assert sum(b.size_bytes for b in batches) == len(info.records)
        if offset < self.log_end_offset:
            assert batches and batches[0].base_offset <= offset <= batches[0].last_offset
        for batch in batches:
            for record in batch.records():
                assert record.value == self.values[record.offset]

    @rule()
    def read_everything(self):
        records = read_all(self.log)
        assert [r.offset for r in records] == list(range(self.log_start_offset, self.log_end_offset))
        assert all(r.value == self.values[r.offset] for r in records)

    @rule()
    def roll(self):
        self.log.roll(self.now_ms)

    @rule(clean=st.booleans())
    def reopen(self, clean):
        if clean:
            self.log.close()
        else:
            for segment in self.log.segments:
                segment.close()
        self.log = Log(self.dir_path + "/t-0", CONFIG, now_ms=self.now_ms)

    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.integers(self.log_start_offset, self.log_end_offset))
        self.log.truncate_to(offset)
        self.batches = [(base, last) for base, last in self.batches if last < offset]
        if offset < self.log_end_offset:
            self.log_end_offset = self.batches[-1][1] + 1 if self.batches else 0
        if self.log_end_offset < self.log_start_offset:  # nothing readable left: start empty, no producer state
            self.log_end_offset = self.log_start_offset
            self.batches, self.idempotent = [], []
        self.values = {o: v for o, v in self.values.items() if o < self.log_end_offset}
        self.idempotent = [entry for entry in self.idempotent if entry[2] < self.log_end_offset]
        if self.idempotent:  # the producer's state rolls back with its batches
            (last,) = iter_batches(self.idempotent[-1][0])
            self.next_sequence = last.base_sequence + last.records_count

    @rule(data=st.data())
    def delete_records(self, data):
        offset = data.draw(st.integers(self.log_start_offset, self.log_end_offset))
        assert self.log.delete_records_before(offset) == offset
        self.log_start_offset = offset

    @rule()
    def enforce_retention(self):
        self.log.enforce_retention(self.now_ms, high_watermark=self.log_end_offset)  # all committed in this machine
        assert self.log.log_start_offset >= self.log_start_offset
        self.log_start_offset = self.log.log_start_offset

    @invariant()
    def offsets_match_the_model(self):
        assert (self.log.log_start_offset, self.log.log_end_offset) == (self.log_start_offset, self.log_end_offset)
        assert self.log.log_start_offset <= self.log.log_end_offset


LogMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
TestLogMachine = LogMachine.TestCase
