"""One partition's log as consumers see it: offsets, high watermark, log start, one consumer.

A leader appends batches; the high watermark moves up as followers catch up; DeleteRecords
and retention move the log start offset up (never past the high watermark); a follower may
truncate its uncommitted suffix (never below the high watermark); a consumer reads in offset
order below the high watermark and, when its position fell below the log start, resets to
it (auto.offset.reset=earliest). The same action functions drive the storage Log in
tests/spec/test_refinement_storage.py, so this model is also the storage's specification.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple

from spec.model import Action, Invariant, StepInvariant

BATCH_RECORDS_MAX = 2


class LogRecord(NamedTuple):
    offset: int
    value: int


class LogState(NamedTuple):
    log_start_offset: int
    high_watermark: int
    records: tuple[LogRecord, ...]          # from the log start offset to the log end
    next_value: int                         # values are unique, so a record names itself
    consumer_position: int
    consumed: tuple[LogRecord, ...]         # every record the consumer returned, in order

    @property
    def log_end_offset(self) -> int:
        # Deletion stops at the high watermark and truncation at it too, so an empty log
        # ends where it starts.
        return self.log_start_offset + len(self.records)


# -- actions: each is a guard plus a transition --------------------------------------------

def append(state: LogState, count: int) -> LogState:
    assert 1 <= count
    base = state.log_end_offset
    added = tuple(LogRecord(base + i, state.next_value + i) for i in range(count))
    return state._replace(records=state.records + added, next_value=state.next_value + count)


def advance_high_watermark(state: LogState, offset: int) -> LogState:
    assert state.high_watermark < offset <= state.log_end_offset
    return state._replace(high_watermark=offset)


def delete_records_before(state: LogState, offset: int) -> LogState:
    """DeleteRecords and retention: only what consumers could already read may go."""
    assert state.log_start_offset < offset <= state.high_watermark
    kept = tuple(r for r in state.records if r.offset >= offset)
    return state._replace(log_start_offset=offset, records=kept)


def truncate_to(state: LogState, offset: int) -> LogState:
    """A follower drops its uncommitted suffix; committed offsets are never truncated."""
    assert state.high_watermark <= offset < state.log_end_offset
    return state._replace(records=tuple(r for r in state.records if r.offset < offset))


def fetch(state: LogState) -> LogState:
    """The consumer reads the record at its position, or resets to the log start."""
    position = state.consumer_position
    if position < state.log_start_offset:
        return state._replace(consumer_position=state.log_start_offset)
    assert position < state.high_watermark
    record = state.records[position - state.log_start_offset]
    return state._replace(consumer_position=position + 1, consumed=state.consumed + (record,))


def can_fetch(state: LogState) -> bool:
    return state.consumer_position < state.log_start_offset or state.consumer_position < state.high_watermark


# -- invariants ----------------------------------------------------------------------------

def offsets_contiguous(state: LogState) -> str | None:
    """ORD-1: offsets run from the log start, one by one, in append order."""
    for index, record in enumerate(state.records):
        if record.offset != state.log_start_offset + index:
            return f"offset {record.offset} at position {index} after log start {state.log_start_offset}"
    values = [r.value for r in state.records]
    if values != sorted(values):
        return f"records out of append order: {values}"
    return None


def offsets_in_range(state: LogState) -> str | None:
    """RET-1: log start <= high watermark <= log end."""
    if not state.log_start_offset <= state.high_watermark <= state.log_end_offset:
        return (f"log start {state.log_start_offset}, high watermark {state.high_watermark}, "
                f"log end {state.log_end_offset} out of order")
    return None


def consumed_below_high_watermark(state: LogState) -> str | None:
    """VIS-1: nothing the consumer returned lies above the high watermark."""
    for record in state.consumed:
        if record.offset >= state.high_watermark:
            return f"consumer returned offset {record.offset} at or above the high watermark {state.high_watermark}"
    return None


def consumed_in_order(state: LogState) -> str | None:
    """ORD-3: offset order, and a gap only over offsets deleted below the log start."""
    previous = None
    for record in state.consumed:
        if previous is not None and record.offset != previous + 1 and record.offset > state.log_start_offset:
            return f"consumer went from offset {previous} to {record.offset}, skipping readable records"
        if previous is not None and record.offset <= previous:
            return f"consumer went back from offset {previous} to {record.offset}"
        previous = record.offset
    return None


def reads_repeatable(state: LogState) -> str | None:
    """VIS-2: a record once read is still the record at its offset while the offset exists."""
    for record in state.consumed:
        index = record.offset - state.log_start_offset
        if 0 <= index < len(state.records) and state.records[index] != record:
            return f"offset {record.offset} was read as value {record.value}, now holds {state.records[index].value}"
    return None


def log_start_never_moves_back(before: LogState, after: LogState) -> str | None:
    if after.log_start_offset < before.log_start_offset or after.high_watermark < before.high_watermark:
        return "log start offset or high watermark moved back"
    return None


@dataclass(frozen=True)
class LogConfig:
    records: int = 3


class LogModel:
    name = "log"

    def __init__(self, config: LogConfig) -> None:
        if config.records < 1:
            raise ValueError(f"records must be at least 1, got {config.records}")
        self.config = config
        self.invariants = (
            Invariant("ORD-1", "offsets contiguous in append order", offsets_contiguous),
            Invariant("RET-1", "log start <= high watermark <= log end", offsets_in_range),
            Invariant("VIS-1", "consumer below the high watermark", consumed_below_high_watermark),
            Invariant("ORD-3", "consumer in offset order without gaps", consumed_in_order),
            Invariant("VIS-2", "reads are repeatable", reads_repeatable),
        )
        self.step_invariants = (
            StepInvariant("RET-1", "log start and high watermark only grow", log_start_never_moves_back),
        )

    def initial_states(self) -> list[LogState]:
        return [LogState(0, 0, (), 0, 0, ())]

    def successors(self, state: LogState) -> Iterator[tuple[Action, LogState]]:
        for count in range(1, BATCH_RECORDS_MAX + 1):
            if state.next_value + count <= self.config.records:
                yield ("Append", count), append(state, count)
        if state.high_watermark < state.log_end_offset:
            yield ("AdvanceHighWatermark", state.high_watermark + 1), \
                advance_high_watermark(state, state.high_watermark + 1)
        for offset in range(state.log_start_offset + 1, state.high_watermark + 1):
            yield ("DeleteRecordsBefore", offset), delete_records_before(state, offset)
        for offset in range(state.high_watermark, state.log_end_offset):
            yield ("TruncateTo", offset), truncate_to(state, offset)
        if can_fetch(state):
            yield ("Fetch", state.consumer_position), fetch(state)

    def canonical(self, state: LogState) -> LogState:
        return state

    def renamings(self, state: LogState) -> tuple[LogState, ...]:
        return (state,)

    def describe_action(self, action: Action) -> str:
        name, argument = action
        return {
            "Append": f"the leader appends a batch of {argument} record(s)",
            "AdvanceHighWatermark": f"the high watermark advances to {argument}",
            "DeleteRecordsBefore": f"records before offset {argument} are deleted",
            "TruncateTo": f"the log is truncated to offset {argument}",
            "Fetch": f"the consumer fetches at position {argument}",
        }[name]

    def describe_state(self, state: LogState) -> list[str]:
        records = " ".join(f"{r.offset}:v{r.value}" for r in state.records)
        consumed = " ".join(f"{r.offset}:v{r.value}" for r in state.consumed)
        return [f"log start {state.log_start_offset}, hw {state.high_watermark}, end {state.log_end_offset}: "
                f"[{records}]", f"consumer at {state.consumer_position}, read [{consumed}]"]
