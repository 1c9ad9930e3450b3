"""The controller state machine: registration and fencing, assignment, elections (clean,
unclean, preferred, controlled shutdown), AlterPartition checks, snapshots; then the state
machine replicated by the Raft core across three controllers, losing the active one."""
from __future__ import annotations

import pytest

from reference.controller.raft import LEADER_CHANGE
from reference.controller.state import NO_LEADER, ControllerState
from reference.protocol.errors import ErrorCode, KafkaError

from .test_raft_paper import Quorum


def commit(state: ControllerState, records: list[dict]) -> list[dict]:
    for record in records:
        state.apply(record)
    return records


def three_brokers(session_timeout_ms: int = 9_000) -> ControllerState:
    state = ControllerState(broker_session_timeout_ms=session_timeout_ms)
    for broker_id in (1, 2, 3):
        commit(state, state.register_broker(broker_id, f"incarnation-{broker_id}", "127.0.0.1", 9090 + broker_id, 0))
        commit(state, state.heartbeat(broker_id, state.brokers[broker_id].broker_epoch, 0))
    return state


def partition_of(state: ControllerState, topic: str, index: int = 0):
    return state.topics[state.topic_ids[topic]].partitions[index]


def test_brokers_register_with_increasing_epochs_and_start_fenced():
    state = ControllerState()
    commit(state, state.register_broker(1, "a", "h", 1, now_ms=0))
    assert state.brokers[1].fenced and state.unfenced_broker_ids == []
    with pytest.raises(KafkaError) as stale:
        state.heartbeat(1, broker_epoch=99, now_ms=0)
    assert stale.value.code == ErrorCode.STALE_BROKER_EPOCH
    commit(state, state.heartbeat(1, state.brokers[1].broker_epoch, now_ms=0))
    first_epoch = state.brokers[1].broker_epoch
    with pytest.raises(KafkaError) as duplicate:  # another process with its id while its session is valid
        state.register_broker(1, "b", "h", 1, now_ms=1)
    assert duplicate.value.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    commit(state, state.register_broker(1, "b", "h", 1, now_ms=9_001))  # restarted once the session ended
    assert state.brokers[1].broker_epoch > first_epoch and state.brokers[1].fenced
    with pytest.raises(KafkaError) as negative:
        state.register_broker(-1, "c", "h", 1, now_ms=9_001)
    assert negative.value.code == ErrorCode.INVALID_REGISTRATION


def test_replicas_are_assigned_round_robin_with_the_first_as_leader():
    state = three_brokers()
    commit(state, state.create_topic("t", 3, 3, {}))
    assignments = [partition_of(state, "t", i).replicas for i in range(3)]
    assert assignments == [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
    assert [partition_of(state, "t", i).leader for i in range(3)] == [1, 2, 3]
    with pytest.raises(KafkaError) as too_many:
        state.create_topic("u", 1, 4, {})
    assert too_many.value.code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_a_silent_broker_is_fenced_and_its_leaderships_move_within_the_isr():
    state = three_brokers(session_timeout_ms=1_000)
    commit(state, state.create_topic("t", 1, 3, {}))
    for broker_id in (2, 3):
        commit(state, state.heartbeat(broker_id, state.brokers[broker_id].broker_epoch, now_ms=900))
    assert state.fence_expired_brokers(now_ms=1_000) == []
    commit(state, state.fence_expired_brokers(now_ms=1_001))
    partition = partition_of(state, "t")
    assert state.brokers[1].fenced
    assert (partition.leader, partition.isr, partition.leader_epoch, partition.partition_epoch) == (2, [2, 3], 1, 1)


def offline_partition(unclean: bool) -> ControllerState:
    """RF 2; broker 2 leaves the ISR, then broker 1 (the leader) dies; broker 2 comes back first."""
    state = three_brokers()
    configs = {"unclean.leader.election.enable": "true"} if unclean else {}
    commit(state, state.create_topic("t", 1, 2, configs))
    topic_id = state.topic_ids["t"]
    leader_epoch, partition_epoch = partition_of(state, "t").leader_epoch, partition_of(state, "t").partition_epoch
    commit(state, state.alter_partition(1, state.brokers[1].broker_epoch, topic_id, 0, leader_epoch, partition_epoch, [1]))
    commit(state, state.heartbeat(2, state.brokers[2].broker_epoch, 0, want_shutdown=True))
    commit(state, state.heartbeat(1, state.brokers[1].broker_epoch, 0, want_shutdown=True))
    assert partition_of(state, "t").leader == NO_LEADER and partition_of(state, "t").isr == [1]
    commit(state, state.register_broker(2, "incarnation-2b", "127.0.0.1", 9092, 10))
    commit(state, state.heartbeat(2, state.brokers[2].broker_epoch, 10))
    commit(state, state.elect_leaders(preferred=False))
    return state


def test_without_unclean_election_the_partition_stays_offline_until_an_isr_member_returns():
    state = offline_partition(unclean=False)
    assert partition_of(state, "t").leader == NO_LEADER
    commit(state, state.register_broker(1, "incarnation-1b", "127.0.0.1", 9091, 20))
    commit(state, state.heartbeat(1, state.brokers[1].broker_epoch, 20))
    commit(state, state.elect_leaders(preferred=False))
    assert partition_of(state, "t").leader == 1


def test_with_unclean_election_a_replica_outside_the_isr_leads():
    state = offline_partition(unclean=True)
    partition = partition_of(state, "t")
    assert partition.leader == 2 and partition.isr == [2]


def test_alter_partition_is_fenced_by_leader_epoch_partition_epoch_and_fenced_brokers():
    state = three_brokers()
    commit(state, state.create_topic("t", 1, 3, {}))
    topic_id, epoch1 = state.topic_ids["t"], state.brokers[1].broker_epoch
    commit(state, state.alter_partition(1, epoch1, topic_id, 0, 0, 0, [1, 2]))
    assert (partition_of(state, "t").isr, partition_of(state, "t").partition_epoch) == ([1, 2], 1)
    assert partition_of(state, "t").leader_epoch == 0, "an ISR change keeps the leader epoch"
    refusals = []
    for leader_epoch, partition_epoch, isr in [(0, 0, [1, 2, 3]), (1, 1, [1, 2, 3])]:
        with pytest.raises(KafkaError) as refused:
            state.alter_partition(1, epoch1, topic_id, 0, leader_epoch, partition_epoch, isr)
        refusals.append(refused.value.code)
    commit(state, state.heartbeat(3, state.brokers[3].broker_epoch, 0, want_shutdown=True))
    with pytest.raises(KafkaError) as fenced:
        state.alter_partition(1, epoch1, topic_id, 0, 0, 1, [1, 2, 3])
    assert refusals + [fenced.value.code] == [ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.FENCED_LEADER_EPOCH,
                                              ErrorCode.INELIGIBLE_REPLICA]


def test_controlled_shutdown_moves_leadership_and_preferred_election_moves_it_back():
    state = three_brokers()
    commit(state, state.create_topic("t", 1, 3, {}))
    commit(state, state.heartbeat(1, state.brokers[1].broker_epoch, 0, want_shutdown=True))
    assert partition_of(state, "t").leader == 2
    commit(state, state.register_broker(1, "incarnation-1b", "127.0.0.1", 9091, 5))
    commit(state, state.heartbeat(1, state.brokers[1].broker_epoch, 5))
    assert state.elect_leaders() == [], "broker 1 is not back in the ISR yet"
    partition = partition_of(state, "t")
    commit(state, state.alter_partition(2, state.brokers[2].broker_epoch, state.topic_ids["t"], 0,
                                        partition.leader_epoch, partition.partition_epoch, [1, 2, 3]))
    commit(state, state.elect_leaders())
    assert partition_of(state, "t").leader == 1 and partition_of(state, "t").leader_epoch == 2


def test_a_heartbeat_after_a_controlled_shutdown_does_not_unfence_until_the_broker_registers_again():
    """A heartbeat the stopping incarnation sent before its shutdown request, decided after it,
    must not bring the broker back as a leader candidate; its next incarnation is unfenced."""
    state = three_brokers()
    commit(state, state.create_topic("t", 1, 3, {}))
    epoch = state.brokers[1].broker_epoch
    commit(state, state.heartbeat(1, epoch, 0, want_shutdown=True))
    assert state.brokers[1].fenced and state.brokers[1].in_controlled_shutdown
    assert state.heartbeat(1, epoch, 10) == [] and state.heartbeat(1, epoch, 20, want_shutdown=True) == []
    snapshot = ControllerState()
    for record in state.snapshot_records():
        snapshot.apply(record)
    assert snapshot.brokers[1].in_controlled_shutdown, "kept in the metadata log, so a new controller knows it too"
    commit(state, state.register_broker(1, "incarnation-1b", "127.0.0.1", 9091, 30))
    commit(state, state.heartbeat(1, state.brokers[1].broker_epoch, 30))
    assert not state.brokers[1].fenced and not state.brokers[1].in_controlled_shutdown


def test_a_heartbeat_counts_from_its_arrival_not_from_when_the_controller_decides_it():
    state = three_brokers(session_timeout_ms=1_000)
    for broker_id in (1, 2, 3):
        state.note_contact(broker_id, state.brokers[broker_id].broker_epoch, now_ms=900)
    state.note_contact(3, broker_epoch=99, now_ms=1_500)  # a stale incarnation's heartbeat counts for nothing
    assert state.fence_expired_brokers(now_ms=1_800) == []
    state.note_contact(2, state.brokers[2].broker_epoch, now_ms=1_850)
    commit(state, state.heartbeat(2, state.brokers[2].broker_epoch, now_ms=1_700))  # decided after a later one arrived
    fenced = []
    while records := state.fence_expired_brokers(now_ms=1_901):
        fenced += [commit(state, records)[-1]["id"]]
    assert fenced == [1, 3]


def test_snapshot_records_rebuild_the_same_state():
    state = three_brokers()
    commit(state, state.create_topic("t", 2, 2, {"retention.ms": "1000"}))
    commit(state, state.heartbeat(1, state.brokers[1].broker_epoch, 0, want_shutdown=True))
    rebuilt = ControllerState()
    commit(rebuilt, state.snapshot_records())
    assert rebuilt.brokers == state.brokers and rebuilt.topics == state.topics


def test_metadata_survives_the_loss_of_the_active_controller():
    """Three controllers replicate the metadata log; each applies what is committed."""
    quorum = Quorum(voters=(1, 2, 3))
    states = {voter: ControllerState() for voter in quorum.voters}

    def apply_committed():
        for voter, node in quorum.nodes.items():
            for _, entry in node.take_committed():
                if entry.record != LEADER_CHANGE:
                    states[voter].apply(entry.record)

    quorum.run(3_000)
    leader = quorum.leader()
    active = states[leader.node_id]
    for broker_id in (1, 2, 3):
        leader.propose(active.register_broker(broker_id, f"i{broker_id}", "127.0.0.1", 9000 + broker_id, 0))
        quorum.run(200)
        apply_committed()
        leader.propose(active.heartbeat(broker_id, active.brokers[broker_id].broker_epoch, 0))
        quorum.run(200)
        apply_committed()
    leader.propose(active.create_topic("t", 3, 3, {}))
    quorum.run(200)
    apply_committed()
    quorum.crash(leader.node_id)
    quorum.run(5_000)
    new_leader = quorum.leader()
    apply_committed()
    assert new_leader is not None and new_leader.node_id != leader.node_id
    assert "t" in states[new_leader.node_id].topic_ids
    assert states[new_leader.node_id].topics == active.topics
