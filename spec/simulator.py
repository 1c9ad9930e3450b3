"""A seeded random walk through a model: long behaviours, checked at every step, reproducible.

Where the explorer visits every state of a small configuration, the simulator follows one
long path at a time through a larger one. Every choice (which action among the enabled
ones: which request is delivered late, which follower fetches, who crashes) comes from one
random.Random(seed), so `kspec spec simulate --seed N --steps M` replays a run exactly.
When a path reaches a state with nothing enabled (the model's bounds are used up) the walk
starts again from an initial state. Invariants are checked after every step; a violation
ends the run with the path that led to it.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass

from spec.explorer import Counterexample
from spec.model import Action, Model, State, first_step_violation, first_violation


@dataclass
class Simulation:
    seed: int
    steps: int = 0
    walks: int = 0
    seconds: float = 0.0
    counterexample: Counterexample | None = None

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0


def simulate(model: Model, seed: int, steps: int) -> Simulation:
    assert steps >= 0
    rng = random.Random(seed)
    result = Simulation(seed=seed)
    started = time.monotonic()
    initial = list(model.initial_states())
    path: list[tuple[Action | None, State]] = []
    state: State | None = None
    while result.steps < steps:
        if state is None:
            state = rng.choice(initial)
            path = [(None, state)]
            result.walks += 1
            violation = first_violation(model.invariants, state)
        else:
            enabled = list(model.successors(state))
            if not enabled:
                state = None
                continue
            action, after = rng.choice(enabled)
            result.steps += 1
            violation = (first_step_violation(model.step_invariants, state, after)
                         or first_violation(model.invariants, after))
            state = after
            path.append((action, state))
        if violation is not None:
            invariant, problem = violation
            result.counterexample = Counterexample(invariant.guarantee_id, invariant.name, problem, tuple(path))
            break
    result.seconds = time.monotonic() - started
    return result
