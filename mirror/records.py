"""The byte layouts of MM2's internal records, so Kafka's own tools read what we write.

Kafka protocol primitives: STRING is an int16 length and UTF-8 bytes, integers big-endian.

| topic | key | value |
|---|---|---|
| mm2-offset-syncs.<target>.internal (OffsetSync) | topic STRING, partition INT32 | upstreamOffset INT64, offset INT64 |
| <source>.checkpoints.internal (Checkpoint) | group STRING, topic STRING, partition INT32 | version INT16=0, upstreamOffset INT64, offset INT64, metadata STRING |
| heartbeats (Heartbeat) | sourceClusterAlias STRING, targetClusterAlias STRING | version INT16=0, timestamp INT64 |

The mirror's own progress is a Kafka Connect offsets record (MirrorUtils): key
`["MirrorSourceConnector",{"cluster":A,"partition":p,"topic":t}]`, value `{"offset":N}` with N the
last source offset copied.
"""
from __future__ import annotations

import json
import struct
from typing import NamedTuple

VERSION = 0
SOURCE_CONNECTOR = "MirrorSourceConnector"


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _read_string(data: bytes, at: int) -> tuple[str, int]:
    (length,) = struct.unpack_from(">h", data, at)
    return data[at + 2:at + 2 + length].decode(), at + 2 + length


class OffsetSync(NamedTuple):
    topic: str            # the source topic
    partition: int
    upstream_offset: int  # a source offset ...
    offset: int           # ... and where its copy is in the remote partition

    def key(self) -> bytes:
        return _string(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return struct.pack(">qq", self.upstream_offset, self.offset)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> OffsetSync:
        topic, at = _read_string(key, 0)
        (partition,) = struct.unpack_from(">i", key, at)
        return cls(topic, partition, *struct.unpack(">qq", value))


class Checkpoint(NamedTuple):
    group: str
    topic: str            # the remote topic
    partition: int
    upstream_offset: int  # the group's committed offset in the source
    offset: int           # its translation in the target
    metadata: str = ""

    def key(self) -> bytes:
        return _string(self.group) + _string(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return struct.pack(">hqq", VERSION, self.upstream_offset, self.offset) + _string(self.metadata)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Checkpoint:
        group, at = _read_string(key, 0)
        topic, at = _read_string(key, at)
        (partition,) = struct.unpack_from(">i", key, at)
        _, upstream, offset = struct.unpack_from(">hqq", value)
        metadata, _ = _read_string(value, 18)
        return cls(group, topic, partition, upstream, offset, metadata)


class Heartbeat(NamedTuple):
    source: str
    target: str
    timestamp_ms: int

    def key(self) -> bytes:
        return _string(self.source) + _string(self.target)

    def value(self) -> bytes:
        return struct.pack(">hq", VERSION, self.timestamp_ms)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Heartbeat:
        source, at = _read_string(key, 0)
        target, _ = _read_string(key, at)
        return cls(source, target, struct.unpack_from(">hq", value)[1])


def progress_key(source: str, topic: str, partition: int) -> bytes:
    """Connect's offsets key; the partition map's keys in the order Java's HashMap gives them."""
    return json.dumps([SOURCE_CONNECTOR, {"cluster": source, "partition": partition, "topic": topic}],
                      separators=(",", ":")).encode()


def progress_value(last_copied: int) -> bytes:
    return json.dumps({"offset": last_copied}, separators=(",", ":")).encode()


def decode_progress(key: bytes, value: bytes | None) -> tuple[str, str, int, int | None] | None:
    """(cluster, topic, partition, last copied offset or None for a reset), or None if not ours."""
    try:
        connector, partition = json.loads(key)
    except (ValueError, TypeError):
        return None
    if connector != SOURCE_CONNECTOR or not isinstance(partition, dict):
        return None
    last = None if value is None else json.loads(value).get("offset")
    return partition["cluster"], partition["topic"], partition["partition"], last
