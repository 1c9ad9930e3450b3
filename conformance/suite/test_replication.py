"""Multi-broker checks (DUR-1, REP-2, VIS-1, VIS-2): run only when the target is a cluster.

acks=all is refused while fewer replicas than min.insync.replicas can take the write;
Metadata's replica sets are consistent; and, when the run may stop and start nodes
(--node-stop-command / --node-start-command), killing a partition's leader loses no
acknowledged record, raises the leader epoch, and leaves every read offset as it was.
"""
from __future__ import annotations

import time

import pytest

from conformance import ops
from conformance.ops import expect
from conformance.target import error_name
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

COLUMN = "wire"
LEADER_ELECTION_TIMEOUT_S = 60.0
POLL_S = 0.2
RECORDS_BEFORE_KILL = 50


@pytest.mark.guarantee("DUR-1")
def test_acks_all_is_refused_below_min_insync_replicas(target):
    caps = target.capabilities
    caps.require_brokers(2, "acks=all against min.insync.replicas")
    caps.require("a topic with min.insync.replicas", ApiKey.CREATE_TOPICS)
    replicas = min(caps.broker_count, 3)
    topic = target.create_topic("min-isr", replication_factor=replicas,
                                configs={"min.insync.replicas": str(replicas + 1)})
    with target.leader_wire(topic) as wire:
        refused = ops.produce(wire, caps, topic, ops.values_batch([b"needs-more-replicas"]), acks=-1)
        accepted = ops.produce(wire, caps, topic, ops.values_batch([b"leader-only"]), acks=1)
    expect(refused.error_code in (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND),
           f"NOT_ENOUGH_REPLICAS (19) for acks=all with {replicas} replicas and min.insync.replicas={replicas + 1}",
           error_name(refused.error_code))
    expect(accepted.error_code == 0, "acks=1 accepted (min.insync.replicas applies to acks=all only)",
           error_name(accepted.error_code))


def _partition_metadata(target, topic: str):
    caps = target.capabilities
    version = caps.version_or_skip(ApiKey.METADATA, 7, 12)  # v7 adds leader_epoch
    with target.wire() as wire:
        return wire.request(ApiKey.METADATA, version, {"topics": [{"name": topic}],
                                                       "allow_auto_topic_creation": False}).topics[0].partitions


@pytest.mark.guarantee("REP-2")
def test_metadata_names_one_leader_among_the_replicas(target):
    caps = target.capabilities
    caps.require_brokers(2, "replica set checks")
    topic = target.create_topic("replica-sets", partitions=3, replication_factor=min(caps.broker_count, 3))
    broker_ids = {b.node_id for b in caps.brokers}
    for p in _partition_metadata(target, topic):
        expect(p.leader_id in p.replica_nodes, f"partition {p.partition_index}'s leader among its replicas",
               f"leader {p.leader_id}, replicas {p.replica_nodes}")
        expect(set(p.isr_nodes) <= set(p.replica_nodes) and p.leader_id in p.isr_nodes,
               f"partition {p.partition_index}'s ISR within its replicas and holding the leader",
               f"ISR {p.isr_nodes}, replicas {p.replica_nodes}")
        expect(set(p.replica_nodes) <= broker_ids, "replicas on listed brokers", p.replica_nodes)
        expect(p.leader_epoch >= 0, "a leader epoch", p.leader_epoch)


@pytest.mark.guarantee("DUR-1", "REP-2", "VIS-2")
def test_killing_the_leader_loses_no_acknowledged_record(target):
    caps = target.capabilities
    caps.require_brokers(3, "a leader kill with a surviving in-sync replica")
    if not target.controls_nodes:
        pytest.skip("leader kills need --node-stop-command and --node-start-command")
    topic = target.create_topic("leader-kill", replication_factor=3, configs={"min.insync.replicas": "2"})
    with target.leader_wire(topic) as wire:
        for i in range(RECORDS_BEFORE_KILL):
            response = ops.produce(wire, caps, topic, ops.values_batch([f"acked-{i}".encode()]), acks=-1)
            expect(response.error_code == 0, f"acks=all produce {i} to succeed", error_name(response.error_code))
        before = ops.read_all(wire, caps, topic)
    (old,) = _partition_metadata(target, topic)
    target.stop_node(old.leader_id)
    try:
        deadline = time.monotonic() + LEADER_ELECTION_TIMEOUT_S
        while True:
            (new,) = _partition_metadata(target, topic)
            if new.leader_id not in (-1, old.leader_id):
                break
            expect(time.monotonic() < deadline, f"a new leader within {LEADER_ELECTION_TIMEOUT_S:.0f} s",
                   f"leader {new.leader_id}")
            time.sleep(POLL_S)
        expect(new.leader_epoch > old.leader_epoch, f"a leader epoch above {old.leader_epoch} (REP-2)",
               new.leader_epoch)
        with target.leader_wire(topic) as wire:
            after = ops.read_all(wire, caps, topic)
        expect(after[:len(before)] == before, f"all {len(before)} acknowledged records at their offsets on the new "
               f"leader {new.leader_id} (DUR-1, VIS-2)", f"{len(after)} records; first difference at "
               f"{next((a.offset for a, b in zip(after, before) if a != b), len(after))}")
    finally:
        target.start_node(old.leader_id)
