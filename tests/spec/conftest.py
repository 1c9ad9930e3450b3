"""Helpers for the spec tests: replaying a scripted story through a model."""
from __future__ import annotations

from spec.model import Action


def play(model, actions: list[tuple]) -> list[tuple[Action, object]]:
    """Apply each action (matched on its leading fields) to the model's initial state.

    Every step must be enabled: a story that asks for a disabled action fails loudly, so a
    scenario cannot silently stop meaning what it says.
    """
    (state,) = model.initial_states()
    path = [(None, state)]
    for wanted in actions:
        matches = [(a, s) for a, s in model.successors(state) if a[:len(wanted)] == wanted]
        assert matches, f"step {len(path)}: {wanted!r} is not enabled; enabled: {[a for a, _ in model.successors(state)]}"
        action, state = matches[0]
        path.append((action, state))
    return path


def broken_guarantees(model, state) -> set[str]:
    """The ids of every invariant that does not hold in `state`."""
    return {i.guarantee_id for i in model.invariants if i.check(state) is not None}

