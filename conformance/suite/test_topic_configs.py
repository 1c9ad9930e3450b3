"""Topic configs (RET-1, PRO-1): every topic config Kafka 4.x documents, accepted and validated
the way Kafka validates it, in CreateTopics, AlterConfigs and IncrementalAlterConfigs.

Tools create topics with configs (kafka-topics.sh --config, a client's admin API, Kafka Streams
its compacted changelogs), so a broker that refuses a documented config breaks them, and one
that accepts a value Kafka refuses stores a topic Kafka could not. A valid value of every
config is accepted (with validate_only first, which creates nothing) and read back by
DescribeConfigs; each bad value Kafka's LogConfig refuses (out of range, not in its
enumeration, not a boolean, min.compaction.lag.ms above max.compaction.lag.ms, an unknown
name) is INVALID_CONFIG in all three requests. compression.type is honoured, not only stored:
a batch produced in another codec is served by Fetch in the topic's codec (LogValidator
recompresses it), records intact, and `uncompressed` serves it uncompressed.
"""
from __future__ import annotations

import pytest

from conformance import ops
from conformance.ops import expect
from conformance.target import TopicSetupFailed
from conformance.wire import answered_entry, error_name, request_name
from reference.protocol.api_keys import ApiKey
from reference.protocol.compression import CompressionType
from reference.protocol.errors import ErrorCode

COLUMN = "wire"
CREATE_TOPICS_RANGE = (2, 7)
ALTER_CONFIGS_RANGE = (0, 2)
INCREMENTAL_ALTER_CONFIGS_RANGE = (0, 1)
DESCRIBE_CONFIGS_RANGE = (1, 4)
TOPIC_RESOURCE = 2  # ConfigResource type
SET = 0  # IncrementalAlterConfigs operation
TIMEOUT_MS = 30_000
FETCH_ZSTD_VERSION = 10  # KIP-110: Fetch below v10 may not carry zstd batches

# A valid value, other than the default where Kafka allows one without tiered storage or a
# throttle rate, for every topic config of Kafka 4.x (TopicConfig, LogConfig.configNames()).
DOCUMENTED_TOPIC_CONFIGS = {
    "cleanup.policy": "compact,delete",
    "compression.type": "lz4",
    "compression.gzip.level": "5",
    "compression.lz4.level": "10",
    "compression.zstd.level": "5",
    "delete.retention.ms": "3600000",
    "file.delete.delay.ms": "30000",
    "flush.messages": "100000",
    "flush.ms": "60000",
    "follower.replication.throttled.replicas": "*",
    "index.interval.bytes": "8192",
    "leader.replication.throttled.replicas": "*",
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "max.compaction.lag.ms": "86400000",
    "max.message.bytes": "2000000",
    "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "86400000",
    "message.timestamp.type": "LogAppendTime",
    "min.cleanable.dirty.ratio": "0.3",
    "min.compaction.lag.ms": "1000",
    "min.insync.replicas": "1",
    "preallocate": "false",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false",
    "retention.bytes": "104857600",
    "retention.ms": "86400000",
    "segment.bytes": "10485760",
    "segment.index.bytes": "1048576",
    "segment.jitter.ms": "100",
    "segment.ms": "3600000",
    "unclean.leader.election.enable": "false",
}

# What Kafka's LogConfig refuses with INVALID_CONFIG, and why.
INVALID_TOPIC_CONFIGS = {
    "compression-type-unknown": {"compression.type": "brotli"},
    "max-compaction-lag-zero": {"max.compaction.lag.ms": "0"},
    "min-compaction-lag-above-max": {"min.compaction.lag.ms": "10000", "max.compaction.lag.ms": "5000"},
    "gzip-level-out-of-range": {"compression.gzip.level": "10"},
    "cleanup-policy-unknown": {"cleanup.policy": "forever"},
    "timestamp-type-unknown": {"message.timestamp.type": "Now"},
    "retention-ms-below-minus-one": {"retention.ms": "-5"},
    "segment-bytes-below-14": {"segment.bytes": "13"},
    "boolean-not-a-boolean": {"unclean.leader.election.enable": "maybe"},
    "number-not-a-number": {"max.message.bytes": "many"},
    "unknown-name": {"no.such.config": "1"},
}


def _create(wire, caps, name: str, configs: dict[str, str], *, validate_only: bool):
    version = caps.version_or_skip(ApiKey.CREATE_TOPICS, *CREATE_TOPICS_RANGE)
    response = wire.request(ApiKey.CREATE_TOPICS, version, {
        "topics": [{"name": name, "num_partitions": 1, "replication_factor": -1, "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "timeout_ms": TIMEOUT_MS, "validate_only": validate_only})
    return answered_entry(f"{request_name(ApiKey.CREATE_TOPICS, version)} of {name}", response.topics, "name", name,
                          "topic")


def _alter(wire, caps, topic: str, configs: dict[str, str], *, incremental: bool):
    """The answer to a validate_only AlterConfigs (or IncrementalAlterConfigs SET) of topic."""
    if incremental:
        api_key = ApiKey.INCREMENTAL_ALTER_CONFIGS
        version = caps.version_or_skip(api_key, *INCREMENTAL_ALTER_CONFIGS_RANGE)
        entries = [{"name": k, "config_operation": SET, "value": v} for k, v in configs.items()]
    else:
        api_key = ApiKey.ALTER_CONFIGS
        version = caps.version_or_skip(api_key, *ALTER_CONFIGS_RANGE)
        entries = [{"name": k, "value": v} for k, v in configs.items()]
    response = wire.request(api_key, version, {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configs": entries}],
        "validate_only": True})
    return answered_entry(f"{request_name(api_key, version)} of {topic}", response.responses, "resource_name", topic,
                          "resource")


def _described(wire, caps, topic: str) -> dict[str, str | None]:
    version = caps.version_or_skip(ApiKey.DESCRIBE_CONFIGS, *DESCRIBE_CONFIGS_RANGE)
    response = wire.request(ApiKey.DESCRIBE_CONFIGS, version, {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    request = f"{request_name(ApiKey.DESCRIBE_CONFIGS, version)} of {topic}"
    result = answered_entry(request, response.results, "resource_name", topic, "resource")
    expect(result.error_code == ErrorCode.NONE, f"{request} to succeed", error_name(result.error_code))
    return {entry.name: entry.value for entry in result.configs}


@pytest.mark.guarantee("RET-1", "PRO-1")
def test_every_topic_config_kafka_documents_is_accepted_and_read_back(target):
    caps = target.capabilities
    caps.require("topic configs", ApiKey.CREATE_TOPICS, ApiKey.DESCRIBE_CONFIGS)
    name = target.new_topic_name("documented-configs")
    with target.wire() as wire:
        checked = _create(wire, caps, name, DOCUMENTED_TOPIC_CONFIGS, validate_only=True)
        expect(checked.error_code == ErrorCode.NONE,
               "CreateTopics with validate_only to accept every topic config Kafka 4.x documents",
               f"{error_name(checked.error_code)}: {checked.get('error_message')}")
        recreated = _create(wire, caps, name, {}, validate_only=True)  # validate_only created nothing
        expect(recreated.error_code == ErrorCode.NONE, f"{name} still free after a validate_only CreateTopics",
               error_name(recreated.error_code))
        created = _create(wire, caps, name, DOCUMENTED_TOPIC_CONFIGS, validate_only=False)
        expect(created.error_code == ErrorCode.NONE,
               "CreateTopics to create a topic with every topic config Kafka 4.x documents",
               f"{error_name(created.error_code)}: {created.get('error_message')}")
        target.wait_for_leaders(wire, name)
        described = _described(wire, caps, name)
    differing = {k: (v, described.get(k, "missing")) for k, v in DOCUMENTED_TOPIC_CONFIGS.items()
                 if described.get(k) != v}
    expect(not differing, "DescribeConfigs to read back every config as it was set",
           ", ".join(f"{k}={seen} (set {v})" for k, (v, seen) in differing.items()))


@pytest.fixture(scope="module")
def plain_topic(target) -> str:
    return target.create_topic("config-validation")


@pytest.mark.guarantee("PRO-1")
@pytest.mark.parametrize("case", sorted(INVALID_TOPIC_CONFIGS))
def test_a_value_kafka_refuses_is_invalid_config_in_every_config_request(case, target, plain_topic):
    caps = target.capabilities
    caps.require("topic config validation", ApiKey.CREATE_TOPICS, ApiKey.ALTER_CONFIGS,
                 ApiKey.INCREMENTAL_ALTER_CONFIGS)
    configs = INVALID_TOPIC_CONFIGS[case]
    with target.wire() as wire:
        answers = {
            "CreateTopics": _create(wire, caps, target.new_topic_name("invalid-config"), configs, validate_only=True),
            "AlterConfigs": _alter(wire, caps, plain_topic, configs, incremental=False),
            "IncrementalAlterConfigs": _alter(wire, caps, plain_topic, configs, incremental=True),
        }
    wrong = {api: error_name(a.error_code) for api, a in answers.items() if a.error_code != ErrorCode.INVALID_CONFIG}
    expect(not wrong, f"INVALID_CONFIG (40) for {configs} in CreateTopics, AlterConfigs and IncrementalAlterConfigs, "
           "as Kafka's LogConfig validation answers", ", ".join(f"{api} {seen}" for api, seen in wrong.items()))


@pytest.mark.guarantee("RET-1")
@pytest.mark.parametrize("topic_codec,produced_codec", [("zstd", CompressionType.LZ4),
                                                        ("zstd", CompressionType.NONE),
                                                        ("uncompressed", CompressionType.GZIP)])
def test_compression_type_is_the_codec_fetch_serves(topic_codec, produced_codec, target):
    caps = target.capabilities
    caps.require("compression.type", ApiKey.CREATE_TOPICS, ApiKey.PRODUCE, ApiKey.FETCH)
    caps.version_or_skip(ApiKey.FETCH, FETCH_ZSTD_VERSION)
    try:
        topic = target.create_topic(f"compression-{topic_codec}", configs={"compression.type": topic_codec})
    except TopicSetupFailed as e:
        pytest.skip(f"the broker does not take compression.type={topic_codec}: {e}")
    values = [b"value-%02d " % i * 8 for i in range(20)]
    with target.leader_wire(topic) as wire:
        produced = ops.produce(wire, caps, topic, ops.values_batch(values, compression=produced_codec))
        expect(produced.error_code == ErrorCode.NONE, f"a {produced_codec.name} batch to be accepted",
               error_name(produced.error_code))
        batches = ops.read_batches(wire, caps, topic)
    wanted = CompressionType.NONE if topic_codec == "uncompressed" else CompressionType[topic_codec.upper()]
    codecs = sorted(CompressionType(batch.compression).name for batch in batches)
    expect(codecs == [wanted.name], f"one batch in codec {wanted.name} (attributes bits 0-2) for "
           f"compression.type={topic_codec}, produced as {produced_codec.name}", codecs)
    stored = [record.value for batch in batches for record in batch.records()]
    expect(stored == values and all(batch.crc_is_valid() for batch in batches),
           "the records intact under a valid CRC", f"{len(stored)} records")
