"""Breadth-first exhaustive exploration of a model, with the shortest counterexample.

Every reachable state (up to the model's symmetry) is visited once, level by level, and
every invariant is checked in it; step invariants are checked on every transition.
Because the search is breadth-first, the first violation found is at the smallest
depth, so its trace is a shortest one. Each visited state remembers its parent and the
action that reached it; a trace is rebuilt by walking back and then replaying it on
concrete states, so the printed replica names stay consistent even though states are
stored by their symmetry representative.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Collection

from spec.model import Action, Model, State, StepInvariant, first_step_violation, first_violation

PROGRESS_EVERY_STATES = 20_000


@dataclass(frozen=True)
class Counterexample:
    guarantee_id: str
    invariant: str
    problem: str
    steps: tuple[tuple[Action | None, State], ...]   # (action that led here, state); the first has no action

    def render(self, model: Model) -> str:
        lines = [f"{self.guarantee_id} ({self.invariant}) violated after {len(self.steps) - 1} steps: {self.problem}"]
        for number, (action, state) in enumerate(self.steps):
            lines.append(f"{number:>3}. " + ("initial state" if action is None else model.describe_action(action)))
            lines.extend(f"       {line}" for line in model.describe_state(state))
        return "\n".join(lines)


@dataclass
class Exploration:
    states: int = 0
    transitions: int = 0
    depth: int = 0
    seconds: float = 0.0
    exhausted: bool = False
    counterexample: Counterexample | None = None
    checked: tuple[str, ...] = field(default_factory=tuple)

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else 0.0


Progress = Callable[[Exploration], None]


def explore(model: Model, max_states: int | None = None, on_progress: Progress | None = None,
            symmetry: bool = True, guarantee_ids: Collection[str] | None = None,
            max_seconds: float | None = None) -> Exploration:
    """Explore until a violation, until no new state is left (exhausted), max_states or max_seconds.

    `guarantee_ids` limits the check to those guarantees' invariants (all when None).
    """
    assert max_states is None or max_states > 0
    canonical = model.canonical if symmetry else (lambda s: s)
    invariants = [i for i in model.invariants if guarantee_ids is None or i.guarantee_id in guarantee_ids]
    step_invariants = [i for i in model.step_invariants if guarantee_ids is None or i.guarantee_id in guarantee_ids]
    result = Exploration(checked=tuple(f"{i.guarantee_id} {i.name}" for i in (*invariants, *step_invariants)))
    started = time.monotonic()
    parents: dict[State, tuple[State, Action] | None] = {}
    frontier: list[State] = []
    for state in model.initial_states():
        key = canonical(state)
        if key in parents:
            continue
        parents[key] = None
        frontier.append(key)
        violation = first_violation(invariants, key)
        if violation is not None:
            result.counterexample = _counterexample(model, parents, key, *violation)
            break
    next_progress = PROGRESS_EVERY_STATES
    while frontier and result.counterexample is None:
        next_frontier: list[State] = []
        for state in frontier:
            for action, after in model.successors(state):
                result.transitions += 1
                step_violation = first_step_violation(step_invariants, state, after)
                if step_violation is not None:
                    result.counterexample = _counterexample(model, parents, state, *step_violation,
                                                            last_step=(action, after))
                    break
                key = canonical(after)
                if key in parents:
                    continue
                parents[key] = (state, action)
                next_frontier.append(key)
                violation = first_violation(invariants, key)
                if violation is not None:
                    result.counterexample = _counterexample(model, parents, key, *violation)
                    break
            if result.counterexample is not None:
                break
            if len(parents) >= next_progress:
                next_progress += PROGRESS_EVERY_STATES
                result.states, result.seconds = len(parents), time.monotonic() - started
                if on_progress is not None:
                    on_progress(result)
            if max_states is not None and len(parents) >= max_states:
                break
            if max_seconds is not None and time.monotonic() - started > max_seconds:
                break
        else:
            frontier = next_frontier
            result.depth += 1 if next_frontier else 0
            continue
        break
    result.states, result.seconds = len(parents), time.monotonic() - started
    result.exhausted = result.counterexample is None and not frontier
    return result


def _counterexample(model: Model, parents: dict, last: State, invariant, problem: str,
                    last_step: tuple[Action, State] | None = None) -> Counterexample:
    """Walk parent links back to an initial state, then replay the actions on concrete states.

    A step invariant is broken by a transition out of `last`: `last_step`, which may lead
    to a state seen before, so it is not recorded among the parents.
    """
    actions: list[Action] = []
    state = last
    while parents[state] is not None:
        state, action = parents[state]
        actions.append(action)
    actions.reverse()
    steps: list[tuple[Action | None, State]] = [(None, state)]
    for wanted_key, action in zip(_keys_along(parents, last), actions):
        steps.append(_replay_step(model, steps[-1][1], action, wanted_key))
    if last_step is not None:
        steps.append(_replay_step(model, steps[-1][1], last_step[0], last_step[1]))
    final = steps[-1][1]
    # Recheck on the replayed states, so the sentence names replicas as the trace does.
    if isinstance(invariant, StepInvariant):
        problem = invariant.check(steps[-2][1], final) or problem
    else:
        problem = invariant.check(final) or problem
    return Counterexample(invariant.guarantee_id, invariant.name, problem, tuple(steps))


def _keys_along(parents: dict, last: State) -> list[State]:
    keys = []
    state = last
    while parents[state] is not None:
        keys.append(state)
        state = parents[state][0]
    return keys[::-1]


def _replay_step(model: Model, concrete: State, stored_action: Action, wanted_key: State) -> tuple[Action, State]:
    """The successor of `concrete` whose symmetry representative is `wanted_key`.

    The stored action names replicas of the stored representative; in the concrete state
    the same step may carry other names, so find the successor that lands in the same class.
    """
    for action, after in model.successors(concrete):
        if after == wanted_key:
            return action, after
    for action, after in model.successors(concrete):
        if wanted_key in model.renamings(after):
            return action, after
    raise AssertionError(f"cannot replay {stored_action!r}: the model is not deterministic")
