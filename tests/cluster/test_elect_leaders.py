"""Preferred leaders on a 3-node cluster of real processes: ElectLeaders (KIP-460) through
confluent-kafka's AdminClient and raw v0 requests, and the automatic leader balance.

Two clusters, each started once for the module: one without automatic balance, where only
ElectLeaders moves leadership back; one that checks for imbalance every second."""
from __future__ import annotations

import pytest
from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from conformance.wire import WireClient
from reference.process import FAST_FAILOVER, ClusterProcess
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

from .conftest import WAIT_S, agreed_state, create_topic, wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ClusterProcess(str(tmp_path_factory.mktemp("elect")), 3,
                        overrides={**FAST_FAILOVER, "auto.leader.rebalance.enable": "false"}) as started:
        yield started


@pytest.fixture(scope="module")
def balancing_cluster(tmp_path_factory):
    with ClusterProcess(str(tmp_path_factory.mktemp("balance")), 3,
                        overrides={**FAST_FAILOVER, "leader.imbalance.check.interval.seconds": "1"}) as started:
        yield started


def preferred_replica(cluster: ClusterProcess, topic: str) -> int:
    return cluster.metadata(topic).topics[topic].partitions[0].replicas[0]


def lead_elsewhere_then_rejoin(cluster: ClusterProcess, topic: str, stop) -> tuple[int, int]:
    """Stop the preferred leader of partition 0 (stop(node_id)), wait until every live broker
    knows another replica leads, start it again and wait until every broker, the restarted one
    serving again among them, has it back in the ISR; the preferred replica and the leader
    the brokers then agreed on (with the automatic balance on, that may already be the
    preferred one again)."""
    preferred = preferred_replica(cluster, topic)
    assert wait_until(lambda: agreed_state(cluster, topic), "the brokers agree")[0] == preferred, \
        "a new partition is led by its preferred replica"
    stop(preferred)
    wait_until(lambda: (agreed_state(cluster, topic) or (preferred,))[0] not in (-1, preferred),
               "another replica leads")
    cluster.start_node(preferred)
    leader, _ = wait_until(lambda: (state := agreed_state(cluster, topic)) and preferred in state[1] and state,
                           f"broker {preferred} back in the ISR")
    return preferred, leader


def elect(cluster: ClusterProcess, topic: str, election_type: ElectionType) -> KafkaError | None:
    """The partition's answer to ElectLeaders: None for NONE, else the client's KafkaError."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    partition = TopicPartition(topic, 0)
    answer = admin.elect_leaders(election_type, [partition]).result(WAIT_S)[partition]
    return answer


def test_preferred_election_moves_leadership_back_then_is_not_needed(cluster):
    topic = create_topic(cluster)
    preferred, leader = lead_elsewhere_then_rejoin(cluster, topic, cluster.stop_node)  # controlled shutdown
    assert leader != preferred, "without the automatic balance nothing moves leadership back by itself"
    assert elect(cluster, topic, ElectionType.PREFERRED) is None
    wait_until(lambda: cluster.leader_of(topic, 0) == preferred, f"broker {preferred} leads again")
    assert elect(cluster, topic, ElectionType.PREFERRED).code() == KafkaError.ELECTION_NOT_NEEDED
    assert elect(cluster, topic, ElectionType.UNCLEAN).code() == KafkaError.ELECTION_NOT_NEEDED, "a leader exists"


def test_elect_leaders_v0_from_any_node_answers_per_partition(cluster):
    """v0 (preferred only, no top-level error code), sent to every node: a node that is not
    the active controller forwards it (KIP-590)."""
    topic = create_topic(cluster)
    for node_id in cluster.broker_ids:
        with WireClient(cluster.addresses[node_id], timeout_s=WAIT_S) as wire:
            response = wire.request(ApiKey.ELECT_LEADERS, 0, {"timeout_ms": 10_000, "topic_partitions": [
                {"topic": topic, "partitions": [0, 9]}, {"topic": topic + "-missing", "partitions": [0]}]})
        answers = {(result.topic, p.partition_id): p.error_code
                   for result in response.replica_election_results for p in result.partition_result}
        assert answers == {(topic, 0): ErrorCode.ELECTION_NOT_NEEDED, (topic, 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           (topic + "-missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}, node_id


def test_automatic_balance_brings_the_preferred_leader_back(balancing_cluster):
    topic = create_topic(balancing_cluster)
    preferred, _ = lead_elsewhere_then_rejoin(balancing_cluster, topic, balancing_cluster.kill)  # kill -9
    wait_until(lambda: balancing_cluster.leader_of(topic, 0) == preferred, f"broker {preferred} leads by itself")
