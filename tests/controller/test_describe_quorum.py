"""The leader's view of the voters, as DescribeQuorum reports it: log end offsets and the
last fetch and caught-up times, from which kafka-metadata-quorum.sh computes each voter's lag."""
from __future__ import annotations

import pytest

from .test_raft_observers import OBSERVERS, quorum_with_observers
from .test_raft_paper import Quorum


def test_the_leader_reports_a_caught_up_voter_and_a_lagging_one():
    quorum = Quorum()
    quorum.run(3_000)
    leader = quorum.leader()
    behind = next(v for v in quorum.voters if v != leader.node_id)
    following = next(v for v in quorum.voters if v not in (leader.node_id, behind))
    stopped_ms = quorum.now_ms
    quorum.down.add(behind)
    for i in range(5):
        leader.propose([{"type": "TopicRecord", "name": f"t{i}"}])
    quorum.run(500)
    states = {state.replica_id: state for state in leader.voter_states(quorum.now_ms)}
    assert set(states) == set(quorum.voters)
    assert states[leader.node_id].log_end_offset == leader.log_end_offset
    assert states[leader.node_id].last_caught_up_ms == quorum.now_ms
    assert states[following].log_end_offset == leader.log_end_offset, "a live voter has caught up"
    assert states[following].last_caught_up_ms > stopped_ms
    assert leader.log_end_offset - states[behind].log_end_offset == 5, "the stopped voter lags by what it missed"
    assert states[behind].last_fetch_ms <= stopped_ms and states[behind].last_caught_up_ms <= stopped_ms


def test_only_the_leader_describes_the_voters():
    quorum = Quorum()
    quorum.run(3_000)
    follower = next(node for node in quorum.nodes.values() if node is not quorum.leader())
    with pytest.raises(AssertionError):
        follower.voter_states(quorum.now_ms)


def test_the_leader_reports_the_observers_that_fetch_apart_from_the_voters():
    quorum = quorum_with_observers()
    quorum.run(3_000)
    leader = quorum.leader()
    leader.propose([{"type": "TopicRecord", "name": "t"}])
    quorum.run(500)
    observers = {state.replica_id: state for state in leader.observer_states(quorum.now_ms)}
    assert set(observers) == set(OBSERVERS)
    assert [state.replica_id for state in leader.voter_states(quorum.now_ms)] == list(quorum.voters)
    assert all(state.log_end_offset == leader.log_end_offset and state.last_caught_up_ms > 0
               for state in observers.values())
    quorum.down.add(OBSERVERS[0])
    leader.propose([{"type": "TopicRecord", "name": "u"}])
    quorum.run(500)
    lagging = next(s for s in leader.observer_states(quorum.now_ms) if s.replica_id == OBSERVERS[0])
    assert leader.log_end_offset - lagging.log_end_offset == 1, "a stopped observer lags by what it missed"
