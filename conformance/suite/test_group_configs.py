"""A consumer group's own configs (Kafka 4.0's GROUP config resource, KIP-848's GroupConfig),
altered with IncrementalAlterConfigs and read back with DescribeConfigs.

A group may override consumer.session.timeout.ms and consumer.heartbeat.interval.ms within the
broker's group.consumer.min/max.* bounds (Kafka's defaults: session 45-60 s, heartbeat 5-15 s).
A validate_only change changes nothing; a set value is described with source
DYNAMIC_GROUP_CONFIG (8), a deleted one returns to the broker's default; an unknown name or a
value outside the bounds is INVALID_CONFIG and leaves the group's configs as they were.
"""
from __future__ import annotations

import time

import pytest

from conformance.ops import expect
from conformance.wire import answered_entry, error_name, request_name
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

COLUMN = "wire"
INCREMENTAL_ALTER_CONFIGS_RANGE = (0, 1)
DESCRIBE_CONFIGS_RANGE = (1, 4)
GROUP_RESOURCE = 32  # ConfigResource type GROUP (Kafka 4.0)
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
DYNAMIC_GROUP_CONFIG = 8  # DescribeConfigs ConfigSource
HEARTBEAT = "consumer.heartbeat.interval.ms"
SESSION = "consumer.session.timeout.ms"
# Within Kafka's default bounds, and other than the defaults (45000, 5000).
OVERRIDES = {SESSION: "50000", HEARTBEAT: "7000"}
INVALID = {"unknown-name": {"consumer.no.such.config": "1"},
           "session-below-min": {SESSION: "1000"},
           "heartbeat-above-max": {HEARTBEAT: "3600000"},
           "not-a-number": {HEARTBEAT: "soon"}}


def _offers_group_configs(caps) -> None:
    if not caps.offers_consumer_groups:
        pytest.skip("group configs come with KIP-848 consumer groups (ConsumerGroupHeartbeat), which the broker "
                    "does not offer")


def _alter(wire, caps, group: str, operations: dict[str, tuple[int, str | None]], *, validate_only: bool):
    version = caps.version_or_skip(ApiKey.INCREMENTAL_ALTER_CONFIGS, *INCREMENTAL_ALTER_CONFIGS_RANGE)
    response = wire.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, version, {
        "resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group,
                       "configs": [{"name": name, "config_operation": op, "value": value}
                                   for name, (op, value) in operations.items()]}],
        "validate_only": validate_only})
    return answered_entry(f"{request_name(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)} of group {group}",
                          response.responses, "resource_name", group, "resource")


def _described(wire, caps, group: str) -> dict[str, tuple[str | None, int]]:
    """Each config of the group: (value, config_source)."""
    version = caps.version_or_skip(ApiKey.DESCRIBE_CONFIGS, *DESCRIBE_CONFIGS_RANGE)
    response = wire.request(ApiKey.DESCRIBE_CONFIGS, version, {
        "resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group, "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    request = f"{request_name(ApiKey.DESCRIBE_CONFIGS, version)} of group {group}"
    result = answered_entry(request, response.results, "resource_name", group, "resource")
    expect(result.error_code == ErrorCode.NONE, f"{request} to succeed",
           f"{error_name(result.error_code)}: {result.get('error_message')}")
    return {entry.name: (entry.value, entry.config_source) for entry in result.configs}


def _described_when(wire, caps, group: str, done, timeout_s: float = 15.0) -> dict[str, tuple[str | None, int]]:
    """The group's configs once `done` holds of them, or as last read after timeout_s: in a cluster
    a change committed by the controller reaches the broker asked a moment later."""
    deadline = time.monotonic() + timeout_s
    while not done(described := _described(wire, caps, group)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return described


@pytest.mark.guarantee("GRP-1")
def test_a_group_s_own_configs_are_set_described_and_deleted(target):
    caps = target.capabilities
    _offers_group_configs(caps)
    caps.require("group configs", ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.DESCRIBE_CONFIGS)
    group = target.new_topic_name("group-config")
    with target.wire() as wire:
        defaults = _described(wire, caps, group)
        checked = _alter(wire, caps, group, {k: (SET, v) for k, v in OVERRIDES.items()}, validate_only=True)
        expect(checked.error_code == ErrorCode.NONE,
               f"IncrementalAlterConfigs with validate_only to accept {OVERRIDES} for a group, as Kafka 4.0 does",
               f"{error_name(checked.error_code)}: {checked.get('error_message')}")
        expect(_described(wire, caps, group) == defaults, "a validate_only IncrementalAlterConfigs to change nothing",
               f"{_described(wire, caps, group)} after it, {defaults} before")
        altered = _alter(wire, caps, group, {k: (SET, v) for k, v in OVERRIDES.items()}, validate_only=False)
        expect(altered.error_code == ErrorCode.NONE, f"IncrementalAlterConfigs to set {OVERRIDES} for a group",
               f"{error_name(altered.error_code)}: {altered.get('error_message')}")
        described = _described_when(wire, caps, group, lambda d: all(
            d.get(k) == (v, DYNAMIC_GROUP_CONFIG) for k, v in OVERRIDES.items()))
        wrong = {k: described.get(k) for k, v in OVERRIDES.items() if described.get(k) != (v, DYNAMIC_GROUP_CONFIG)}
        expect(not wrong, "DescribeConfigs to read back the group's values with source DYNAMIC_GROUP_CONFIG (8)",
               ", ".join(f"{k}={value_source}" for k, value_source in wrong.items()))
        deleted = _alter(wire, caps, group, {HEARTBEAT: (DELETE, None)}, validate_only=False)
        expect(deleted.error_code == ErrorCode.NONE, f"IncrementalAlterConfigs to delete the group's {HEARTBEAT}",
               f"{error_name(deleted.error_code)}: {deleted.get('error_message')}")
        described = _described_when(wire, caps, group, lambda d: d.get(HEARTBEAT) == defaults.get(HEARTBEAT))
    expect(described.get(HEARTBEAT) == defaults.get(HEARTBEAT) and described.get(SESSION)[0] == OVERRIDES[SESSION],
           f"the deleted {HEARTBEAT} to return to the broker's value, {SESSION} to stay the group's",
           f"{described}, defaults {defaults}")


@pytest.mark.guarantee("GRP-1")
@pytest.mark.parametrize("case", sorted(INVALID))
def test_a_group_config_kafka_refuses_is_invalid_config(case, target):
    caps = target.capabilities
    _offers_group_configs(caps)
    caps.require("group configs", ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.DESCRIBE_CONFIGS)
    group = target.new_topic_name("group-config-invalid")
    with target.wire() as wire:
        before = _described(wire, caps, group)
        answer = _alter(wire, caps, group, {k: (SET, v) for k, v in INVALID[case].items()}, validate_only=False)
        after = _described(wire, caps, group)
    expect(answer.error_code == ErrorCode.INVALID_CONFIG,
           f"INVALID_CONFIG (40) for group config {INVALID[case]}, as Kafka's GroupConfig validation answers",
           f"{error_name(answer.error_code)}: {answer.get('error_message')}")
    expect(after == before, "a refused change to leave the group's configs as they were", f"{after}, before {before}")
