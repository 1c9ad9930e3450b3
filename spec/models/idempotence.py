"""An idempotent producer writing one partition: sequence numbers, retries, in-flight batches.

The producer numbers its batches 0, 1, 2, ... and keeps up to max.in.flight.requests of
them outstanding. Its connection delivers each batch the first time in send order (TCP);
a retry after a lost response or an error is another delivery that may come at any later
time, so retries duplicate and reorder. The broker keeps the producer's last sequence (its
producer state) and appends a batch only when its sequence is the next one; an older
sequence is a duplicate, answered with the original offset and not appended; a gap is
OUT_OF_ORDER_SEQUENCE_NUMBER and the producer retries. A producer the broker has no state
for is accepted at any sequence (KIP-360: its state may have gone with deleted records). With
`deduplicate=False` the broker appends whatever arrives, as a broker without producer
state would: that is how the tests show the invariants are not vacuous.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple

from spec.model import Action, Invariant

MAX_IN_FLIGHT_REQUESTS = 5  # max.in.flight.requests.per.connection allowed with idempotence
NO_SEQUENCE = -1


class IdempotenceState(NamedTuple):
    next_sequence: int                 # the producer's next batch
    in_flight: frozenset[int]          # sent, not yet acknowledged to the producer
    delivered: int                     # batches below this reached the broker at least once
    log: tuple[int, ...]               # sequences of the batches the partition holds, in offset order
    last_sequence: int                 # the broker's producer state


@dataclass(frozen=True)
class IdempotenceConfig:
    records: int = 3
    max_in_flight_requests: int = MAX_IN_FLIGHT_REQUESTS
    deduplicate: bool = True


def may_send(state: IdempotenceState, max_in_flight_requests: int) -> bool:
    """The window counts from the oldest unacknowledged batch: responses come back in order on
    one connection, so the producer never has a batch more than max.in.flight.requests ahead
    of one still unanswered (the broker keeps that many batches per producer for dedup)."""
    oldest = min(state.in_flight, default=state.next_sequence)
    return state.next_sequence < oldest + max_in_flight_requests


def send(state: IdempotenceState) -> IdempotenceState:
    return state._replace(next_sequence=state.next_sequence + 1, in_flight=state.in_flight | {state.next_sequence})


def deliver(state: IdempotenceState, sequence: int, deduplicate: bool) -> IdempotenceState:
    """The broker handles one delivery (the first, or a retry) of the batch with this sequence."""
    assert sequence in state.in_flight and sequence <= state.delivered
    delivered = max(state.delivered, sequence + 1)
    known = state.last_sequence != NO_SEQUENCE
    if deduplicate and known and sequence != state.last_sequence + 1:
        return state._replace(delivered=delivered)  # a duplicate, or OUT_OF_ORDER_SEQUENCE_NUMBER
    return state._replace(log=state.log + (sequence,), last_sequence=sequence, delivered=delivered)


def acknowledge(state: IdempotenceState, sequence: int) -> IdempotenceState:
    """A response for a stored batch reaches the producer."""
    assert sequence in state.in_flight and sequence in state.log
    return state._replace(in_flight=state.in_flight - {sequence})


def no_duplicates(state: IdempotenceState) -> str | None:
    """IDM-1: each batch is stored once, however often it was delivered."""
    if len(set(state.log)) != len(state.log):
        return f"the log holds a batch twice: sequences {list(state.log)}"
    return None


def send_order(state: IdempotenceState) -> str | None:
    """ORD-2: batches are stored in the order the producer sent them."""
    if list(state.log) != sorted(state.log):
        return f"the log holds sequences out of send order: {list(state.log)}"
    return None


class IdempotenceModel:
    name = "idempotence"

    def __init__(self, config: IdempotenceConfig) -> None:
        if config.records < 1 or not 1 <= config.max_in_flight_requests <= MAX_IN_FLIGHT_REQUESTS:
            raise ValueError(f"records must be at least 1 and in-flight requests 1..{MAX_IN_FLIGHT_REQUESTS}")
        self.config = config
        self.invariants = (
            Invariant("IDM-1", "no batch stored twice", no_duplicates),
            Invariant("ORD-2", "stored in send order", send_order),
        )
        self.step_invariants = ()

    def initial_states(self) -> list[IdempotenceState]:
        return [IdempotenceState(0, frozenset(), 0, (), NO_SEQUENCE)]

    def successors(self, state: IdempotenceState) -> Iterator[tuple[Action, IdempotenceState]]:
        if state.next_sequence < self.config.records and may_send(state, self.config.max_in_flight_requests):
            yield ("Send", state.next_sequence), send(state)
        for sequence in sorted(state.in_flight):
            if sequence <= state.delivered:  # the first delivery keeps send order
                yield ("Deliver", sequence), deliver(state, sequence, self.config.deduplicate)
            if sequence in state.log:
                yield ("Acknowledge", sequence), acknowledge(state, sequence)

    def canonical(self, state: IdempotenceState) -> IdempotenceState:
        return state

    def renamings(self, state: IdempotenceState) -> tuple[IdempotenceState, ...]:
        return (state,)

    def describe_action(self, action: Action) -> str:
        name, sequence = action
        return {"Send": "the producer sends batch with sequence {}",
                "Deliver": "the broker receives batch {} (again, if retried)",
                "Acknowledge": "the producer gets the response for batch {}"}[name].format(sequence)

    def describe_state(self, state: IdempotenceState) -> list[str]:
        return [f"in flight {sorted(state.in_flight)}, log {list(state.log)}, "
                f"broker last sequence {state.last_sequence}"]
