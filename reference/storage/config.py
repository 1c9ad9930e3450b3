"""LogConfig: a partition log's topic-level settings, by Kafka's config names, with units.

`from_properties` reads Kafka's string properties (segment.bytes=..., retention.ms=...) and
rejects bad values with KafkaError(INVALID_CONFIG) naming the key; `to_properties` is its
inverse, for DescribeConfigs. Every topic config Kafka 4.x documents is here, with Kafka's
default and Kafka's validation (ranges, enumerations, booleans, min.compaction.lag.ms <=
max.compaction.lag.ms); the ones whose feature the reference lacks (tiered storage,
replication throttles, preallocation) are accepted and described, and remote.storage.enable=true
is refused as Kafka refuses it on a broker without tiered storage. compression.type other than
`producer` has the leader recompress produced batches into that codec (storage/log.py).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from reference.protocol.compression import CompressionType
from reference.protocol.errors import ErrorCode, KafkaError

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1
SEGMENT_BYTES_MIN = 14  # Kafka's floor for segment.bytes (LegacyRecord.RECORD_OVERHEAD_V0)
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("delete", "compact")
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")  # BrokerCompressionType
GZIP_LEVELS = (-1, *range(1, 10))  # -1: the codec's default (KIP-390)
LZ4_LEVEL_RANGE = (1, 17)
ZSTD_LEVEL_RANGE = (-131072, 22)
BOOLEAN_CONFIGS = ("unclean.leader.election.enable", "preallocate", "remote.storage.enable",
                   "remote.log.copy.disable", "remote.log.delete.on.disable")


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
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms (KIP-354): a dirty record waits no longer
    segment_jitter_ms: int = 0  # segment.jitter.ms
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes
    compression_type: str = "producer"  # compression.type
    compression_gzip_level: int = -1  # compression.gzip.level (KIP-390)
    compression_lz4_level: int = 9  # compression.lz4.level
    compression_zstd_level: int = 3  # compression.zstd.level
    preallocate: str = "false"  # preallocate
    leader_replication_throttled_replicas: str = ""  # leader.replication.throttled.replicas
    follower_replication_throttled_replicas: str = ""  # follower.replication.throttled.replicas
    remote_storage_enable: str = "false"  # remote.storage.enable (KIP-405)
    local_retention_ms: int = -2  # local.retention.ms: -2 = retention.ms
    local_retention_bytes: int = -2  # local.retention.bytes: -2 = retention.bytes
    remote_log_copy_disable: str = "false"  # remote.log.copy.disable (KIP-950)
    remote_log_delete_on_disable: str = "false"  # remote.log.delete.on.disable (KIP-950)

    def __post_init__(self) -> None:
        _check("segment.bytes", self.segment_bytes, SEGMENT_BYTES_MIN, INT_MAX)
        _check("segment.ms", self.segment_ms, 1, LONG_MAX)
        _check("retention.ms", self.retention_ms, -1, LONG_MAX)
        _check("retention.bytes", self.retention_bytes, -LONG_MAX - 1, LONG_MAX)  # Kafka sets no floor
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
        _check("max.compaction.lag.ms", self.max_compaction_lag_ms, 1, LONG_MAX)
        _check("segment.jitter.ms", self.segment_jitter_ms, 0, LONG_MAX)
        _check("segment.index.bytes", self.segment_index_bytes, 4, INT_MAX)
        _check("compression.lz4.level", self.compression_lz4_level, *LZ4_LEVEL_RANGE)
        _check("compression.zstd.level", self.compression_zstd_level, *ZSTD_LEVEL_RANGE)
        _check("local.retention.ms", self.local_retention_ms, -2, LONG_MAX)
        _check("local.retention.bytes", self.local_retention_bytes, -2, LONG_MAX)
        _one_of("compression.gzip.level", self.compression_gzip_level, GZIP_LEVELS)
        _one_of("compression.type", self.compression_type, COMPRESSION_TYPES)
        for key in BOOLEAN_CONFIGS:
            _one_of(key, getattr(self, key.replace(".", "_")), ("true", "false"))
        for key in ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas"):
            _check_throttled_replicas(key, getattr(self, key.replace(".", "_")))
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"conflict topic config setting min.compaction.lag.ms ({self.min_compaction_lag_ms}) > "
                             f"max.compaction.lag.ms ({self.max_compaction_lag_ms})")
        if self.remote_storage_enable == "true":
            raise KafkaError(ErrorCode.INVALID_CONFIG, "remote.storage.enable=true: tiered storage is not enabled "
                                                       "on this broker (remote.log.storage.system.enable=false)")
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"message.timestamp.type={self.message_timestamp_type!r}: expected one of {TIMESTAMP_TYPES}")
        policies = self.cleanup_policy.split(",")
        if not policies or any(policy.strip() not in CLEANUP_POLICIES for policy in policies):
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"cleanup.policy={self.cleanup_policy!r}: expected a list of {CLEANUP_POLICIES}")

    @property
    def compact(self) -> bool:
        """cleanup.policy includes "compact": the log cleaner keeps the latest record per key."""
        return "compact" in (policy.strip() for policy in self.cleanup_policy.split(","))

    @property
    def max_segment_ms(self) -> int:
        """How old the active segment may grow: segment.ms, and for a compacted log no older than
        max.compaction.lag.ms, so its records become cleanable in time (KIP-354)."""
        return min(self.segment_ms, self.max_compaction_lag_ms) if self.compact else self.segment_ms

    @property
    def target_compression(self) -> CompressionType | None:
        """The codec compression.type stores batches in; None for `producer`: as they came."""
        if self.compression_type == "producer":
            return None
        return CompressionType.NONE if self.compression_type == "uncompressed" else CompressionType[self.compression_type.upper()]

    @property
    def compression_level(self) -> int | None:
        """compression.gzip.level, .lz4.level or .zstd.level for the target codec (KIP-390)."""
        return {"gzip": self.compression_gzip_level, "lz4": self.compression_lz4_level,
                "zstd": self.compression_zstd_level}.get(self.compression_type)

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
            if key in BOOLEAN_CONFIGS or key in ("compression.type", "cleanup.policy"):
                text = text.strip().lower()  # Kafka reads booleans and these names case-insensitively
            try:
                values[field_name] = kind(text)
            except (TypeError, ValueError):
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}={text!r} is not a valid {kind.__name__}") from None
        current = {name: getattr(base or cls(), name) for name in _FIELD_TYPES}
        return cls(**(current | values))

    def to_properties(self) -> dict[str, str]:
        return {name.replace("_", "."): str(getattr(self, name)) for name in _FIELD_TYPES}


_FIELD_TYPES = {field.name: {"int": int, "float": float}.get(field.type, str) for field in fields(LogConfig)}


def _one_of(key: str, value: object, allowed: tuple) -> None:
    if value not in allowed:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}={value!r}: expected one of {', '.join(map(str, allowed))}")


def _check_throttled_replicas(key: str, value: str) -> None:
    """Kafka's ThrottledReplicaListValidator: empty, "*", or PARTITION:BROKER pairs."""
    entries = [entry.strip() for entry in value.split(",") if entry.strip()]
    if entries == ["*"] or all(len(pair := entry.split(":")) == 2 and all(p.strip().isdigit() for p in pair)
                               for entry in entries):
        return
    raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}={value!r}: expected *, or a list of PARTITION:BROKER")


def _check(key: str, value: float, minimum: int, maximum: int) -> None:
    if not minimum <= value <= maximum:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}={value} is outside [{minimum}, {maximum}]")
