"""The Raft core, tested section by section of the Raft paper (and the thesis for pre-vote),
then under a seeded random network with crashes, checking the paper's safety properties."""
from __future__ import annotations

import random

import pytest

from reference.controller.raft import (
    LEADER_CHANGE,
    NO_LEADER,
    BeginQuorumEpoch,
    Entry,
    RaftConfig,
    RaftNode,
    RaftRole,
    VoteRequest,
)
from reference.controller.raft_messages import EPOCH_MAX

STEP_MS = 10


class Quorum:
    """Voters on a network the test controls: messages wait in `in_flight` until delivered."""

    def __init__(self, voters=(1, 2, 3), seed: int = 0) -> None:
        self.voters = tuple(voters)
        self.random = random.Random(seed)
        self.nodes = {v: RaftNode(v, self.voters, random.Random(seed * 100 + v), RaftConfig()) for v in voters}
        self.now_ms = 0
        self.in_flight: list[tuple[int, int, object]] = []  # (from, to, message)
        self.down: set[int] = set()
        self.cut: set[frozenset] = set()  # links that drop everything
        self.leaders_by_epoch: dict[int, int] = {}

    def collect(self) -> None:
        for source, node in self.nodes.items():
            for target, message in node.take_outbox():
                self.in_flight.append((source, target, message))

    def deliver_all(self, drop_rate: float = 0.0) -> None:
        while self.in_flight:
            batch, self.in_flight = self.in_flight, []
            for source, target, message in batch:
                if (target in self.down or source in self.down or frozenset((source, target)) in self.cut
                        or self.random.random() < drop_rate):
                    continue
                self.nodes[target].receive(message, self.now_ms)
            self.collect()
            self.check_election_safety()

    def run(self, duration_ms: int, drop_rate: float = 0.0) -> None:
        for _ in range(duration_ms // STEP_MS):
            self.now_ms += STEP_MS
            for voter, node in self.nodes.items():
                if voter not in self.down:
                    node.tick(self.now_ms)
            self.collect()
            self.deliver_all(drop_rate)

    def leader(self) -> RaftNode | None:
        leaders = [n for v, n in self.nodes.items() if v not in self.down and n.role is RaftRole.LEADER]
        return max(leaders, key=lambda n: n.epoch) if leaders else None

    def crash(self, voter: int) -> None:
        """Lose everything in memory; keep the durable state (epoch, vote, log, snapshot)."""
        old = self.nodes[voter]
        self.down.add(voter)
        self.nodes[voter] = RaftNode(voter, self.voters, old.random, old.config, old.epoch, old.voted_for,
                                     list(old.log), old.snapshot)

    def recover(self, voter: int) -> None:
        self.down.discard(voter)

    def check_election_safety(self) -> None:
        """§5.2 Election Safety: at most one leader per epoch, ever."""
        for voter, node in self.nodes.items():
            if node.role is RaftRole.LEADER:
                assert self.leaders_by_epoch.setdefault(node.epoch, voter) == voter, (node.epoch, self.leaders_by_epoch)

    def committed(self, voter: int) -> list[Entry]:
        node = self.nodes[voter]
        return node.log[:node.high_watermark - node.log_start_offset]


def test_5_2_followers_that_hear_no_leader_elect_one():
    quorum = Quorum()
    quorum.run(3_000)
    leader = quorum.leader()
    assert leader is not None and leader.epoch == 1
    assert all(node.leader_id == leader.node_id for node in quorum.nodes.values())


def test_5_2_a_voter_grants_one_vote_per_epoch():
    node = RaftNode(1, (1, 2, 3), random.Random(0))
    node.receive(VoteRequest(2, 1, 0, 0, pre_vote=False), now_ms=0)
    node.receive(VoteRequest(3, 1, 0, 0, pre_vote=False), now_ms=0)
    granted = [(target, response.vote_granted) for target, response in node.take_outbox()]
    assert granted == [(2, True), (3, False)] and node.voted_for == 2


def test_5_4_1_a_vote_goes_only_to_a_log_at_least_as_up_to_date():
    node = RaftNode(1, (1, 2, 3), random.Random(0), epoch=2, log=[Entry(1, "a"), Entry(2, "b")])
    node.receive(VoteRequest(2, 3, last_offset_epoch=1, last_offset=5, pre_vote=False), now_ms=0)
    node.receive(VoteRequest(3, 4, last_offset_epoch=2, last_offset=2, pre_vote=False), now_ms=0)
    assert [response.vote_granted for _, response in node.take_outbox()] == [False, True]


def test_5_3_entries_commit_once_a_majority_has_them():
    quorum = Quorum()
    quorum.run(3_000)
    leader = quorum.leader()
    quorum.down.add(next(v for v in quorum.voters if v != leader.node_id))  # one follower is gone
    commit_offset = leader.propose([{"type": "TopicRecord", "name": "t"}])
    quorum.run(500)
    assert leader.high_watermark >= commit_offset, "a majority of 2 out of 3 commits"
    assert [entry.record for _, entry in leader.take_committed()][-1] == {"type": "TopicRecord", "name": "t"}


def test_5_4_2_a_new_leader_commits_earlier_entries_through_an_entry_of_its_own_epoch():
    quorum = Quorum()
    quorum.run(3_000)
    leader = quorum.leader()
    assert leader.log[-1] == Entry(leader.epoch, LEADER_CHANGE)
    assert leader.high_watermark == leader.log_end_offset


def test_5_3_a_diverged_follower_truncates_to_the_leader():
    quorum = Quorum()
    quorum.run(3_000)
    old = quorum.leader()
    quorum.cut |= {frozenset((old.node_id, v)) for v in quorum.voters if v != old.node_id}
    old.propose([{"type": "lost"}])  # never reaches a majority
    quorum.run(5_000)
    new = quorum.leader()
    assert new.node_id != old.node_id and new.epoch > old.epoch
    new.propose([{"type": "kept"}])
    quorum.cut.clear()
    quorum.run(2_000)
    assert [e.record for e in quorum.nodes[old.node_id].log] == [e.record for e in new.log]
    assert {"type": "lost"} not in [e.record for e in new.log]


def test_7_a_follower_behind_the_snapshot_installs_it():
    quorum = Quorum()
    quorum.run(3_000)
    leader = quorum.leader()
    lagging = next(v for v in quorum.voters if v != leader.node_id)
    quorum.down.add(lagging)
    leader.propose([{"n": i} for i in range(10)])
    quorum.run(300)
    leader.take_committed()
    leader.take_snapshot(leader.applied_offset, state={"n": 9})
    assert leader.log == [] and leader.log_start_offset == leader.high_watermark
    quorum.recover(lagging)
    quorum.run(1_000)
    follower = quorum.nodes[lagging]
    assert follower.snapshot.state == {"n": 9} and follower.log_end_offset == leader.log_end_offset


def test_9_6_pre_vote_keeps_a_returning_node_from_disrupting_the_leader():
    quorum = Quorum()
    quorum.run(3_000)
    leader = quorum.leader()
    isolated = next(v for v in quorum.voters if v != leader.node_id)
    quorum.cut |= {frozenset((isolated, v)) for v in quorum.voters if v != isolated}
    quorum.run(10_000)  # many election timeouts: pre-votes fail, so its epoch never grows
    assert quorum.nodes[isolated].epoch == leader.epoch
    quorum.cut.clear()
    quorum.run(2_000)
    assert quorum.leader() is leader and leader.epoch == quorum.nodes[isolated].epoch


def test_kip_996_a_returning_node_follows_the_leader_its_refused_pre_votes_name_and_catches_up():
    """Cut off, a follower times out and becomes prospective; back on the network, its pre-votes
    are refused with the leader's id, and it must follow that leader again, not ask forever."""
    quorum = Quorum()
    quorum.run(3_000)
    leader = quorum.leader()
    returning = next(v for v in quorum.voters if v != leader.node_id)
    quorum.cut |= {frozenset((returning, v)) for v in quorum.voters if v != returning}
    quorum.run(3_000)
    assert quorum.nodes[returning].role is RaftRole.PROSPECTIVE
    commit_offset = leader.propose([{"type": "TopicRecord", "name": "while-away"}])
    quorum.cut.clear()
    quorum.run(3_000)  # past its next election timeout: it asks for pre-votes again
    node = quorum.nodes[returning]
    assert node.role is RaftRole.FOLLOWER and node.leader_id == leader.node_id and quorum.leader() is leader
    assert node.high_watermark >= commit_offset and node.log == leader.log


def test_a_lone_voter_is_its_own_majority():
    quorum = Quorum(voters=(1,))
    quorum.run(3_000)
    assert quorum.leader().node_id == 1


@pytest.mark.parametrize("seed", range(6))
def test_safety_under_random_drops_crashes_and_partitions(seed):
    """Election Safety (checked after every delivery), Log Matching and Leader Completeness:
    whatever was committed is a prefix of every later leader's log."""
    quorum = Quorum(voters=(1, 2, 3, 4, 5), seed=seed)
    chaos = random.Random(seed)
    committed_ever: list[Entry] = []
    for round_number in range(30):
        if chaos.random() < 0.3 and len(quorum.down) < 2:
            victim = chaos.choice([v for v in quorum.voters if v not in quorum.down])
            quorum.crash(victim)
        elif quorum.down and chaos.random() < 0.5:
            quorum.recover(chaos.choice(sorted(quorum.down)))
        leader = quorum.leader()
        if leader is not None:
            leader.propose([{"round": round_number}])
        quorum.run(400, drop_rate=0.1)
        for voter in quorum.voters:
            committed = quorum.committed(voter)
            shorter, longer = sorted([committed, committed_ever], key=len)
            assert longer[:len(shorter)] == shorter, "two voters committed different entries"
            committed_ever = longer
        leader = quorum.leader()
        if leader is not None:
            assert leader.log[:len(committed_ever)] == committed_ever
    for victim in list(quorum.down):
        quorum.recover(victim)
    quorum.run(5_000)
    leader = quorum.leader()
    assert leader is not None and leader.role is RaftRole.LEADER and leader.leader_id != NO_LEADER
    assert len(committed_ever) > 5


def test_an_epoch_at_the_int32_limit_asks_for_no_vote_it_cannot_encode():
    """Found by fuzzing a cluster's Vote frames: a peer's Vote at epoch 2**31 - 1 (any int32 is a
    valid epoch on the wire) made every voter's next pre-vote ask for 2**31, which no int32 holds,
    and each node's raft sender failed on it for good. Now the node waits at that epoch."""
    node = RaftNode(1, (1, 2, 3), random.Random(1), RaftConfig())
    node.tick(0)
    node.receive(VoteRequest(2, EPOCH_MAX, 0, 0, False), 0)
    node.take_outbox()
    for now_ms in range(0, 20 * RaftConfig().election_timeout_ms, STEP_MS):
        node.tick(now_ms)
    assert node.epoch == EPOCH_MAX
    assert all(message.candidate_epoch <= EPOCH_MAX for _, message in node.take_outbox()
               if isinstance(message, VoteRequest))
