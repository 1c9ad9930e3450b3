"""Multi-broker checks (DUR-1, REP-1, REP-2, VIS-1, VIS-2): run only when the target is a cluster.

acks=all is refused while fewer replicas than min.insync.replicas can take the write;
Metadata's replica sets are consistent; a leader refuses fetches, a replica's as well as a
consumer's, that carry a leader epoch other than its own (KIP-320: a follower of another epoch
may hold a diverged log, so it must neither read on nor count toward the high watermark).
When the run may stop and start nodes (--node-stop-command / --node-start-command):
- acks=all is not acknowledged while an in-sync replica is down and cannot have the record;
- a record only the leader has is not served to consumers (it is above the high watermark);
- killing a partition's leader loses no acknowledged record, raises the leader epoch, and
  leaves every read offset as it was (once the new leader's high watermark has caught up).
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
RETRIABLE = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE)
ACKS_ALL_TIMEOUT_MS = 3000  # how long the acks=all produce to a partition with a stopped replica may wait


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


def _partition_zero(target, topic: str):
    """Partition 0 of topic as Metadata describes it (a broker without CreateTopics may have
    auto-created more partitions)."""
    return next(p for p in _partition_metadata(target, topic) if p.partition_index == 0)


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
    target.require_node_control("a leader kill")
    topic = target.create_topic("leader-kill", replication_factor=3, configs={"min.insync.replicas": "2"})
    before = _produce_acked(target, topic, RECORDS_BEFORE_KILL)
    old = _partition_zero(target, topic)
    with target.node_stopped(old.leader_id):
        new = _await_new_leader(target, topic, old)
        expect(new.leader_epoch > old.leader_epoch, f"a leader epoch above {old.leader_epoch} (REP-2)",
               new.leader_epoch)
        _expect_still_readable(target, topic, before, new.leader_id)


@pytest.mark.guarantee("DUR-1")
def test_acks_all_is_not_acknowledged_while_an_in_sync_replica_is_down(target):
    caps = target.capabilities
    caps.require_brokers(3, "acks=all with a stopped in-sync replica")
    target.require_node_control("stopping a replica")
    topic = target.create_topic("acks-all-waits", replication_factor=3, configs={"min.insync.replicas": "3"})
    _produce_acked(target, topic, 1)
    partition = _partition_zero(target, topic)
    follower = next(r for r in partition.replica_nodes if r != partition.leader_id)
    with target.leader_wire(topic) as wire, target.node_stopped(follower):
        response = ops.produce(wire, caps, topic, ops.values_batch([b"cannot-reach-every-replica"]), acks=-1,
                               timeout_ms=ACKS_ALL_TIMEOUT_MS)
    expect(response.error_code != ErrorCode.NONE,
           f"an error (REQUEST_TIMED_OUT or NOT_ENOUGH_REPLICAS_AFTER_APPEND) for acks=all while replica {follower} "
           "is down and min.insync.replicas=3 (replication factor 3)",
           "NONE: the leader acknowledged a record a stopped in-sync replica cannot have")


@pytest.mark.guarantee("VIS-1")
def test_a_record_only_the_leader_has_is_not_served(target):
    caps = target.capabilities
    caps.require_brokers(3, "a record above the high watermark")
    target.require_node_control("stopping a replica")
    topic = target.create_topic("above-hw", replication_factor=3)
    _produce_acked(target, topic, 1)
    partition = _partition_zero(target, topic)
    follower = next(r for r in partition.replica_nodes if r != partition.leader_id)
    with target.leader_wire(topic) as wire, target.node_stopped(follower):
        response = ops.produce(wire, caps, topic, ops.values_batch([b"leader-only"]), acks=1)
        expect(response.error_code == 0, "acks=1 produce to succeed", error_name(response.error_code))
        data = ops.fetch(wire, caps, topic, 0)
    offsets = [r.offset for r in ops.fetched_records(data)]
    expect(all(offset < data.high_watermark for offset in offsets),
           f"only offsets below the high watermark {data.high_watermark} (VIS-1): offset {response.base_offset} is "
           f"on the leader only while replica {follower} is down", f"offsets {offsets}")


@pytest.mark.guarantee("REP-1", "REP-2")
def test_a_fetch_in_another_leader_epoch_is_refused(target):
    caps = target.capabilities
    caps.require_brokers(2, "a replica's fetch")
    topic = target.create_topic("epoch-fenced", replication_factor=min(caps.broker_count, 3))
    _produce_acked(target, topic, 1)
    partition = _partition_zero(target, topic)
    follower = next(r for r in partition.replica_nodes if r != partition.leader_id)
    unknown_epoch = partition.leader_epoch + 1
    with target.leader_wire(topic) as wire:
        for fetcher, replica_id in ((f"replica {follower}", follower), ("a consumer", ops.CONSUMER_REPLICA_ID)):
            data = ops.fetch(wire, caps, topic, 0, replica_id=replica_id, current_leader_epoch=unknown_epoch)
            expect(data.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH,
                   f"UNKNOWN_LEADER_EPOCH (74) for a fetch by {fetcher} in leader epoch {unknown_epoch} while the "
                   f"leader is in epoch {partition.leader_epoch}", error_name(data.error_code))


def _produce_acked(target, topic: str, count: int) -> list:
    """Produce count records one by one with acks=all to partition 0; every record read back.
    Like a client, it asks Metadata again while the leader it was told of does not lead yet
    (brokers apply a new topic's metadata at their own pace)."""
    caps = target.capabilities
    deadline = time.monotonic() + LEADER_ELECTION_TIMEOUT_S
    produced = 0
    while True:
        with target.leader_wire(topic) as wire:
            while produced < count:
                response = ops.produce(wire, caps, topic, ops.values_batch([f"acked-{produced}".encode()]), acks=-1)
                if response.error_code != 0:
                    break
                produced += 1
            else:
                return ops.read_all(wire, caps, topic)
        expect(response.error_code in RETRIABLE and time.monotonic() < deadline,
               f"acks=all produce {produced} to succeed", error_name(response.error_code))
        time.sleep(POLL_S)


def _await_new_leader(target, topic: str, old):
    """Partition 0's metadata once a broker other than old's leader leads it."""
    deadline = time.monotonic() + LEADER_ELECTION_TIMEOUT_S
    while True:
        new = _partition_zero(target, topic)
        if new.leader_id not in (-1, old.leader_id):
            return new
        expect(time.monotonic() < deadline, f"a new leader within {LEADER_ELECTION_TIMEOUT_S:.0f} s",
               f"leader {new.leader_id}")
        time.sleep(POLL_S)


def _expect_still_readable(target, topic: str, before: list, leader_id: int) -> None:
    """Every record of `before` at its offset, once the new leader's high watermark reaches them
    (a new leader learns its followers' log end offsets before it can advance it)."""
    deadline = time.monotonic() + LEADER_ELECTION_TIMEOUT_S
    with target.leader_wire(topic) as wire:
        while len(after := ops.read_all(wire, target.capabilities, topic)) < len(before) \
                and time.monotonic() < deadline:
            time.sleep(POLL_S)
    expect(after[:len(before)] == before, f"all {len(before)} acknowledged records at their offsets on the new "
           f"leader {leader_id} (DUR-1, VIS-2)", f"{len(after)} records; first difference at "
           f"{next((a.offset for a, b in zip(after, before) if a != b), len(after))}")
