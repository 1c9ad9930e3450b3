"""Admin: topics, partitions and configs through librdkafka's AdminClient (PRO-1, ORD-1, RET-1).

Exact error codes for the common mistakes (a topic that exists, a partition count that does
not grow), configs that read back as written, and partitions added without touching the
offsets of the ones that were there.
"""
from __future__ import annotations

import time

import pytest

from conformance import ops
from conformance.ops import expect
from conformance.wire import answered_entry
from reference.protocol.api_keys import ApiKey

ADMIN_TIMEOUT_S = 30.0


@pytest.fixture
def admin(target):
    from confluent_kafka.admin import AdminClient

    return AdminClient(target.rdkafka_config())


def _error_code(future) -> int:
    from confluent_kafka import KafkaException

    try:
        future.result(ADMIN_TIMEOUT_S)
        return 0
    except KafkaException as error:
        return error.args[0].code()


@pytest.mark.guarantee("PRO-1")
def test_creating_an_existing_topic_answers_topic_already_exists(admin, target):
    from confluent_kafka.admin import NewTopic

    target.capabilities.require("topic creation", ApiKey.CREATE_TOPICS)
    topic = target.create_topic("exists")
    code = _error_code(admin.create_topics([NewTopic(topic, 1)])[topic])
    expect(code == 36, "TOPIC_ALREADY_EXISTS (36)", f"error {code}")


@pytest.mark.guarantee("PRO-1")
def test_invalid_topic_requests_answer_exact_errors(admin, target):
    from confluent_kafka.admin import NewTopic

    target.capabilities.require("topic creation", ApiKey.CREATE_TOPICS)
    name = target.new_topic_name("invalid")
    zero_partitions = _error_code(admin.create_topics([NewTopic(name, 0)])[name])
    expect(zero_partitions == 37, "INVALID_PARTITIONS (37) for 0 partitions", f"error {zero_partitions}")
    too_many_replicas = _error_code(admin.create_topics([NewTopic(name, 1, replication_factor=100)])[name])
    expect(too_many_replicas == 38, "INVALID_REPLICATION_FACTOR (38) for replication factor 100",
           f"error {too_many_replicas}")


@pytest.mark.guarantee("ORD-1")
def test_added_partitions_leave_existing_offsets_alone(admin, target):
    from confluent_kafka.admin import NewPartitions

    caps = target.capabilities
    caps.require("adding partitions", ApiKey.CREATE_TOPICS, ApiKey.CREATE_PARTITIONS)
    topic = target.create_topic("grow", partitions=1)
    with target.leader_wire(topic) as wire:
        ops.produce(wire, caps, topic, ops.values_batch([b"before-0", b"before-1"]))
    shrink = _error_code(admin.create_partitions([NewPartitions(topic, 1)])[topic])
    expect(shrink == 37, "INVALID_PARTITIONS (37) when the count does not grow", f"error {shrink}")
    grow = _error_code(admin.create_partitions([NewPartitions(topic, 3)])[topic])
    expect(grow == 0, "CreatePartitions to 3 to succeed", f"error {grow}")
    with target.wire() as wire:
        expect(target.wait_for_leaders(wire, topic, partitions=3) == 3, "3 partitions with leaders", "fewer")
    with target.leader_wire(topic, 0) as wire:
        stored = ops.read_all(wire, caps, topic)
    expect([(r.offset, r.value) for r in stored] == [(0, b"before-0"), (1, b"before-1")],
           "partition 0 unchanged", [(r.offset, r.value) for r in stored])
    with target.leader_wire(topic, 2) as wire:
        expect(ops.high_watermark(wire, caps, topic, partition=2) == 0, "a new partition that starts empty", "records")


@pytest.mark.guarantee("RET-1", "PRO-1")
def test_topic_configs_read_back_as_written(admin, target):
    from confluent_kafka.admin import ConfigResource

    caps = target.capabilities
    caps.require("topic configs", ApiKey.CREATE_TOPICS, ApiKey.DESCRIBE_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS)
    topic = target.create_topic("configs", configs={"retention.ms": "3600000"})
    resource = ConfigResource("topic", topic)
    described = admin.describe_configs([resource])[resource].result(ADMIN_TIMEOUT_S)
    expect(described["retention.ms"].value == "3600000", "retention.ms 3600000 as created",
           described["retention.ms"].value)
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    altered = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([altered])[altered].result(ADMIN_TIMEOUT_S)
    again = admin.describe_configs([resource])[resource].result(ADMIN_TIMEOUT_S)
    expect(again["retention.ms"].value == "7200000", "retention.ms 7200000 after IncrementalAlterConfigs",
           again["retention.ms"].value)


@pytest.mark.guarantee("PRO-1")
def test_a_deleted_topic_is_gone(admin, target):
    caps = target.capabilities
    caps.require("topic deletion", ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS)
    topic = target.create_topic("deleted")
    code = _error_code(admin.delete_topics([topic])[topic])
    expect(code == 0, "DeleteTopics to succeed", f"error {code}")
    version = caps.version_or_skip(ApiKey.METADATA, 1, 12)
    deadline = time.monotonic() + ADMIN_TIMEOUT_S  # each broker learns of the deletion at its own pace
    with target.wire() as wire:  # no auto-creation: asking must not bring the topic back
        while True:
            answer = wire.request(ApiKey.METADATA, version, {"topics": [{"name": topic}],
                                                             "allow_auto_topic_creation": False})
            found = answered_entry(f"METADATA v{version} of {topic}", answer.topics, "name", topic, "topic")
            if found.error_code == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    expect(found.error_code == 3, "Metadata to answer UNKNOWN_TOPIC_OR_PARTITION (3) for the deleted topic",
           f"error {found.error_code}, {len(found.partitions)} partitions")


@pytest.mark.guarantee("PRO-1")
def test_describe_answers_the_authorized_operations_it_was_asked_for(admin, target):
    """KIP-430: asked with include_authorized_operations, Describe of topics, the cluster and
    groups lists what the client may do: every operation the resource supports when the broker
    has no authorizer, never nothing (the client was allowed to DESCRIBE what it described)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicCollection, TopicPartition
    from confluent_kafka.admin import AclOperation

    caps = target.capabilities
    caps.require("authorized operations", ApiKey.CREATE_TOPICS, ApiKey.DESCRIBE_CLUSTER, ApiKey.DESCRIBE_GROUPS)
    topic = target.create_topic("authorized-operations")
    group = target.new_topic_name("authorized-operations")
    committed = admin.alter_consumer_group_offsets(  # an empty classic group, as a simple consumer makes
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])])[group]
    committed.result(ADMIN_TIMEOUT_S)
    described = {
        "topic": admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic],
        "cluster": admin.describe_cluster(include_authorized_operations=True),
        "group": admin.describe_consumer_groups([group], include_authorized_operations=True)[group],
    }
    answered = {kind: {op.name for op in (future.result(ADMIN_TIMEOUT_S).authorized_operations or [])}
                for kind, future in described.items()}
    missing = [kind for kind, operations in answered.items() if AclOperation.DESCRIBE.name not in operations]
    expect(not missing, "authorized operations that include DESCRIBE for the topic, the cluster and the group "
           "(KIP-430; without an authorizer, all the resource supports)",
           "; ".join(f"{kind}: {sorted(answered[kind]) or 'none'}" for kind in missing))
