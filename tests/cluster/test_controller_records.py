"""The active controller's records, on ClusterBrokers driven by hand (sans-IO): a topic is
created once however often it is asked for before its records are applied, a command whose
records would not replay is refused before they reach the quorum, a node that is not the
active controller asks the controller instead of making records of its own, and a restarted
node does not show itself live on its predecessor's registration."""
from __future__ import annotations

import pytest

from reference.config import BrokerConfig
from reference.node.cluster import ClusterBroker
from reference.protocol.errors import ErrorCode, KafkaError

ELECTION_MS = 5_000  # past the election timeout with its jitter


def cluster_broker(tmp_path, voters: str) -> ClusterBroker:
    return ClusterBroker(BrokerConfig(node_id=1, log_dirs=str(tmp_path), process_roles="broker,controller",
                                      controller_quorum_voters=voters), now_ms=0)


@pytest.fixture
def controller(tmp_path) -> ClusterBroker:
    """Node 1, the only voter: the active controller, registered and unfenced."""
    broker = cluster_broker(tmp_path, "1@127.0.0.1:9092")
    for now_ms in (0, ELECTION_MS):  # the first tick starts the election timer, the second runs it out
        broker.raft.tick(now_ms)
    broker.apply_committed(ELECTION_MS)
    assert broker.is_active_controller
    broker.register_broker(1, broker.incarnation_id, "127.0.0.1", 9092, ELECTION_MS)
    commit(broker)
    broker.broker_heartbeat(1, broker.broker_epoch, want_shutdown=False, now_ms=ELECTION_MS)
    commit(broker)
    assert broker.live_broker_count == 1
    return broker


def commit(broker: ClusterBroker) -> None:
    """What the shell does after a controller command: propose the pending records, apply them."""
    broker.raft.propose(broker.take_pending_records())
    broker.apply_committed(ELECTION_MS)


def topic_records(broker: ClusterBroker) -> list[str]:
    return [entry.record["name"] for entry in broker.raft.log if entry.record["type"] == "TopicRecord"]


def test_a_topic_asked_for_again_before_its_records_are_applied_is_created_once(controller):
    controller.create_topic("t", -1, -1, {}, validate_only=False, now_ms=ELECTION_MS)  # pending
    with pytest.raises(KafkaError) as raised:  # e.g. a second client's Metadata auto-creation
        controller.create_topic("t", -1, -1, {}, validate_only=False, now_ms=ELECTION_MS)
    assert raised.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    controller.raft.propose(controller.take_pending_records())  # proposed, not yet applied
    with pytest.raises(KafkaError) as raised:  # e.g. a CreateTopics retried after a commit timed out
        controller.create_topic("t", -1, -1, {}, validate_only=False, now_ms=ELECTION_MS)
    assert raised.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    controller.apply_committed(ELECTION_MS)
    assert topic_records(controller) == ["t"] and controller.topic("t").partition_count == 1


def test_a_command_whose_records_would_not_replay_is_refused_before_the_quorum_sees_them(controller):
    controller.create_topic("t", 1, 1, {}, validate_only=False, now_ms=ELECTION_MS)
    commit(controller)
    controller.create_partitions("t", 3, validate_only=False, now_ms=ELECTION_MS)  # partitions 1 and 2, pending
    with pytest.raises(KafkaError) as raised:  # decided from the applied state, it adds partitions 1 and 2 again
        controller.create_partitions("t", 3, validate_only=False, now_ms=ELECTION_MS)
    assert raised.value.code == ErrorCode.UNKNOWN_SERVER_ERROR and "would not replay" in raised.value.message
    commit(controller)  # every node would have stopped on the second PartitionRecord for partition 1
    added = [entry.record["partition_id"] for entry in controller.raft.log if entry.record["type"] == "PartitionRecord"]
    assert added == [0, 1, 2] and controller.topic("t").partition_count == 3
    assert all(controller.partition_metadata("t", index)["leader_id"] == 1 for index in range(3))


def test_a_node_that_is_not_the_active_controller_asks_it_for_an_auto_created_topic(tmp_path):
    follower = cluster_broker(tmp_path, "1@127.0.0.1:9092,2@127.0.0.1:9093,3@127.0.0.1:9094")
    assert not follower.is_active_controller
    with pytest.raises(KafkaError) as raised:
        follower.create_topic("t", -1, -1, {}, validate_only=False, now_ms=0)
    assert raised.value.code == ErrorCode.LEADER_NOT_AVAILABLE
    assert follower.pending_records == [] and follower.wanted_internal_topics == {"t": (-1, -1, {})}


def test_a_restarted_node_shows_itself_fenced_until_its_own_incarnation_is_registered_and_unfenced(
        controller, tmp_path):
    controller.close()  # its process is killed: the log holds its registration, unfenced
    restarted = cluster_broker(tmp_path, "1@127.0.0.1:9092")
    for now_ms in (0, ELECTION_MS):
        restarted.raft.tick(now_ms)
    restarted.apply_committed(ELECTION_MS)
    assert not restarted.controller.brokers[1].fenced  # the predecessor, still counted live by the controller

    def fenced_in_metadata() -> bool:
        return {broker_id: fenced for broker_id, _, _, fenced in restarted.metadata_brokers()}[1]

    assert fenced_in_metadata()  # clients are not sent to a broker that is not registered yet
    restarted.register_broker(1, restarted.incarnation_id, "127.0.0.1", 9092, ELECTION_MS)
    commit(restarted)  # fences the predecessor, registers this incarnation fenced
    assert restarted.broker_epoch >= 0 and fenced_in_metadata()
    restarted.broker_heartbeat(1, restarted.broker_epoch, want_shutdown=False, now_ms=ELECTION_MS)
    commit(restarted)
    assert not fenced_in_metadata()
