"""Raft observers (KIP-595): nodes outside the voters, such as broker-only nodes, that
replicate the metadata log and learn the high watermark without a say in elections or
commits; and find the leader by asking the voters when they know none."""
from __future__ import annotations

import random

import pytest

from reference.controller.raft import (
    NO_LEADER,
    FetchRequest,
    FetchResponse,
    RaftConfig,
    RaftNode,
    RaftRole,
    VoteRequest,
)

from .test_raft_paper import Quorum

OBSERVERS = (101, 102)


def quorum_with_observers(voters=(1, 2, 3), observers=OBSERVERS, seed: int = 0) -> Quorum:
    quorum = Quorum(voters, seed)
    for observer in observers:
        quorum.nodes[observer] = RaftNode(observer, quorum.voters, random.Random(seed * 100 + observer), RaftConfig())
    return quorum


def committed_records(node: RaftNode) -> list:
    return [entry.record for _, entry in node.take_committed() if entry.record["type"] != "LeaderChangeMessage"]


def test_an_observer_replicates_the_log_and_learns_the_high_watermark():
    quorum = quorum_with_observers()
    quorum.run(3_000)
    leader = quorum.leader()
    commit_offset = leader.propose([{"type": "TopicRecord", "name": f"t{i}"} for i in range(3)])
    quorum.run(500)
    for observer in OBSERVERS:
        node = quorum.nodes[observer]
        assert node.is_observer and node.role is RaftRole.FOLLOWER and node.leader_id == leader.node_id
        assert node.log == leader.log and node.high_watermark == leader.high_watermark >= commit_offset
        assert committed_records(node) == [{"type": "TopicRecord", "name": f"t{i}"} for i in range(3)]
    assert [state.replica_id for state in leader.voter_states(quorum.now_ms)] == list(quorum.voters)


def test_observers_never_vote_or_stand_for_election():
    quorum = quorum_with_observers()
    for voter in quorum.voters:
        quorum.down.add(voter)
    quorum.run(10_000)  # many election timeouts' worth with no voter up
    for observer in OBSERVERS:
        node = quorum.nodes[observer]
        assert node.role is RaftRole.FOLLOWER and node.epoch == 0 and node.voted_for == -1
    observer = quorum.nodes[OBSERVERS[0]]
    observer.take_outbox()
    observer.receive(VoteRequest(1, 5, 0, 0, pre_vote=False), quorum.now_ms)
    observer.receive(VoteRequest(2, 5, 0, 0, pre_vote=True), quorum.now_ms)
    assert observer.take_outbox() == [] and observer.epoch == 0, "no vote, no epoch taken from a candidate"


def test_observers_count_toward_neither_the_high_watermark_nor_the_leaders_quorum():
    quorum = quorum_with_observers()
    quorum.run(3_000)
    leader = quorum.leader()
    for voter in quorum.voters:
        if voter != leader.node_id:
            quorum.down.add(voter)
    high_watermark = leader.high_watermark
    leader.propose([{"type": "lost-majority"}])
    quorum.run(300)
    assert leader.high_watermark == high_watermark, "two observers fetched it; no voter did"
    assert all(quorum.nodes[o].log_end_offset == leader.log_end_offset for o in OBSERVERS)
    quorum.run(leader.config.check_quorum_timeout_ms + 100)
    assert leader.role is RaftRole.FOLLOWER, "observers' fetches do not keep a leader without a quorum in office"


def test_a_voter_that_is_not_the_leader_names_the_leader_to_an_observer():
    follower = RaftNode(2, (1, 2, 3), random.Random(0), epoch=3, leader_id=1)
    follower.receive(FetchRequest(101, 3, 0, 0), now_ms=0)
    assert follower.take_outbox() == [(101, FetchResponse(1, 3, not_leader=True, fetch_offset=0))]
    follower.receive(FetchRequest(3, 3, 0, 0), now_ms=0)
    assert follower.take_outbox() == [], "a voter's Fetch to a non-leader stays unanswered, as before"


def test_a_leaderless_observer_asks_the_voters_in_turn():
    observer = RaftNode(101, (1, 2, 3), random.Random(0))
    config = observer.config
    observer.tick(0)
    observer.tick(config.retry_backoff_ms)
    observer.tick(2 * config.retry_backoff_ms)
    assert [target for target, message in observer.take_outbox() if isinstance(message, FetchRequest)] == [1, 2, 3]
    observer.receive(FetchResponse(NO_LEADER, 1, not_leader=True, fetch_offset=0), now_ms=50)
    assert observer.leader_id == NO_LEADER and observer.epoch == 1 and observer.take_outbox() == []
    observer.receive(FetchResponse(3, 1, not_leader=True, fetch_offset=0), now_ms=60)
    assert observer.leader_id == 3 and [target for target, _ in observer.take_outbox()] == [3], "fetches at once"


def test_an_observer_whose_leader_dies_finds_the_next_one():
    quorum = quorum_with_observers()
    quorum.run(3_000)
    old = quorum.leader()
    quorum.crash(old.node_id)
    quorum.run(5_000)
    new = quorum.leader()
    assert new is not None and new.node_id != old.node_id
    commit_offset = new.propose([{"type": "TopicRecord", "name": "after-failover"}])
    quorum.run(500)
    for observer in OBSERVERS:
        node = quorum.nodes[observer]
        assert node.leader_id == new.node_id and node.epoch == new.epoch and node.high_watermark >= commit_offset
        assert committed_records(node)[-1] == {"type": "TopicRecord", "name": "after-failover"}


def test_an_observer_behind_the_snapshot_installs_it():
    quorum = quorum_with_observers(observers=())
    quorum.run(3_000)
    leader = quorum.leader()
    leader.propose([{"n": i} for i in range(10)])
    quorum.run(300)
    leader.take_committed()
    leader.take_snapshot(leader.applied_offset, state={"n": 9})
    quorum.nodes[101] = RaftNode(101, quorum.voters, random.Random(101), RaftConfig())  # a new, empty observer
    quorum.run(1_000)
    observer = quorum.nodes[101]
    assert observer.snapshot.state == {"n": 9} and observer.log_end_offset == leader.log_end_offset
    assert observer.high_watermark == leader.high_watermark


@pytest.mark.parametrize("seed", range(4))
def test_observers_agree_with_the_voters_on_committed_entries_under_random_drops_and_crashes(seed):
    quorum = quorum_with_observers(voters=(1, 2, 3), seed=seed)
    chaos = random.Random(seed)
    committed_ever: list = []  # the longest committed log any voter has held
    for round_number in range(25):
        crashed = chaos.choice(quorum.voters + OBSERVERS) if chaos.random() < 0.3 else None
        if crashed is not None:
            quorum.crash(crashed)  # down for this round, back for the next
        if (leader := quorum.leader()) is not None:
            leader.propose([{"round": round_number}])
        quorum.run(400, drop_rate=0.1)
        committed_ever = max([committed_ever, *(quorum.committed(v) for v in quorum.voters)], key=len)
        for observer in OBSERVERS:
            shorter, longer = sorted([quorum.committed(observer), committed_ever], key=len)
            assert longer[:len(shorter)] == shorter, "an observer committed entries the voters did not"
        if crashed is not None:
            quorum.recover(crashed)
    quorum.run(5_000)
    leader = quorum.leader()
    for observer in OBSERVERS:
        node = quorum.nodes[observer]
        assert node.log == leader.log and node.high_watermark == leader.high_watermark
