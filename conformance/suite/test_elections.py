"""Preferred leader election (REP-2): ElectLeaders (KIP-460) run when a partition's preferred
replica (its first) has returned to the ISR gives it the leadership back in a higher leader
epoch, and a second run needs no election.

Needs three brokers and node control (--node-stop-command / --node-start-command): the
preferred leader is stopped while another replica takes over, then started again. A broker
that balances leaders by itself (Kafka's auto.leader.rebalance.enable) may have moved the
leadership back before the request; ELECTION_NOT_NEEDED is then the right first answer.
"""
from __future__ import annotations

import time

import pytest

from conformance.ops import expect
from conformance.suite.test_replication import LEADER_ELECTION_TIMEOUT_S, POLL_S, _partition_zero
from conformance.target import error_name
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

PREFERRED_ELECTION = 0  # ElectLeaders' election_type, v1+
ELECTION_TIMEOUT_MS = 30_000  # the request's timeout_ms: how long the broker may take to elect


@pytest.mark.guarantee("REP-2")
def test_preferred_leader_election_brings_leadership_back_to_the_preferred_replica(target):
    caps = target.capabilities
    caps.require_brokers(3, "a preferred leader election with the preferred replica stopped and back")
    version = caps.version_or_skip(ApiKey.ELECT_LEADERS, 0, 2)
    target.require_node_control("stopping the preferred leader")
    topic = target.create_topic("preferred-leader", replication_factor=3)
    preferred = _partition_zero(target, topic).replica_nodes[0]
    _await(lambda: _partition_zero(target, topic).leader_id == preferred,
           f"replica {preferred}, the first, leading partition 0 of a new topic")
    with target.node_stopped(preferred):
        moved = _await(lambda: (p := _partition_zero(target, topic)).leader_id not in (-1, preferred) and p,
                       f"another replica than {preferred} leading partition 0")
    _await(lambda: preferred in _partition_zero(target, topic).isr_nodes, f"replica {preferred} back in the ISR")

    first = _elect_preferred(target, version, topic)
    expect(first in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED),
           f"NONE for the preferred election (or ELECTION_NOT_NEEDED (84) if replica {preferred} leads again "
           "already)", error_name(first))
    back = _await(lambda: (p := _partition_zero(target, topic)).leader_id == preferred and p,
                  f"replica {preferred} leading partition 0 again")
    expect(back.leader_epoch > moved.leader_epoch,
           f"a leader epoch above {moved.leader_epoch}, the epoch of leader {moved.leader_id} (REP-2)",
           back.leader_epoch)
    second = _elect_preferred(target, version, topic)
    expect(second == ErrorCode.ELECTION_NOT_NEEDED,
           f"ELECTION_NOT_NEEDED (84) while the preferred replica {preferred} leads", error_name(second))


def _elect_preferred(target, version: int, topic: str) -> int:
    """Partition 0's error code in the answer to a preferred ElectLeaders. A broker may not yet
    know the preferred replica is back in the ISR (PREFERRED_LEADER_NOT_AVAILABLE): asked again."""
    body = {"election_type": PREFERRED_ELECTION, "timeout_ms": ELECTION_TIMEOUT_MS,
            "topic_partitions": [{"topic": topic, "partitions": [0]}]}
    deadline = time.monotonic() + LEADER_ELECTION_TIMEOUT_S
    while True:
        response = _await(lambda: _ask(target, ApiKey.ELECT_LEADERS, version, body), "an answer to ElectLeaders")
        top_level = getattr(response, "error_code", ErrorCode.NONE)  # v1+
        expect(top_level == ErrorCode.NONE, "top-level error NONE", error_name(top_level))
        answers = [p.error_code for result in response.replica_election_results if result.topic == topic
                   for p in result.partition_result if p.partition_id == 0]
        expect(len(answers) == 1, f"one answer for {topic}-0", response.replica_election_results)
        if answers[0] != ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE or time.monotonic() > deadline:
            return answers[0]
        time.sleep(POLL_S)


def _ask(target, api_key: int, version: int, body: dict):
    with target.wire() as wire:
        return wire.request(api_key, version, body)


def _await(condition, what: str):
    """condition()'s first true value. A connection a broker drops or refuses meanwhile (one
    may be stopping or starting) counts as not yet, and a client would ask again."""
    deadline = time.monotonic() + LEADER_ELECTION_TIMEOUT_S
    while True:
        try:
            value = condition()
        except OSError as error:
            value, seen = None, repr(error)
        else:
            seen = "not yet"
        if value:
            return value
        expect(time.monotonic() < deadline, f"{what} within {LEADER_ELECTION_TIMEOUT_S:.0f} s", seen)
        time.sleep(POLL_S)
