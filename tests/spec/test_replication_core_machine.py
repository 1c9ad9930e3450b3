"""A hypothesis state machine over the replica cores: the cluster simulation's events as rules.

Hypothesis picks the sequence of events (deliver, fetch, produce, consume, crash, ...) and
the choices inside them; after every rule the simulation's checker runs (DUR-1, REP-1,
REP-2, VIS-1, VIS-2). A failure shrinks to a short program of events. Today's rules must
hold; with a historical bug switched on, the machine must find a counterexample.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from reference.replication import ReplicationBugs
from spec.cluster_simulation import EVENTS, ClusterSimulation

LONG = os.environ.get("KSPEC_SPEC_PROFILE") == "long"


def machine_for(bugs: ReplicationBugs):
    class ReplicationCores(RuleBasedStateMachine):
        simulation: ClusterSimulation | None = None

        @initialize(rng=st.randoms(use_true_random=False))
        def start(self, rng) -> None:
            self.simulation = ClusterSimulation(seed=0, bugs=bugs)
            self.simulation.rng = rng  # hypothesis now makes every choice, and shrinks them

        def teardown(self) -> None:
            if self.simulation is not None:
                self.simulation.close()

        @rule(event=st.sampled_from(sorted(EVENTS)))
        def happen(self, event: str) -> None:
            getattr(self.simulation, f"_event_{event}")()
            self.simulation._collect_acks()

        @invariant()
        def guarantees_hold(self) -> None:
            if self.simulation is not None:
                self.simulation.check()

    return ReplicationCores


def test_replication_cores_hold_every_guarantee():
    run_state_machine_as_test(machine_for(ReplicationBugs()), settings=settings(
        max_examples=200 if LONG else 15, stateful_step_count=200 if LONG else 60, deadline=None,
        suppress_health_check=list(HealthCheck)))


def test_the_machine_finds_acks_before_the_isr_has_the_record():
    """Finding is the point: the slow shrinking phase is skipped."""
    with pytest.raises(Exception, match="acked"):
        run_state_machine_as_test(machine_for(ReplicationBugs(ack_before_isr=True)), settings=settings(
            max_examples=200, stateful_step_count=60, deadline=None, suppress_health_check=list(HealthCheck),
            database=None, report_multiple_bugs=False, phases=(Phase.explicit, Phase.generate)))
