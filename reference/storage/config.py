"""LogConfig: a partition log's topic-level settings, by Kafka's config names, with units.

`from_properties` reads Kafka's string properties (segment.bytes=..., retention.ms=...) and
rejects bad values with KafkaError(INVALID_CONFIG) naming the key; `to_properties` is its
inverse, for DescribeConfigs. Defaults are Kafka's.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from reference.protocol.errors import ErrorCode, KafkaError

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1
SEGMENT_BYTES_MIN = 14  # Kafka's floor for segment.bytes (LegacyRecord.RECORD_OVERHEAD_V0)
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("delete", "compact")


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1 << 30  # segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms; -1 = keep forever
    retention_bytes: int = -1  # retention.bytes; -1 = no size limit
    max_message_bytes: int = 1048588  # max.message.bytes: largest batch accepted
    message_timestamp_type: str = "CreateTime"  # message.timestamp.type
    message_timestamp_before_max_ms: int = LONG_MAX  # message.timestamp.before.max.ms (KIP-937)
    message_timestamp_after_max_ms: int = 3600 * 1000  # message.timestamp.after.max.ms (KIP-937; 1 h since KIP-1030)
    cleanup_policy: str = "delete"  # cleanup.policy: "delete", "compact" or "compact,delete"
    delete_retention_ms: int = 24 * 3600 * 1000  # delete.retention.ms: how long compaction keeps tombstones
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio: compact once this share of the log is dirty
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms: records younger than this stay uncompacted
    min_insync_replicas: int = 1  # min.insync.replicas
    flush_messages: int = LONG_MAX  # flush.messages: fsync after this many records (never by default)
    flush_ms: int = LONG_MAX  # flush.ms: fsync when the oldest unflushed record is this old
    index_interval_bytes: int = 4096  # index.interval.bytes: offset index density
    file_delete_delay_ms: int = 60000  # file.delete.delay.ms
    # unclean.leader.election.enable: read by the controller's elections, not by the log.
    unclean_leader_election_enable: str = "false"

    def __post_init__(self) -> None:
        _check("segment.bytes", self.segment_bytes, SEGMENT_BYTES_MIN, INT_MAX)
        _check("segment.ms", self.segment_ms, 1, LONG_MAX)
        _check("retention.ms", self.retention_ms, -1, LONG_MAX)
        _check("retention.bytes", self.retention_bytes, -1, LONG_MAX)
        _check("max.message.bytes", self.max_message_bytes, 0, INT_MAX)
        _check("message.timestamp.before.max.ms", self.message_timestamp_before_max_ms, 0, LONG_MAX)
        _check("message.timestamp.after.max.ms", self.message_timestamp_after_max_ms, 0, LONG_MAX)
        _check("min.insync.replicas", self.min_insync_replicas, 1, INT_MAX)
        _check("delete.retention.ms", self.delete_retention_ms, 0, LONG_MAX)
        _check("min.cleanable.dirty.ratio", self.min_cleanable_dirty_ratio, 0, 1)
        _check("min.compaction.lag.ms", self.min_compaction_lag_ms, 0, LONG_MAX)
        _check("flush.messages", self.flush_messages, 1, LONG_MAX)
        _check("flush.ms", self.flush_ms, 0, LONG_MAX)
        _check("index.interval.bytes", self.index_interval_bytes, 0, INT_MAX)
        _check("file.delete.delay.ms", self.file_delete_delay_ms, 0, LONG_MAX)
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"message.timestamp.type={self.message_timestamp_type!r}: expected one of {TIMESTAMP_TYPES}")
        if self.unclean_leader_election_enable not in ("true", "false"):
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"unclean.leader.election.enable={self.unclean_leader_election_enable!r}: expected true or false")
        policies = self.cleanup_policy.split(",")
        if not policies or any(policy.strip() not in CLEANUP_POLICIES for policy in policies):
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"cleanup.policy={self.cleanup_policy!r}: expected a list of {CLEANUP_POLICIES}")

    @property
    def compact(self) -> bool:
        """cleanup.policy includes "compact": the log cleaner keeps the latest record per key."""
        return "compact" in (policy.strip() for policy in self.cleanup_policy.split(","))

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_properties(cls, properties: dict[str, str], base: LogConfig | None = None) -> LogConfig:
        """Build from Kafka property names over `base` (defaults when None); unknown keys are rejected."""
        values = {}
        for key, text in properties.items():
            field_name = key.replace(".", "_")
            if field_name not in _FIELD_TYPES:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"unknown topic config {key!r}")
            kind = _FIELD_TYPES[field_name]
            try:
                values[field_name] = kind(text)
            except (TypeError, ValueError):
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}={text!r} is not a valid {kind.__name__}") from None
        current = {name: getattr(base or cls(), name) for name in _FIELD_TYPES}
        return cls(**(current | values))

    def to_properties(self) -> dict[str, str]:
        return {name.replace("_", "."): str(getattr(self, name)) for name in _FIELD_TYPES}


_FIELD_TYPES = {field.name: {"int": int, "float": float}.get(field.type, str) for field in fields(LogConfig)}


def _check(key: str, value: float, minimum: int, maximum: int) -> None:
    if not minimum <= value <= maximum:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}={value} is outside [{minimum}, {maximum}]")
