"""Admin APIs against a real broker: topics, partitions, configs, records, producer ids."""
from __future__ import annotations

from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

from .helpers import batch_of, create_topic, list_offset, produce

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
OP_SET, OP_DELETE, OP_APPEND = 0, 1, 2


def describe(client, topic: str, keys=None, synonyms=False):
    response = client.request(ApiKey.DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configuration_keys": keys}],
        "include_synonyms": synonyms})
    return response.results[0]


def test_create_topics_defaults_validate_only_duplicates_and_replication_factor(client):
    response = client.request(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": "dry-run", "num_partitions": 3, "replication_factor": 1, "assignments": [], "configs": []},
    ], "timeout_ms": 1000, "validate_only": True})
    assert response.topics[0].error_code == ErrorCode.NONE
    assert client.request(ApiKey.METADATA, 4, {"topics": [{"name": "dry-run"}], "allow_auto_topic_creation": False}
                          ).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    created = client.request(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": "defaults", "num_partitions": -1, "replication_factor": -1, "assignments": [], "configs": []},
        {"name": "rf-two", "num_partitions": 1, "replication_factor": 2, "assignments": [], "configs": []},
        {"name": "bad-config", "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": [{"name": "retention.ms", "value": "soon"}]},
    ], "timeout_ms": 1000}).topics
    assert [(t.error_code, t.num_partitions) for t in created] == [
        (ErrorCode.NONE, 1), (ErrorCode.INVALID_REPLICATION_FACTOR, -1), (ErrorCode.INVALID_CONFIG, -1)]
    assert create_topic(client, "defaults").error_code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_create_partitions_only_grows(client):
    create_topic(client, "growing", partitions=1)
    def grow(count):
        return client.request(ApiKey.CREATE_PARTITIONS, 3, {"topics": [{"name": "growing", "count": count,
                                                                        "assignments": None}],
                                                            "timeout_ms": 1000, "validate_only": False}).results[0]
    assert grow(3).error_code == ErrorCode.NONE
    assert grow(2).error_code == ErrorCode.INVALID_PARTITIONS
    assert produce(client, "growing", batch_of([b"p2"]), partition=2).error_code == ErrorCode.NONE


def test_describe_and_incremental_alter_topic_configs(client):
    create_topic(client, "configured", configs={"retention.ms": "60000"})
    entry = {c.name: c for c in describe(client, "configured", synonyms=True).configs}
    assert (entry["retention.ms"].value, entry["retention.ms"].config_source) == ("60000", 1)
    assert [s.source for s in entry["retention.ms"].synonyms] == [1, 5]
    assert (entry["segment.bytes"].config_source, entry["cleanup.policy"].value) == (5, "delete")
    response = client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": TOPIC_RESOURCE, "resource_name": "configured", "configs": [
            {"name": "retention.ms", "config_operation": OP_DELETE, "value": None},
            {"name": "cleanup.policy", "config_operation": OP_APPEND, "value": "compact"},
            {"name": "max.message.bytes", "config_operation": OP_SET, "value": "2000"}]}], "validate_only": False})
    assert response.responses[0].error_code == ErrorCode.NONE
    values = {c.name: c.value for c in describe(client, "configured").configs}
    assert (values["retention.ms"], values["cleanup.policy"], values["max.message.bytes"]) == (
        "604800000", "delete,compact", "2000")
    assert produce(client, "configured", batch_of([b"x" * 3000])).error_code == ErrorCode.MESSAGE_TOO_LARGE


def test_legacy_alter_configs_replaces_all_overrides_and_broker_configs_are_described(client):
    create_topic(client, "replaced", configs={"retention.ms": "1000", "segment.bytes": "100000"})
    response = client.request(ApiKey.ALTER_CONFIGS, 2, {"resources": [{
        "resource_type": TOPIC_RESOURCE, "resource_name": "replaced",
        "configs": [{"name": "retention.bytes", "value": "5000"}]}], "validate_only": False})
    assert response.responses[0].error_code == ErrorCode.NONE
    sources = {c.name: c.config_source for c in describe(client, "replaced").configs}
    assert (sources["retention.ms"], sources["segment.bytes"], sources["retention.bytes"]) == (5, 5, 1)
    broker = client.request(ApiKey.DESCRIBE_CONFIGS, 1, {"resources": [{
        "resource_type": BROKER_RESOURCE, "resource_name": "0", "configuration_keys": None}],
        "include_synonyms": False}).results[0]
    values = {c.name: (c.value, c.config_source) for c in broker.configs}
    assert values["message.max.bytes"] == ("100000", 4) and values["num.partitions"] == ("1", 5)


def test_delete_records_moves_the_log_start_offset(client):
    create_topic(client, "trimmed")
    for _ in range(3):
        produce(client, "trimmed", batch_of([b"a", b"b"]))
    response = client.request(ApiKey.DELETE_RECORDS, 2, {"topics": [{"name": "trimmed", "partitions": [
        {"partition_index": 0, "offset": 4}]}], "timeout_ms": 1000})
    assert (response.topics[0].partitions[0].error_code, response.topics[0].partitions[0].low_watermark) == (0, 4)
    assert list_offset(client, "trimmed", -2).offset == 4


def test_delete_topics_by_name_and_by_id(client):
    first_id = create_topic(client, "doomed-1").topic_id
    create_topic(client, "doomed-2")
    by_id = client.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": None, "topic_id": first_id}],
                                                     "timeout_ms": 1000}).responses[0]
    assert (by_id.error_code, by_id.name) == (ErrorCode.NONE, "doomed-1")
    by_name = client.request(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["doomed-2", "never-was"], "timeout_ms": 1000})
    assert [r.error_code for r in by_name.responses] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    listed = client.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
    assert not {"doomed-1", "doomed-2"} & {t.name for t in listed.topics}


def test_delete_topics_naming_or_identifying_a_topic_twice_is_refused_and_deletes_nothing(client):
    kept_id = create_topic(client, "named-twice").topic_id
    by_name = client.request(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["named-twice"] * 2, "timeout_ms": 1000})
    assert [r.error_code for r in by_name.responses] == [ErrorCode.INVALID_REQUEST] * 2
    by_id = client.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": None, "topic_id": kept_id}] * 2,
                                                     "timeout_ms": 1000})
    assert [r.error_code for r in by_id.responses] == [ErrorCode.INVALID_REQUEST] * 2
    listed = client.request(ApiKey.METADATA, 12, {"topics": [{"name": "named-twice"}],
                                                  "allow_auto_topic_creation": False})
    assert (listed.topics[0].error_code, listed.topics[0].topic_id) == (ErrorCode.NONE, kept_id)


def test_init_producer_id_hands_out_fresh_ids_and_epochs_to_transactional_ids(client):
    ids = [client.request(ApiKey.INIT_PRODUCER_ID, version, {"transactional_id": None, "transaction_timeout_ms": 1000,
                                                             "producer_id": -1, "producer_epoch": -1})
           for version in (0, 4)]
    assert [r.error_code for r in ids] == [0, 0] and ids[0].producer_id != ids[1].producer_id
    assert [r.producer_epoch for r in ids] == [0, 0]
    transactional = [client.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "txn", "transaction_timeout_ms": 1000,
                                                                 "producer_id": -1, "producer_epoch": -1})
                     for _ in range(2)]
    assert [r.error_code for r in transactional] == [ErrorCode.NONE] * 2
    assert transactional[0].producer_id == transactional[1].producer_id not in {r.producer_id for r in ids}
    assert [r.producer_epoch for r in transactional] == [0, 1]  # each init fences the one before


def test_describe_cluster_names_this_node(client, broker):
    response = client.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                                           "endpoint_type": 1})
    assert response.error_code == 0 and response.controller_id == 0
    assert [f"{b.host}:{b.port}" for b in response.brokers] == [broker.bootstrap]
