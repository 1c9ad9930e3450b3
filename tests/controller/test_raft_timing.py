"""When the Raft core needs a tick (`next_tick_ms`), so a shell can sleep until then: a caught-up
follower polls its leader every fetch_interval_ms, fetches again at once after an answer that
carried entries (the leader commits on that fetch), and a leader needs a tick only when its
quorum check could fail."""
from __future__ import annotations

import random

from reference.controller.raft import NO_DEADLINE_MS, FetchRequest, RaftConfig, RaftNode, RaftRole

CONFIG = RaftConfig(election_timeout_ms=500, fetch_timeout_ms=1_000, fetch_interval_ms=50)


def elect(voters=(1, 2, 3)) -> tuple[dict[int, RaftNode], int]:
    """A quorum whose node 1 won an election at the returned time, every message delivered at once."""
    nodes = {v: RaftNode(v, voters, random.Random(v), CONFIG) for v in voters}
    now_ms = 0
    for node in nodes.values():
        node.tick(now_ms)
    now_ms = nodes[1].next_tick_ms  # node 1's election timer fires first; the others' later
    nodes[1].tick(now_ms)
    deliver(nodes, now_ms)
    assert nodes[1].role is RaftRole.LEADER
    return nodes, now_ms


def deliver(nodes: dict[int, RaftNode], now_ms: int) -> int:
    """Deliver every message until none is left; returns how many were delivered."""
    delivered = 0
    while outgoing := [(target, message) for node in nodes.values() for target, message in node.take_outbox()]:
        for target, message in outgoing:
            nodes[target].receive(message, now_ms)
            delivered += 1
    return delivered


def test_a_caught_up_follower_polls_every_fetch_interval_not_every_tick():
    nodes, now_ms = elect()
    follower = nodes[2]
    follower.tick(now_ms)  # fetches the LeaderChange entry at once
    deliver(nodes, now_ms)
    follower.tick(now_ms)  # an answer with entries: the next fetch is due at once, to let the leader commit
    deliver(nodes, now_ms)
    assert nodes[1].high_watermark == nodes[1].log_end_offset
    assert follower.next_tick_ms == now_ms + CONFIG.fetch_interval_ms  # caught up: poll later
    for step_ms in range(1, CONFIG.fetch_interval_ms):
        follower.tick(now_ms + step_ms)
        assert follower.take_outbox() == [], "no fetch before the poll interval is up"
    follower.tick(now_ms + CONFIG.fetch_interval_ms)
    (target, message), = follower.take_outbox()
    assert target == 1 and isinstance(message, FetchRequest)


def test_an_answer_with_entries_makes_the_next_fetch_due_at_once():
    nodes, now_ms = elect()
    for voter in (2, 3):
        nodes[voter].tick(now_ms)
    deliver(nodes, now_ms)
    nodes[1].propose([{"type": "TopicRecord", "name": "t"}])
    later_ms = now_ms + CONFIG.fetch_interval_ms
    nodes[2].tick(later_ms)
    deliver(nodes, later_ms)  # node 2 gets the entry
    assert nodes[2].next_tick_ms <= later_ms
    nodes[2].tick(later_ms)
    deliver(nodes, later_ms)  # its next fetch tells the leader, which commits
    assert nodes[1].high_watermark == nodes[1].log_end_offset == nodes[2].log_end_offset


def test_a_leader_needs_a_tick_only_when_its_quorum_check_could_fail():
    nodes, now_ms = elect()
    nodes[2].tick(now_ms + 30)
    nodes[3].tick(now_ms + 70)
    deliver(nodes, now_ms + 70)
    # The check fails once a majority (itself and one more) was not heard within fetch_timeout_ms:
    # the most recent fetch decides.
    assert nodes[1].next_tick_ms == now_ms + 70 + CONFIG.fetch_timeout_ms
    nodes[1].tick(nodes[1].next_tick_ms - 1)
    assert nodes[1].role is RaftRole.LEADER
    nodes[1].tick(nodes[1].next_tick_ms)
    assert nodes[1].role is RaftRole.FOLLOWER, "a leader that heard from no majority resigns"


def test_a_single_voter_leader_has_nothing_timed_to_do():
    node = RaftNode(1, (1,), random.Random(1), CONFIG)
    assert node.next_tick_ms < 0, "never ticked: due at once"
    node.tick(0)
    node.tick(node.next_tick_ms)
    assert node.role is RaftRole.LEADER
    assert node.next_tick_ms == NO_DEADLINE_MS
