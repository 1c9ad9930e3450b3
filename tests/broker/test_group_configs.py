"""A consumer group's own configs (Kafka 4.0's GROUP config resource, KIP-848) through a real
broker: the KIP-848 coordinator answers ConsumerGroupHeartbeat with the group's own
consumer.heartbeat.interval.ms, other groups keep the broker's, and the override is kept in
the metadata log across a restart."""
from __future__ import annotations

import time

from reference.process import BrokerProcess
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

from .conftest import RawClient

GROUP_RESOURCE = 32
DYNAMIC_GROUP_CONFIG = 8
HEARTBEAT = "consumer.heartbeat.interval.ms"
BROKER_HEARTBEAT_MS = 5000  # group.consumer.heartbeat.interval.ms's default
GROUP_HEARTBEAT_MS = 7000
RETRIABLE = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}


def join(client: RawClient, group: str, timeout_s: float = 60.0):
    """A new member's first ConsumerGroupHeartbeat, retried while the coordinator loads."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {
            "group_id": group, "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": 30_000, "subscribed_topic_names": ["no-such-topic"], "server_assignor": None,
            "topic_partitions": []})
        if response.error_code not in RETRIABLE or time.monotonic() > deadline:
            assert response.error_code == ErrorCode.NONE, (response.error_code, response.error_message)
            return response
        time.sleep(0.2)


def described(client: RawClient, group: str):
    result = client.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [{
        "resource_type": GROUP_RESOURCE, "resource_name": group, "configuration_keys": [HEARTBEAT]}],
        "include_synonyms": False}).results[0]
    assert result.error_code == ErrorCode.NONE, result.error_message
    return [(c.value, c.config_source) for c in result.configs]


def test_a_group_s_heartbeat_interval_is_honoured_and_survives_a_restart(tmp_path):
    broker = BrokerProcess(str(tmp_path / "data"), overrides={"offsets.topic.num.partitions": "1"})
    broker.start()
    try:
        client = RawClient(broker.bootstrap)
        refused = client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": GROUP_RESOURCE, "resource_name": "tuned",
            "configs": [{"name": HEARTBEAT, "config_operation": 0, "value": "100"}]}],
            "validate_only": False}).responses[0]
        assert refused.error_code == ErrorCode.INVALID_CONFIG  # below group.consumer.min.heartbeat.interval.ms
        altered = client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": GROUP_RESOURCE, "resource_name": "tuned",
            "configs": [{"name": HEARTBEAT, "config_operation": 0, "value": str(GROUP_HEARTBEAT_MS)}]}],
            "validate_only": False}).responses[0]
        assert altered.error_code == ErrorCode.NONE, altered.error_message
        assert join(client, "tuned").heartbeat_interval_ms == GROUP_HEARTBEAT_MS
        assert join(client, "plain").heartbeat_interval_ms == BROKER_HEARTBEAT_MS
        client.close()
        assert broker.stop() == 0

        broker.start()
        client = RawClient(broker.bootstrap)
        assert described(client, "tuned") == [(str(GROUP_HEARTBEAT_MS), DYNAMIC_GROUP_CONFIG)]
        assert join(client, "tuned").heartbeat_interval_ms == GROUP_HEARTBEAT_MS
        assert join(client, "plain").heartbeat_interval_ms == BROKER_HEARTBEAT_MS
        client.close()
    finally:
        broker.stop()
