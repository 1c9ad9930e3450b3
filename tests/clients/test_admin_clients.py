"""Acceptance: admin through confluent-kafka's AdminClient and kafka-python's KafkaAdminClient.

Create, describe, alter configs, add partitions and delete, then restart the broker: every
change is still there (metadata lives in the broker's metadata log and is replayed on start).
"""
from __future__ import annotations

from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                  NewTopic)

TIMEOUT_S = 30


def confluent_admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def topic_configs_confluent(admin: AdminClient, topic: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    return {name: entry.value for name, entry in entries.items()}


def partition_count(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions)


def test_confluent_admin_changes_survive_a_restart(broker):
    admin = confluent_admin(broker)
    for future in admin.create_topics([NewTopic("admin-confluent", num_partitions=2, replication_factor=1,
                                                config={"retention.ms": "3600000"})]).values():
        future.result(TIMEOUT_S)
    assert partition_count(admin, "admin-confluent") == 2
    assert topic_configs_confluent(admin, "admin-confluent")["retention.ms"] == "3600000"

    resource = ConfigResource(ConfigResource.Type.TOPIC, "admin-confluent", incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.message.bytes", "2000000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)
    for future in admin.create_partitions([NewPartitions("admin-confluent", 5)]).values():
        future.result(TIMEOUT_S)
    for future in admin.create_topics([NewTopic("admin-confluent-doomed", 1, 1)]).values():
        future.result(TIMEOUT_S)
    for future in admin.delete_topics(["admin-confluent-doomed"]).values():
        future.result(TIMEOUT_S)

    broker.process.restart()
    admin = confluent_admin(broker)
    configs = topic_configs_confluent(admin, "admin-confluent")
    assert (configs["retention.ms"], configs["max.message.bytes"]) == ("7200000", "2000000")
    assert partition_count(admin, "admin-confluent") == 5
    assert "admin-confluent-doomed" not in admin.list_topics(timeout=TIMEOUT_S).topics


def test_kafka_python_admin_changes_survive_a_restart(broker):
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewPartitions as KpNewPartitions
    from kafka.admin import NewTopic as KpNewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([KpNewTopic("admin-kp", num_partitions=1, replication_factor=1,
                                        topic_configs={"segment.bytes": "1048576"})])
        admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, "admin-kp",
                                              configs={"retention.bytes": "10485760"})])
        admin.create_partitions({"admin-kp": KpNewPartitions(total_count=3)})
        admin.create_topics([KpNewTopic("admin-kp-doomed", num_partitions=1, replication_factor=1)])
        admin.delete_topics(["admin-kp-doomed"])
        described = admin.describe_topics(["admin-kp"])
        assert len(described[0]["partitions"]) == 3
    finally:
        admin.close()

    broker.process.restart()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert "admin-kp" in admin.list_topics() and "admin-kp-doomed" not in admin.list_topics()
        result = admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, "admin-kp")])
        configs = {name: entry["value"] for name, entry in result["topic"]["admin-kp"].items()}
        assert configs["retention.bytes"] == "10485760"
        assert configs["segment.bytes"] == "1048576"
        assert len(admin.describe_topics(["admin-kp"])[0]["partitions"]) == 3
    finally:
        admin.close()

