"""The long-polled Fetch of KIP-595 and when the Raft core needs a tick (`next_tick_ms`), so a
shell can sleep until then: a follower sends its next Fetch as soon as an answer arrives, the
leader holds a Fetch it has nothing new for up to its max wait and answers it when entries are
appended or the high watermark moves, and a leader whose followers' fetches are held still
resigns when it stops hearing from a majority."""
from __future__ import annotations

import random

from reference.controller.raft import (
    NO_DEADLINE_MS,
    EndQuorumEpoch,
    FetchRequest,
    FetchResponse,
    RaftConfig,
    RaftNode,
    RaftRole,
)
from reference.node.raft_rpcs import from_request, to_request
from reference.protocol.messages import decode_request, encode_request
from reference.protocol.headers import parse_request_header

CONFIG = RaftConfig(election_timeout_ms=500, fetch_timeout_ms=1_000)
TOPIC = {"type": "TopicRecord", "name": "t"}


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


def deliver(nodes: dict[int, RaftNode], now_ms: int) -> list[tuple[int, object]]:
    """Deliver every message until none is left; returns them as (target, message)."""
    delivered = []
    while outgoing := [(target, message) for node in nodes.values() for target, message in node.take_outbox()]:
        for target, message in outgoing:
            nodes[target].receive(message, now_ms)
        delivered += outgoing
    return delivered


def caught_up(nodes: dict[int, RaftNode], now_ms: int) -> None:
    """The followers fetch the leader's entries; the leader holds their next fetches."""
    for voter in (2, 3):
        nodes[voter].tick(now_ms)
    deliver(nodes, now_ms)
    assert nodes[1].high_watermark == nodes[1].log_end_offset == nodes[2].log_end_offset == nodes[3].log_end_offset
    assert nodes[2].high_watermark == nodes[3].high_watermark == nodes[1].high_watermark


def run_until(nodes: dict[int, RaftNode], now_ms: int, until_ms: int) -> list[tuple[int, object]]:
    """Tick each node exactly when it asks to be ticked, delivering every message at once."""
    delivered = []
    while (due_ms := min(node.next_tick_ms for node in nodes.values())) <= until_ms:
        now_ms = max(now_ms, due_ms)
        for node in nodes.values():
            if node.next_tick_ms <= now_ms:
                node.tick(now_ms)
        delivered += deliver(nodes, now_ms)
    return delivered


def test_the_leader_holds_a_caught_up_fetch_until_its_max_wait():
    nodes, now_ms = elect()
    caught_up(nodes, now_ms)
    assert CONFIG.fetch_max_wait_ms == CONFIG.fetch_timeout_ms // 4
    assert nodes[1].next_tick_ms == now_ms + CONFIG.fetch_max_wait_ms, "the held fetches are due then"
    nodes[1].tick(now_ms + CONFIG.fetch_max_wait_ms - 1)
    assert nodes[1].take_outbox() == [], "nothing new: the fetches stay held"
    nodes[1].tick(now_ms + CONFIG.fetch_max_wait_ms)
    answers = nodes[1].take_outbox()
    assert sorted(target for target, _ in answers) == [2, 3]
    assert all(isinstance(answer, FetchResponse) and answer.entries == () for _, answer in answers)


def test_an_answer_makes_the_follower_fetch_again_at_once_and_only_then():
    nodes, now_ms = elect()
    caught_up(nodes, now_ms)
    follower = nodes[2]
    assert follower.next_tick_ms == now_ms + CONFIG.fetch_request_timeout_ms, "a fetch is in flight"
    follower.tick(now_ms + CONFIG.fetch_max_wait_ms)
    assert follower.take_outbox() == [], "no second fetch while the first is held"
    answer_ms = now_ms + CONFIG.fetch_max_wait_ms
    nodes[1].tick(answer_ms)
    for target, answer in nodes[1].take_outbox():
        nodes[target].receive(answer, answer_ms)
    (target, fetch), = follower.take_outbox()
    assert target == 1 and isinstance(fetch, FetchRequest) and fetch.max_wait_ms == CONFIG.fetch_max_wait_ms


def test_a_lost_answer_is_fetched_again_after_the_request_timeout():
    nodes, now_ms = elect()
    caught_up(nodes, now_ms)
    nodes[1].tick(now_ms + CONFIG.fetch_max_wait_ms)
    nodes[1].take_outbox()  # the answers are lost
    resend_ms = now_ms + CONFIG.fetch_request_timeout_ms
    assert CONFIG.fetch_max_wait_ms < CONFIG.fetch_request_timeout_ms < CONFIG.fetch_timeout_ms
    assert nodes[2].next_tick_ms == resend_ms
    nodes[2].tick(resend_ms)
    (target, fetch), = nodes[2].take_outbox()
    assert target == 1 and isinstance(fetch, FetchRequest)


def test_an_append_answers_the_held_fetches_and_the_next_fetch_commits_at_once():
    nodes, now_ms = elect()
    caught_up(nodes, now_ms)
    later_ms = now_ms + 10
    commit_offset = nodes[1].propose([TOPIC])
    answered = nodes[1].take_outbox()
    assert sorted(target for target, _ in answered) == [2, 3]
    assert all(answer.entries[-1].record == TOPIC for _, answer in answered)
    for target, answer in answered:
        nodes[target].receive(answer, later_ms)
    deliver(nodes, later_ms)  # no tick anywhere: the follower's next fetch tells the leader, which commits
    assert nodes[1].high_watermark == commit_offset
    assert nodes[2].high_watermark == nodes[3].high_watermark == commit_offset, "the new HW is answered at once"
    assert nodes[1].next_tick_ms == later_ms + CONFIG.fetch_max_wait_ms, "and the followers' fetches held again"


def test_the_max_wait_and_high_watermark_of_a_fetch_travel_between_nodes():
    fetch = FetchRequest(2, 3, 10, 2, high_watermark=9, max_wait_ms=CONFIG.fetch_max_wait_ms)
    api_key, version, body = to_request(fetch, "cluster", 1)
    frame = encode_request(api_key, version, 7, "node-2", body)[4:]
    header, body_offset = parse_request_header(frame)
    assert from_request(header.api_key, decode_request(api_key, version, frame[body_offset:])) == fetch


def test_a_fetch_with_an_older_high_watermark_is_answered_at_once():
    nodes, now_ms = elect()
    caught_up(nodes, now_ms)
    leader = nodes[1]
    stale = FetchRequest(2, leader.epoch, leader.log_end_offset, leader.last_epoch, leader.high_watermark - 1,
                         CONFIG.fetch_max_wait_ms)
    leader.receive(stale, now_ms)
    (target, answer), = leader.take_outbox()
    assert target == 2 and answer.high_watermark == leader.high_watermark and answer.entries == ()


def test_a_fetch_without_max_wait_is_answered_at_once():
    nodes, now_ms = elect()
    caught_up(nodes, now_ms)
    leader = nodes[1]
    leader.receive(FetchRequest(3, leader.epoch, leader.log_end_offset, leader.last_epoch, leader.high_watermark),
                   now_ms)
    (target, answer), = leader.take_outbox()
    assert target == 3 and isinstance(answer, FetchResponse)


def test_an_idle_quorum_exchanges_two_messages_per_follower_per_max_wait():
    nodes, now_ms = elect()
    caught_up(nodes, now_ms)
    idle_ms = 10 * CONFIG.fetch_timeout_ms
    delivered = run_until(nodes, now_ms, now_ms + idle_ms)
    assert nodes[1].role is RaftRole.LEADER and all(node.epoch == nodes[1].epoch for node in nodes.values())
    rounds = idle_ms // CONFIG.fetch_max_wait_ms
    assert {type(message) for _, message in delivered} == {FetchRequest, FetchResponse}
    assert len(delivered) == 2 * 2 * rounds, "one fetch and one answer per follower per max wait"


def test_a_leader_whose_followers_stop_fetching_resigns_after_one_and_a_half_fetch_timeouts():
    nodes, now_ms = elect()
    nodes[2].tick(now_ms + 30)
    deliver(nodes, now_ms + 30)
    nodes[3].tick(now_ms + 70)
    deliver(nodes, now_ms + 70)
    # Both followers' next fetches are held; the check fails once a majority (itself and one
    # more) was not heard within 1.5x fetch_timeout_ms (Kafka's LeaderState checkQuorumTimeoutMs):
    # the most recent fetch decides.
    leader = nodes[1]
    leader.tick(now_ms + 70 + CONFIG.fetch_max_wait_ms)
    leader.take_outbox()  # the answers to the held fetches are lost, and the followers stop
    assert CONFIG.check_quorum_timeout_ms == 1_500
    assert leader.next_tick_ms == now_ms + 70 + CONFIG.check_quorum_timeout_ms
    leader.tick(now_ms + 70 + CONFIG.fetch_timeout_ms)
    assert leader.role is RaftRole.LEADER, "one fetch timeout of silence is not yet enough"
    leader.tick(leader.next_tick_ms - 1)
    assert leader.role is RaftRole.LEADER
    leader.tick(leader.next_tick_ms)
    assert leader.role is RaftRole.FOLLOWER, "a leader that heard from no majority resigns"


def test_a_leader_that_steps_down_drops_the_fetches_it_held():
    nodes, now_ms = elect()
    caught_up(nodes, now_ms)
    leader = nodes[1]
    leader.receive(FetchRequest(2, leader.epoch + 1, leader.log_end_offset, leader.last_epoch), now_ms)
    assert leader.role is RaftRole.FOLLOWER
    leader.tick(now_ms + CONFIG.fetch_max_wait_ms)
    assert not [answer for _, answer in leader.take_outbox() if isinstance(answer, FetchResponse)]


def test_a_single_voter_leader_has_nothing_timed_to_do():
    node = RaftNode(1, (1,), random.Random(1), CONFIG)
    assert node.next_tick_ms < 0, "never ticked: due at once"
    node.tick(0)
    node.tick(node.next_tick_ms)
    assert node.role is RaftRole.LEADER
    assert node.next_tick_ms == NO_DEADLINE_MS


def test_a_leader_that_resigns_is_succeeded_before_its_followers_would_miss_it():
    """EndQuorumEpoch (KIP-595): a leader that shuts down tells its followers, which stand within
    half an election timeout instead of waiting out the fetch timeout for the silent leader."""
    nodes, now_ms = elect()
    caught_up(nodes, now_ms)
    old_epoch = nodes[1].epoch
    nodes[1].resign(now_ms)
    survivors = {2: nodes[2], 3: nodes[3]}
    ends = nodes[1].take_outbox()
    assert sorted(target for target, _ in ends) == [2, 3]
    for target, message in ends:
        assert isinstance(message, EndQuorumEpoch) and message.leader_epoch == old_epoch
        survivors[target].receive(message, now_ms)
    resigned_ms = now_ms
    while not any(node.role is RaftRole.LEADER for node in survivors.values()):
        now_ms = max(now_ms, min(node.next_tick_ms for node in survivors.values()))
        assert now_ms - resigned_ms < CONFIG.fetch_timeout_ms, "no successor before the fetch timeout"
        for node in survivors.values():
            if node.next_tick_ms <= now_ms:
                node.tick(now_ms)
        while outgoing := [(t, m) for node in survivors.values() for t, m in node.take_outbox() if t in survivors]:
            for target, message in outgoing:
                survivors[target].receive(message, now_ms)
    leader, = [node for node in survivors.values() if node.role is RaftRole.LEADER]
    assert leader.epoch > old_epoch and now_ms - resigned_ms <= CONFIG.election_timeout_ms
