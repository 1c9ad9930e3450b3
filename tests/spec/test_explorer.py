"""The explorer and the small models: shortest counterexamples, exhaustion, symmetry, bounds."""
from __future__ import annotations

from typing import NamedTuple

from spec.explorer import explore
from spec.model import Invariant, StepInvariant
from spec.models.group import GroupConfig, GroupModel
from spec.models.idempotence import IdempotenceConfig, IdempotenceModel
from spec.models.log import LogConfig, LogModel
from spec.models.replication import ReplicationConfig, ReplicationModel


class Counter(NamedTuple):
    value: int


class TwoPaths:
    """From 0, +1 reaches 5 in five steps, +3 in two; ORD-1 here says "never 6 or more"."""
    name = "two paths"

    def __init__(self):
        self.invariants = (Invariant("ORD-1", "below six", lambda s: "too big" if s.value >= 6 else None),)
        self.step_invariants = ()

    def initial_states(self):
        return [Counter(0)]

    def successors(self, state):
        if state.value < 10:
            yield ("Add", 1), Counter(state.value + 1)
            yield ("Add", 3), Counter(state.value + 3)

    def canonical(self, state):
        return state

    def renamings(self, state):
        return (state,)

    def describe_action(self, action):
        return f"add {action[1]}"

    def describe_state(self, state):
        return [f"value {state.value}"]


def test_the_first_counterexample_is_a_shortest_one():
    model = TwoPaths()
    found = explore(model).counterexample
    assert found is not None and len(found.steps) - 1 == 2
    assert [a for a, _ in found.steps[1:]] == [("Add", 3), ("Add", 3)]
    assert found.render(model).splitlines()[1:3] == ["  0. initial state", "       value 0"]


def test_a_step_invariant_back_to_a_seen_state_gives_a_finite_trace():
    model = TwoPaths()
    model.invariants = ()
    model.step_invariants = (StepInvariant("RET-1", "no jump by three",
                                           lambda a, b: "jumped" if b.value - a.value == 3 else None),)
    found = explore(model).counterexample
    assert found is not None and found.problem == "jumped" and len(found.steps) == 2


def test_max_states_stops_without_claiming_exhaustion():
    result = explore(ReplicationModel(ReplicationConfig(replicas=2, records=2, truncation="kip320")), max_states=500)
    assert not result.exhausted and result.counterexample is None and 500 <= result.states < 600


def test_symmetry_reduction_keeps_the_verdict_and_shrinks_the_state_space():
    config = ReplicationConfig(replicas=2, records=2, max_epochs=3, truncation="kip320")
    reduced = explore(ReplicationModel(config))
    full = explore(ReplicationModel(config), symmetry=False)
    assert reduced.exhausted and full.exhausted and reduced.counterexample is None is full.counterexample
    assert reduced.states < full.states
    buggy = ReplicationConfig(replicas=2, records=2, max_epochs=3, truncation="hw")
    assert len(explore(ReplicationModel(buggy)).counterexample.steps) == \
        len(explore(ReplicationModel(buggy), symmetry=False).counterexample.steps)


def test_a_symmetric_trace_replays_with_consistent_replica_names():
    """States are stored by representative; the printed trace must be one real behaviour."""
    model = ReplicationModel(ReplicationConfig(replicas=3, records=2, max_epochs=3, truncation="kip279"))
    found = explore(model).counterexample
    for (_, before), (action, after) in zip(found.steps, found.steps[1:]):
        assert (action, after) in list(model.successors(before))


def test_acks_one_records_are_not_promised_by_dur1():
    result = explore(ReplicationModel(ReplicationConfig(replicas=2, records=2, truncation="kip320", acks="1")))
    assert result.exhausted and result.counterexample is None


def test_min_insync_replicas_two_holds_with_kip320():
    config = ReplicationConfig(replicas=2, records=2, truncation="kip320", min_insync_replicas=2, max_crashes=1)
    assert explore(ReplicationModel(config)).exhausted


def test_log_model_exhausts_with_every_invariant():
    result = explore(LogModel(LogConfig(records=4)))
    assert result.exhausted and result.counterexample is None and result.states > 500


def test_idempotent_producer_never_duplicates_or_reorders_with_five_in_flight():
    result = explore(IdempotenceModel(IdempotenceConfig(records=5)))
    assert result.exhausted and result.counterexample is None


def test_without_sequence_dedup_retries_duplicate_and_reorder():
    model = IdempotenceModel(IdempotenceConfig(records=3, deduplicate=False))
    assert explore(model, guarantee_ids={"IDM-1"}).counterexample.guarantee_id == "IDM-1"
    assert explore(model, guarantee_ids={"ORD-2"}).counterexample.guarantee_id == "ORD-2"


def test_group_generations_fence_zombie_commits():
    assert explore(GroupModel(GroupConfig(records=2, max_generations=4))).exhausted
    found = explore(GroupModel(GroupConfig(records=2, max_generations=4, fence_commits=False))).counterexample
    assert found is not None and found.guarantee_id == "GRP-3"
