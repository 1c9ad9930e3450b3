"""The seeded simulation of real replica cores: it holds with today's rules, it is
reproducible, and it catches every historical-bug switch of reference/replication (the
mutation check: flipping any switch makes this spec-driven test fail)."""
from __future__ import annotations

import pytest

from reference.replication import ReplicationBugs
from spec.cluster_simulation import run

pytestmark = pytest.mark.timeout(240)

SEEDS = range(8)
STEPS = 1_000

SWITCHES = {
    "truncate to the high watermark (before KIP-101)": ReplicationBugs(truncation="hw"),
    "truncate without comparing epochs (before KIP-279)": ReplicationBugs(truncation="kip101"),
    "count a fenced follower into the HW (before KIP-320)": ReplicationBugs(count_fenced_follower_into_hw=True),
    "acknowledge acks=all before the ISR has the record": ReplicationBugs(ack_before_isr=True),
    "let consumers read above the high watermark": ReplicationBugs(read_above_hw=True),
}


def first_violation(bugs: ReplicationBugs):
    for seed in SEEDS:
        _, violation = run(seed, STEPS, bugs)
        if violation is not None:
            return seed, violation
    return None


@pytest.mark.parametrize("name", SWITCHES)
def test_every_historical_bug_switch_is_caught(name):
    found = first_violation(SWITCHES[name])
    assert found is not None, f"no seed in {SEEDS} found a violation with '{name}' on"


def test_todays_rules_hold_under_faults():
    for seed in range(3):
        simulation, violation = run(seed, 1_500)
        assert violation is None, (seed, violation, simulation.events[-20:])
        assert simulation.acked, "the run acknowledged records, so DUR-1 was exercised"


def test_a_seed_reproduces_its_run_exactly():
    first, violation_first = run(2, 400, ReplicationBugs(truncation="hw"))
    second, violation_second = run(2, 400, ReplicationBugs(truncation="hw"))
    assert first.events == second.events and violation_first == violation_second
