"""Separate controllers (KIP-500's process.roles=controller and process.roles=broker): a
controller quorum of its own, broker-only nodes that observe the metadata log, register with
the active controller and serve clients. Real processes, confluent-kafka clients, kill -9.

Two clusters, each started once for the module: 3 controllers + 3 brokers, and 1 + 2."""
from __future__ import annotations

import time

import pytest

from conformance.wire import WireClient
from reference.config import BrokerConfig
from reference.process import CONTROLLER_ID_BASE, FAST_FAILOVER, ClusterProcess
from reference.protocol.api_keys import ApiKey

from .conftest import WAIT_S, create_topic, partition_state, produce_acked, producer, read_all, wait_until

METADATA_TOPIC = "__cluster_metadata"
ELECTION_S_MAX = 20.0  # FAST_FAILOVER elects within about a second; bounded generously for a loaded machine


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ClusterProcess(str(tmp_path_factory.mktemp("separate")), 3, controllers=3,
                        overrides=FAST_FAILOVER) as started:
        yield started


@pytest.fixture(scope="module")
def small_cluster(tmp_path_factory):
    with ClusterProcess(str(tmp_path_factory.mktemp("separate-small")), 2, controllers=1,
                        overrides=FAST_FAILOVER) as started:
        yield started


def describe_quorum(cluster: ClusterProcess):
    """The metadata partition as DescribeQuorum (KIP-595) reports it, asked of a running broker,
    which forwards it to the active controller; None when no answer names a leader."""
    for broker_id in cluster.running_brokers():
        try:
            with WireClient(cluster.addresses[broker_id], timeout_s=10.0) as wire:
                response = wire.request(ApiKey.DESCRIBE_QUORUM, 1, {"topics": [
                    {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]})
        except OSError:  # no answer in time: the broker holds it while it has no active controller to forward to
            continue
        partition = response.topics[0].partitions[0]
        if partition.error_code == 0:
            return partition
    return None


def active_controller(cluster: ClusterProcess) -> int:
    quorum = describe_quorum(cluster)
    return -1 if quorum is None else quorum.leader_id


def voters_caught_up(cluster: ClusterProcess) -> bool:
    quorum = describe_quorum(cluster)
    return quorum is not None and all(voter.log_end_offset == quorum.high_watermark for voter in quorum.current_voters)


def test_the_controller_ids_cannot_clash_with_broker_ids(cluster):
    assert cluster.broker_ids == [1, 2, 3]
    assert cluster.controller_ids == [CONTROLLER_ID_BASE + 1, CONTROLLER_ID_BASE + 2, CONTROLLER_ID_BASE + 3]
    assert cluster.bootstrap == ",".join(cluster.addresses[b] for b in cluster.broker_ids)


def test_metadata_lists_the_brokers_and_names_a_broker_as_controller(cluster):
    metadata = wait_until(lambda: (m := cluster.metadata()) and len(m.brokers) == 3 and m, "three brokers")
    assert sorted(metadata.brokers) == [1, 2, 3], "a controller is never listed as a broker"
    assert metadata.controller_id in (1, 2, 3), "clients reach the controller through a broker (KIP-590)"
    wait_until(lambda: active_controller(cluster) in cluster.controller_ids, "a controller leads the quorum")


def test_describe_quorum_lists_the_controllers_as_voters_and_the_brokers_as_observers(cluster):
    quorum = wait_until(lambda: (q := describe_quorum(cluster)) and len(q.observers) == 3 and q,
                        "three observers in DescribeQuorum")
    assert sorted(voter.replica_id for voter in quorum.current_voters) == cluster.controller_ids
    assert sorted(observer.replica_id for observer in quorum.observers) == cluster.broker_ids
    assert all(observer.last_fetch_timestamp > 0 for observer in quorum.observers)


def test_a_controller_answers_api_versions_and_closes_on_client_requests(cluster):
    with WireClient(cluster.addresses[cluster.controller_ids[0]], timeout_s=5.0) as wire:
        answer = wire.request(ApiKey.API_VERSIONS, 0, {})
        assert answer.error_code == 0
        assert sorted(entry.api_key for entry in answer.api_keys) == [ApiKey.API_VERSIONS, ApiKey.DESCRIBE_QUORUM]
        wire.send(ApiKey.METADATA, 1, {"topics": None})
        assert wire.closed_by_peer(WAIT_S)


def test_a_replicated_topic_takes_acks_all_records_and_reads_them_back(cluster):
    topic = create_topic(cluster, replication_factor=3, **{"min.insync.replicas": "2"})
    wait_until(lambda: partition_state(cluster, topic)[2] == [1, 2, 3], "all three brokers in the ISR")
    values = [f"record-{i}".encode() for i in range(100)]
    acked = produce_acked(cluster, topic, values)
    assert len(acked) == len(values)
    assert [value for _, value in read_all(cluster, topic)] == values


def test_killing_the_active_controller_elects_another_that_keeps_the_metadata(cluster):
    topic = create_topic(cluster, replication_factor=3)
    killed = wait_until(lambda: (c := active_controller(cluster)) in cluster.controller_ids and c, "a controller")
    cluster.kill(killed)
    started_s = time.monotonic()
    successor = wait_until(lambda: (c := active_controller(cluster)) not in (-1, killed) and c,
                           "another active controller", ELECTION_S_MAX)
    assert successor in cluster.controller_ids and time.monotonic() - started_s < ELECTION_S_MAX
    assert topic in cluster.metadata().topics, "metadata committed before survives the failover"
    created = create_topic(cluster, replication_factor=3)
    assert partition_state(cluster, created)[1] == [1, 2, 3]
    cluster.start_node(killed)
    wait_until(lambda: voters_caught_up(cluster), "the restarted controller caught up with the metadata log")


def test_killing_a_partition_leader_elects_another_and_loses_no_acked_record(cluster):
    topic = create_topic(cluster, replication_factor=3, **{"min.insync.replicas": "2"})
    wait_until(lambda: partition_state(cluster, topic)[2] == [1, 2, 3], "all three brokers in the ISR")
    client = producer(cluster, **{"enable.idempotence": True, "message.timeout.ms": 30_000})
    acked: dict[bytes, int] = {}

    def send(values: list[bytes]) -> None:
        for value in values:
            client.produce(topic, value, partition=0, on_delivery=lambda error, m: acked.__setitem__(
                m.value(), m.offset()) if error is None else None)
        assert client.flush(WAIT_S * 2) == 0, "every record was acked or failed"

    send([f"before-{i}".encode() for i in range(200)])
    killed = cluster.leader_of(topic, 0)
    cluster.kill(killed)
    wait_until(lambda: partition_state(cluster, topic)[0] not in (-1, killed), "a new partition leader")
    send([f"after-{i}".encode() for i in range(100)])
    assert len(acked) == 300, "every record acked, before and after the kill"
    records = read_all(cluster, topic)
    assert sorted(value for _, value in records) == sorted(acked), "DUR-1, IDM-1: each acked record, once"
    assert all(acked[value] == offset for offset, value in records), "each at the offset its ack named"
    cluster.start_node(killed)
    cluster.wait_ready(WAIT_S)


def test_one_controller_and_two_brokers(small_cluster):
    metadata = small_cluster.metadata()
    assert sorted(metadata.brokers) == [1, 2] and metadata.controller_id in (1, 2)
    topic = create_topic(small_cluster, replication_factor=2)
    values = [f"small-{i}".encode() for i in range(20)]
    assert len(produce_acked(small_cluster, topic, values)) == len(values)
    assert [value for _, value in read_all(small_cluster, topic)] == values


@pytest.mark.parametrize("properties, error", [
    ({"process.roles": "broker,broker,controller"}, "process.roles must be broker, controller or broker,controller"),
    ({"process.roles": "zookeeper"}, "process.roles must be broker, controller or broker,controller"),
    ({"process.roles": "controller"}, "process.roles=controller needs controller.quorum.voters"),
    ({"process.roles": "controller", "controller.quorum.voters": "3001@127.0.0.1:9093"},
     "node.id 1 has process.roles=controller but is not in controller.quorum.voters"),
    ({"process.roles": "broker", "controller.quorum.voters": "1@127.0.0.1:9093"},
     "node.id 1 is broker-only (process.roles=broker) but is in controller.quorum.voters"),
    ({"process.roles": "broker,controller", "controller.quorum.voters": "2@127.0.0.1:9093"},
     "node.id 1 has process.roles=broker,controller but is not in controller.quorum.voters"),
])
def test_process_roles_and_voters_must_agree(properties, error):
    with pytest.raises(ValueError, match=error.replace("(", r"\(").replace(")", r"\)")):
        BrokerConfig.from_properties({"node.id": "1", **properties})


@pytest.mark.parametrize("roles", ["broker", "controller", "broker,controller", "controller,broker"])
def test_every_kafka_role_list_is_accepted(roles):
    voters = "1@127.0.0.1:9093" if "controller" in roles else "3001@127.0.0.1:9093"
    config = BrokerConfig.from_properties({"node.id": "1", "process.roles": roles, "controller.quorum.voters": voters})
    assert config.is_broker == ("broker" in roles) and config.is_controller == ("controller" in roles)
