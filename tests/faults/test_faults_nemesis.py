"""The nemesis schedule and partition shapes, as pure functions of time and a seeded generator."""
from __future__ import annotations

import random

import pytest

from faults.nemesis import Schedule, bridge, complete_grudge, halves, isolate, majorities_ring, partition_variants


def reachable(grudge: dict[int, set[int]], a: int, b: int) -> bool:
    """A TCP link works when neither end drops the other's packets."""
    return b not in grudge.get(a, set()) and a not in grudge.get(b, set())


def test_isolating_a_node_cuts_exactly_its_links():
    grudge = isolate(1, [0, 1, 2])
    assert grudge == {1: {0, 2}, 0: {1}, 2: {1}}
    assert reachable(grudge, 0, 2) and not reachable(grudge, 0, 1) and not reachable(grudge, 1, 2)


@pytest.mark.parametrize("seed", range(20))
def test_halves_split_into_a_minority_and_a_majority_that_cannot_talk(seed):
    nodes = [0, 1, 2, 3, 4]
    grudge = halves(nodes, random.Random(seed))
    sides = {frozenset(n for n in nodes if reachable(grudge, n, m)) for m in nodes}
    assert sorted(len(side) for side in sides) == [2, 3]


@pytest.mark.parametrize("seed", range(20))
def test_majorities_ring_gives_every_node_a_majority_view_and_no_two_the_same(seed):
    nodes = list(range(5))
    grudge = majorities_ring(nodes, random.Random(seed))
    views = [frozenset(m for m in nodes if reachable(grudge, n, m)) for n in nodes]
    assert all(len(view) >= 3 for view in views)
    assert len(set(views)) == len(nodes)


@pytest.mark.parametrize("seed", range(20))
def test_bridge_leaves_one_node_talking_to_both_halves(seed):
    nodes = [0, 1, 2, 3, 4]
    grudge = bridge(nodes, random.Random(seed))
    middles = [n for n in nodes if all(reachable(grudge, n, m) for m in nodes)]
    assert len(middles) == 1
    others = [n for n in nodes if n != middles[0]]
    assert sum(not reachable(grudge, a, b) for a in others for b in others if a < b) == 4


def test_complete_grudge_is_symmetric():
    grudge = complete_grudge([[0], [1, 2], [3]])
    assert all(a in grudge[b] for a, peers in grudge.items() for b in peers)


def test_variants_depend_on_the_node_count():
    assert partition_variants(1) == ("clients",)
    assert "bridge" in partition_variants(3) and "majorities-ring" not in partition_variants(3)
    assert "majorities-ring" in partition_variants(5)


def test_schedule_flips_each_package_start_then_stop_with_mean_interval():
    schedule = Schedule(("kill", "pause"), interval_s=10.0, rng=random.Random(1))
    flips = []
    for tick in range(1, 100_001):
        now_s = tick * 0.1
        flips += [(now_s, action, package) for action, package in schedule.due(now_s)]
    for package in ("kill", "pause"):
        actions = [a for _, a, p in flips if p == package]
        assert actions[::2] == ["start"] * len(actions[::2]) and actions[1::2] == ["stop"] * len(actions[1::2])
        times = [t for t, _, p in flips if p == package]
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert 9.0 < sum(gaps) / len(gaps) < 11.0 and max(gaps) <= 20.1


def test_final_heal_stops_every_active_package_and_only_those():
    schedule = Schedule(("kill", "pause", "partition"), interval_s=1.0, rng=random.Random(3))
    started = set()
    for action, package in schedule.due(1.5):
        (started.add if action == "start" else started.discard)(package)
    assert schedule.heal_all() == [("stop", p) for p in sorted(started)]
    assert schedule.active == set() and schedule.heal_all() == []
