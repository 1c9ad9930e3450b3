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
When it may also pause and resume nodes (--node-pause-command / --node-resume-command):
- a follower whose high watermark lags records the leader acknowledged keeps them through
  two leader changes, the first to a leader it cannot reach (KIP-101).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from conformance import ops
from conformance.ops import expect
from conformance.target import error_name
from conformance.wire import answered_entry
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

COLUMN = "wire"
LEADER_ELECTION_TIMEOUT_S = 60.0
POLL_S = 0.2
RECORDS_BEFORE_KILL = 50
RETRIABLE = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_ENOUGH_REPLICAS,
             ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
ACKS_ALL_TIMEOUT_MS = 3000  # how long the acks=all produce to a partition with a stopped replica may wait
# The KIP-101 scenario (test_a_follower_behind_on_the_high_watermark_...). Waits that stage it,
# where nothing can be observed; a correct broker passes whatever they are.
RECORDS_ABOVE_FOLLOWER_HW = 20
FOLLOWER_FETCH_S = (1.0, 2.0, 4.0)  # a running follower fetches what the leader appended; one more try each
FETCH_ANSWER_S = 0.5  # the leader writes its answer to a paused follower's woken fetch
ACKS_AFTER_RESUME_MS = 15_000  # an acks=all produce waits this long past its stage for the acknowledgement
RESPONSE_MARGIN_S = 10.0  # past the produce's own timeout, for a loaded broker to answer it
HEARTBEAT_MARGIN_S = 0.5
BROKER_RESOURCE = 4  # DescribeConfigs resource type
HEARTBEAT_INTERVAL_CONFIG = "broker.heartbeat.interval.ms"
KAFKA_HEARTBEAT_INTERVAL_MS = 2000


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
        answer = wire.request(ApiKey.METADATA, version, {"topics": [{"name": topic}],
                                                         "allow_auto_topic_creation": False})
    return answered_entry(f"METADATA v{version} of {topic}", answer.topics, "name", topic, "topic").partitions


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


def _produce_acked(target, topic: str, count: int, label: str = "acked") -> list:
    """Produce count records (values label-0, label-1, ...) one by one with acks=all to
    partition 0; every record read back.
    Like a client, it asks Metadata again while the leader it was told of does not lead yet
    (brokers apply a new topic's metadata at their own pace)."""
    caps = target.capabilities
    deadline = time.monotonic() + LEADER_ELECTION_TIMEOUT_S
    produced = 0
    while True:
        with target.leader_wire(topic) as wire:
            while produced < count:
                response = ops.produce(wire, caps, topic, ops.values_batch([f"{label}-{produced}".encode()]), acks=-1)
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


@dataclass(frozen=True)
class Stage:
    """The replicas of the KIP-101 scenario, in the order the controller elects them."""
    leader: int
    next_leader: int
    lagging_follower: int


@pytest.mark.guarantee("DUR-1")
def test_a_follower_behind_on_the_high_watermark_keeps_acknowledged_records_through_two_leader_changes(target):
    """KIP-101's first scenario, on a live cluster. Replicas A (leader), B, C, all in sync.
    1. B pauses; a batch goes to A with acks=all; C fetches it, so the high watermark C was
       told stays below it. C pauses; B resumes and fetches; A acknowledges the batch.
    2. A dies; C resumes (A never tells it the new high watermark). After one heartbeat
       interval B pauses, then A starts again. A's old registration ends (its session runs out,
       or its restart replaces it) before B's session does, so B is elected while paused, and C
       learns of B. C must not cut its log to its high watermark; it asks B where its epoch
       ends (OffsetForLeaderEpoch), which B cannot answer while paused.
    3. B's session ends; C, the only live in-sync replica, leads. Every acknowledged record must
       be there, once, at its offset (DUR-1): truncating to the high watermark loses the batch."""
    caps = target.capabilities
    caps.require_brokers(3, "a follower behind on the high watermark through two leader changes")
    target.require_node_control("a leader kill")
    target.require_pause_control("pausing replicas")
    topic = target.create_topic("follower-hw", replication_factor=3, configs={"min.insync.replicas": "2"})
    acked = [(r.offset, r.value) for r in _produce_acked(target, topic, 1)]
    partition = _partition_zero(target, topic)
    stage = Stage(partition.leader_id, *[r for r in partition.replica_nodes if r != partition.leader_id])
    heartbeat_s = _broker_config_ms(target, stage.leader, HEARTBEAT_INTERVAL_CONFIG, KAFKA_HEARTBEAT_INTERVAL_MS) / 1000
    with target.nodes_restored():
        acked += _acknowledge_records_above_a_follower_high_watermark(target, topic, stage)
        target.stop_node(stage.leader)
        target.resume_node(stage.lagging_follower)
        time.sleep(heartbeat_s + HEARTBEAT_MARGIN_S)  # staging: B's last heartbeat comes after A's
        target.pause_node(stage.next_leader)
        target.start_node(stage.leader, await_live=False)
        leaders = _leaders_until(target, topic, stage.lagging_follower)
    after = _produce_acked(target, topic, 1, "last")  # once acknowledged, all before it is below the HW
    offsets_by_value: dict[bytes, list[int]] = {}
    for record in after:
        offsets_by_value.setdefault(record.value, []).append(record.offset)
    wrong = [(offset, offsets_by_value.get(value, [])) for offset, value in acked
             if offsets_by_value.get(value) != [offset]]
    expect(not wrong, f"each of the {len(acked)} acknowledged records once, at its offset (DUR-1), after replica "
           f"{stage.lagging_follower} (behind on the high watermark) learnt of leader {stage.next_leader} and then "
           f"led", f"{len(wrong)} not so (acknowledged offset: offsets holding its value): "
           f"{', '.join(f'{o}: {found}' for o, found in wrong[:5])}{' ...' if len(wrong) > 5 else ''}; "
           f"leaders after the kill of {stage.leader}: {leaders}")


def _acknowledge_records_above_a_follower_high_watermark(target, topic: str, stage: Stage) -> list[tuple]:
    """Step 1: (offset, value) of records A acknowledged with acks=all while C, paused, holds
    them but was last told a high watermark below them. Nothing shows whether C fetched the
    batch before it paused; the acknowledgement does (C is in the ISR), so a stage that missed
    is run again with a longer wait."""
    caps = target.capabilities
    version = caps.version_or_skip(ApiKey.PRODUCE, *ops.PRODUCE_RANGE)
    leader_address = caps.broker(stage.leader).address
    for attempt, follower_fetch_s in enumerate(FOLLOWER_FETCH_S):
        values = [f"above-hw-{attempt}-{i}".encode() for i in range(RECORDS_ABOVE_FOLLOWER_HW)]
        stage_ms = int((follower_fetch_s + FETCH_ANSWER_S) * 1000) + ACKS_AFTER_RESUME_MS
        with target.wire(leader_address) as producer, target.wire(leader_address) as waker:
            target.pause_node(stage.next_leader)
            sent = producer.send(ApiKey.PRODUCE, version, ops.produce_body(topic, ops.values_batch(values), 0, -1,
                                                                           timeout_ms=stage_ms))
            time.sleep(follower_fetch_s)
            target.pause_node(stage.lagging_follower)
            # An acks=1 record answers the fetch C left parked, with the high watermark B holds back.
            ops.produce(waker, caps, topic, ops.values_batch([b"answers-the-paused-fetch"]), acks=1)
            time.sleep(FETCH_ANSWER_S)
            target.resume_node(stage.next_leader)
            response = producer.receive(ApiKey.PRODUCE, version, sent, timeout_s=stage_ms / 1000 + RESPONSE_MARGIN_S)
        request = f"PRODUCE v{version} to {topic}-0"
        answer = answered_entry(request, answered_entry(request, response.responses, "name", topic, "topic")
                                .partition_responses, "index", 0, "partition")
        if answer.error_code == ErrorCode.NONE:
            return [(answer.base_offset + i, value) for i, value in enumerate(values)]
        target.resume_node(stage.lagging_follower)
    pytest.skip(f"could not stage: replica {stage.lagging_follower} had not fetched a batch within "
                f"{FOLLOWER_FETCH_S[-1]:.0f} s of its append ({error_name(answer.error_code)})")


def _leaders_until(target, topic: str, wanted: int) -> list[int]:
    """Partition 0's leaders as Metadata shows them, in order, until `wanted` leads or the
    election bound passes (a broker may elect otherwise; the test then checks what it did)."""
    leaders: list[int] = []
    deadline = time.monotonic() + LEADER_ELECTION_TIMEOUT_S
    while (not leaders or leaders[-1] != wanted) and time.monotonic() < deadline:
        try:  # a restarting node may refuse or close the connection, or not know the topic yet
            leader = next((p.leader_id for p in _partition_metadata(target, topic) if p.partition_index == 0), None)
        except OSError:
            leader = None
        if leader is not None and (not leaders or leaders[-1] != leader):
            leaders.append(leader)
        time.sleep(POLL_S)
    return leaders


def _broker_config_ms(target, node_id: int, name: str, default_ms: int) -> int:
    """A broker's setting (DescribeConfigs), or Kafka's default when the broker does not say."""
    version = target.capabilities.version(ApiKey.DESCRIBE_CONFIGS, 1, 4)
    if version is None:
        return default_ms
    with target.wire(target.capabilities.broker(node_id).address) as wire:
        results = wire.request(ApiKey.DESCRIBE_CONFIGS, version, {
            "resources": [{"resource_type": BROKER_RESOURCE, "resource_name": str(node_id),
                           "configuration_keys": [name]}],
            "include_synonyms": False, "include_documentation": False}).results
    result = answered_entry(f"DESCRIBE_CONFIGS v{version} of broker {node_id}", results, "resource_name",
                            str(node_id), "resource")
    entry = next((c for c in result.configs if c.name == name), None)
    return int(entry.value) if result.error_code == ErrorCode.NONE and entry and entry.value else default_ms
