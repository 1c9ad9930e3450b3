"""What every model in spec/ provides to the explorer and the simulator.

A model is a state machine over immutable states: `initial_states()` gives where it
starts, `successors(state)` every enabled action with the state it leads to. Actions are
plain tuples such as ("LeaderWrite", 0) so generating them costs nothing; the model turns
one into a sentence only when a trace is printed. Invariants are named by the guarantee
id of spec.catalogue they check; a check returns None when it holds and a sentence
saying what is wrong when it does not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Iterator, Protocol

from spec.catalogue import guarantee

State = Hashable
Action = tuple


@dataclass(frozen=True)
class Invariant:
    """A property of every reachable state, checking one catalogue guarantee."""
    guarantee_id: str
    name: str
    check: Callable[[Any], str | None]

    def __post_init__(self) -> None:
        guarantee(self.guarantee_id)  # a KeyError here names the known ids


@dataclass(frozen=True)
class StepInvariant:
    """A property of every transition (before, after): "only grows", "never moves back"."""
    guarantee_id: str
    name: str
    check: Callable[[Any, Any], str | None]

    def __post_init__(self) -> None:
        guarantee(self.guarantee_id)


class Model(Protocol):
    name: str
    invariants: tuple[Invariant, ...]
    step_invariants: tuple[StepInvariant, ...]

    def initial_states(self) -> Iterable[State]: ...

    def successors(self, state: State) -> Iterator[tuple[Action, State]]: ...

    def describe_action(self, action: Action) -> str: ...

    def describe_state(self, state: State) -> list[str]: ...

    def canonical(self, state: State) -> State:
        """A representative of the state's symmetry class (the state itself when none)."""
        ...

    def renamings(self, state: State) -> Iterable[State]:
        """Every member of the state's symmetry class, the state itself first."""
        ...


def first_violation(invariants: Iterable[Invariant], state: State) -> tuple[Invariant, str] | None:
    for invariant in invariants:
        problem = invariant.check(state)
        if problem is not None:
            return invariant, problem
    return None


def first_step_violation(invariants: Iterable[StepInvariant], before: State,
                         after: State) -> tuple[StepInvariant, str] | None:
    for invariant in invariants:
        problem = invariant.check(before, after)
        if problem is not None:
            return invariant, problem
    return None
