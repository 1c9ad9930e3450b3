"""Kafka's replication bugs, found by the explorer rather than described.

For each historical truncation rule the explorer searches every behaviour of a small
partition breadth first and must come back with a counterexample to the guarantee the bug
broke; with the rule that fixed it, the same bound must be exhausted without one. The
traces are the ones the KIP discussions and the hachikuji/kafka-specification models
describe (shared/research/spec.md §2). Replicas are r0, r1, r2; mN:eK is record N written
in leader epoch K.
"""
from __future__ import annotations

import pytest

from conftest import broken_guarantees, play
from spec.explorer import explore
from spec.models.replication import ReplicationConfig, ReplicationModel

pytestmark = pytest.mark.timeout(120)


def explore_replication(**config):
    model = ReplicationModel(ReplicationConfig(**config))
    return model, explore(model)


def actions(counterexample):
    return [action for action, _ in counterexample.steps[1:]]


def test_kip101_scenario1_truncating_to_the_high_watermark_loses_a_committed_record():
    """KIP-101 scenario 1: a follower has fetched m0 but not yet the leader's new high
    watermark; it then accepts a new leader epoch and truncates to its stale high
    watermark, dropping m0, which the leader has already acknowledged and exposed."""
    model, result = explore_replication(replicas=2, records=2, max_epochs=3, truncation="hw")
    found = result.counterexample
    assert found is not None and found.guarantee_id == "DUR-1"
    assert len(found.steps) - 1 == 9  # as the TLA+ model of the pre-KIP-101 protocol finds
    *_, fetch, advance, truncate = actions(found)
    follower, leader = fetch[1], fetch[2]
    assert fetch[0] == "FollowerFetch" and advance == ("LeaderIncHighWatermark", leader, 1)
    assert truncate[0] == "BecomeFollower" and truncate[1] == follower and truncate[4] == 0
    assert "missing on ISR member" in found.problem and found.render(model).count("\n") > 9


def test_kip101_scenario2_truncating_to_the_high_watermark_lets_logs_diverge_after_hard_failures():
    """KIP-101 scenario 2, scripted as the KIP tells it: leader r0 holds m0 m1 with high
    watermark 2; follower r1 has m1 only above its high watermark (unflushed). Both
    crash; r1 comes back first without m1, is elected, and writes m2 at offset 1. r0
    returns, truncates to its high watermark 2 and keeps m1: same offset, two records."""
    story = [
        ("ControllerElectLeader", 0), ("BecomeLeader", 0, 0), ("BecomeFollower", 1, 0, 0, 0),
        ("LeaderWrite", 0), ("LeaderWrite", 0),
        ("FollowerFetch", 1, 0, 0), ("LeaderIncHighWatermark", 0, 1),
        ("FollowerFetch", 1, 0, 1), ("LeaderIncHighWatermark", 0, 2),
        ("Crash", 0, True), ("Crash", 1, False),
        ("Restart", 1), ("ControllerElectLeader", 1), ("BecomeLeader", 1),
        ("LeaderWrite", 1), ("LeaderIncHighWatermark", 1, 2),
        ("Restart", 0), ("BecomeFollower", 0, 1),
    ]
    config = dict(replicas=2, records=3, max_epochs=4, max_crashes=2, delayed_requests=False)
    buggy = ReplicationModel(ReplicationConfig(truncation="hw", **config))
    *_, (last_action, diverged) = play(buggy, story)
    assert last_action[4] == 2  # r0 kept its log up to its high watermark, m1 included
    assert diverged.replicas[0].log[1] != diverged.replicas[1].log[1]
    assert broken_guarantees(buggy, diverged) == {"REP-1"}

    fixed = ReplicationModel(ReplicationConfig(truncation="kip320", **config))
    *_, (last_action, converged) = play(fixed, story)
    assert last_action[4] == 1  # KIP-101 onwards: truncate to where the logs still agree
    assert broken_guarantees(fixed, converged) == set()


def test_kip101_scenario2_the_explorer_finds_divergence_under_the_high_watermark_rule():
    """The explorer reaches the same divergence (REP-1) by a shorter route than two hard
    failures: fast leader changes leave a follower with a suffix its leader lacks."""
    model = ReplicationModel(ReplicationConfig(replicas=2, records=3, max_epochs=3, truncation="hw",
                                               delayed_requests=False))
    found = explore(model, guarantee_ids={"REP-1"}).counterexample
    assert found is not None and found.guarantee_id == "REP-1"
    final = found.steps[-1][1]
    assert final.replicas[0].log[:1] != final.replicas[1].log[:1]


def test_kip279_leader_epoch_lookup_truncates_committed_data_after_fast_leader_changes():
    """KIP-279: under KIP-101, a follower whose last epoch the leader never had gets the
    start of the leader's next epoch as its truncation offset, which can lie below
    committed data the follower holds: it truncates m0 although the leader exposed it."""
    model, result = explore_replication(replicas=2, records=2, max_epochs=3, truncation="kip101")
    found = result.counterexample
    assert found is not None and found.guarantee_id == "DUR-1" and len(found.steps) - 1 == 11
    names = [a[0] for a in actions(found)]
    assert names[-1] == "BecomeFollower" and actions(found)[-1][4] == 0
    assert "LeaderWrite" in names and "LeaderIncHighWatermark" in names


def test_kip279_truncation_holds_for_two_replicas():
    model, result = explore_replication(replicas=2, records=2, max_epochs=3, truncation="kip279")
    assert result.counterexample is None and result.exhausted


def test_kip320_unfenced_truncation_uses_a_leader_from_another_epoch():
    """KIP-320 (KAFKA-6880): with three replicas, a follower that counted towards the high
    watermark then processes a stale LeaderAndIsr naming a replica that never led, and
    truncates against that replica's empty log: a member of the ISR loses committed m0."""
    model, result = explore_replication(replicas=3, records=2, max_epochs=3, truncation="kip279")
    found = result.counterexample
    assert found is not None and found.guarantee_id == "DUR-1" and len(found.steps) - 1 == 10
    last = actions(found)[-1]
    assert last[0] == "BecomeFollower" and last[4] == 0
    new_leader = found.steps[-1][1].replicas[last[2]]
    assert new_leader.leader != last[2]  # the replica it truncated against does not lead


def test_kip320_first_try_lazy_truncation_lets_a_follower_in_an_old_epoch_count_for_the_hw():
    """KIP-320's first attempt: truncate lazily on a fetch mismatch. The leader cannot tell
    that a follower is still in an older epoch when it advances the high watermark, and
    the follower later truncates committed data while catching up."""
    model, result = explore_replication(replicas=3, records=2, max_epochs=3, truncation="kip320first")
    found = result.counterexample
    assert found is not None and found.guarantee_id == "DUR-1" and len(found.steps) - 1 == 12
    assert actions(found)[-1][0] in ("FollowerTruncate", "BecomeFollower")


@pytest.mark.parametrize("replicas", [2, 3])
def test_kip320_fenced_replication_exhausts_the_bound_without_violation(replicas):
    """The fixed protocol: epoch-fenced fetch, truncation, HW advance and ISR changes."""
    model, result = explore_replication(replicas=replicas, records=2, max_epochs=3, truncation="kip320")
    assert result.counterexample is None and result.exhausted
    assert result.states > (100_000 if replicas == 3 else 2_000)


def test_kip320_holds_with_crashes_that_lose_unflushed_data():
    model, result = explore_replication(replicas=2, records=2, max_epochs=3, truncation="kip320", max_crashes=2)
    assert result.counterexample is None and result.exhausted
