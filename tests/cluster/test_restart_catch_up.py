"""A restarted broker serves clients only once it has caught up with the metadata log and been
unfenced (KIP-631). Before that, its view is the one it had when it died, which may name it the
leader of partitions that moved meanwhile: a client's request waits instead of being answered
from it. Real processes: the dead leader is restarted while the other two nodes are frozen
(SIGSTOP), so it cannot catch up until they resume."""
from __future__ import annotations

import os
import signal

import pytest

from conformance.wire import WireClient, WireTimeout
from reference.protocol.api_keys import ApiKey

from .conftest import WAIT_S, agreed_state, create_topic, wait_until

HELD_S = 3.0  # how long the test watches a request wait on the restarted broker


def metadata_leader(address: str, topic: str, timeout_s: float) -> int | None:
    """The partition's leader in one broker's Metadata answer; None when it names no partition."""
    with WireClient(address, timeout_s=timeout_s) as wire:
        response = wire.request(ApiKey.METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                                      "include_topic_authorized_operations": False})
    leaders = [partition.leader_id for described in response.topics for partition in described.partitions]
    return leaders[0] if leaders else None


def test_a_restarted_leader_answers_metadata_only_once_caught_up(start_cluster):
    cluster = start_cluster(3)
    topic = create_topic(cluster)
    old_leader = wait_until(lambda: agreed_state(cluster, topic), "the brokers agree")[0]
    cluster.kill(old_leader)  # kill -9: its metadata log still names it the leader
    wait_until(lambda: (agreed_state(cluster, topic) or (old_leader,))[0] not in (-1, old_leader),
               "another replica leads")
    others = [node_id for node_id in cluster.broker_ids if node_id != old_leader]
    for node_id in others:
        os.kill(cluster.nodes[node_id].process.pid, signal.SIGSTOP)
    try:
        cluster.start_node(old_leader)  # listens at once; cannot catch up while the others are frozen
        with pytest.raises(WireTimeout):
            metadata_leader(cluster.addresses[old_leader], topic, HELD_S)
    finally:
        for node_id in others:
            os.kill(cluster.nodes[node_id].process.pid, signal.SIGCONT)
    # The frozen nodes' sessions may have expired meanwhile, so the leadership may have moved on
    # between them; it cannot have come back to the restarted node, which left the ISR.
    assert metadata_leader(cluster.addresses[old_leader], topic, WAIT_S) in others, \
        "once caught up, it names a leader elected while it was down, not itself"
