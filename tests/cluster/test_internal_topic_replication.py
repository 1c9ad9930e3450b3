"""`offsets.topic.replication.factor` is enforced when `__consumer_offsets` is made (KIP-115,
Kafka 0.11): a group request that reaches a cluster while fewer brokers are unfenced than the
replication factor gets COORDINATOR_NOT_AVAILABLE until enough are, and the topic is then made
with every replica. Capped to the brokers alive instead, the topic kept fewer replicas for good:
a fault run's first FindCoordinator, sent while a broker was briefly fenced on a busy machine,
left a group whose commits, under min.insync.replicas=2, were all refused."""
from __future__ import annotations

from pathlib import Path

from conformance.wire import WireClient
from reference.config import BrokerConfig
from reference.coordinator.records import CONSUMER_OFFSETS_TOPIC
from reference.process import FAST_FAILOVER, ClusterProcess
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

from .conftest import wait_until

FIND_COORDINATOR_VERSION = 3
GROUP_KEY_TYPE = 0
REFUSAL = f"auto topic creation failed for {CONSUMER_OFFSETS_TOPIC} with error INVALID_REPLICATION_FACTOR"


def find_coordinator(address: str, group: str) -> ErrorCode:
    with WireClient(address, timeout_s=5.0) as wire:
        response = wire.request(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION,
                                {"key": group, "key_type": GROUP_KEY_TYPE})
    return ErrorCode(response.error_code)


def test_the_offsets_topic_waits_for_its_replication_factor_instead_of_taking_fewer_replicas(
        start_cluster, tmp_path):
    cluster = ClusterProcess(str(tmp_path / "cluster"), 3, overrides=FAST_FAILOVER)
    start_cluster.started.append(cluster)  # stopped after the test, its logs shown on a failure
    first, second, late = cluster.broker_ids
    cluster.start_node(first)
    cluster.start_node(second)
    cluster.wait_ready(brokers=2)  # two of three voters: a quorum, and two unfenced brokers

    asked = cluster.nodes[first]
    assert find_coordinator(cluster.addresses[first], "early-group") == ErrorCode.COORDINATOR_NOT_AVAILABLE

    def refused() -> bool:
        return REFUSAL in Path(asked.stderr_path).read_text(errors="replace")

    def made() -> bool:
        metadata = cluster.metadata()
        return metadata is not None and CONSUMER_OFFSETS_TOPIC in metadata.topics
    wait_until(lambda: refused() or made(), "the offsets topic asked of the controller")
    assert refused() and not made(), "refused with 2 of its 3 replicas' brokers unfenced, not made with 2"

    cluster.start_node(late)
    wait_until(lambda: find_coordinator(cluster.addresses[first], "early-group") == ErrorCode.NONE,
               "the group has a coordinator once the third broker is unfenced")
    partitions = cluster.metadata(CONSUMER_OFFSETS_TOPIC).topics[CONSUMER_OFFSETS_TOPIC].partitions
    assert len(partitions) == BrokerConfig().offsets_topic_num_partitions
    assert {len(p.replicas) for p in partitions.values()} == {BrokerConfig().offsets_topic_replication_factor}
