"""The records of `__consumer_offsets`: keys and values in Kafka's own binary layouts.

Every record key starts with an int16 version that says what the record is, as in Kafka's
group coordinator (`OffsetCommitKey`, `GroupMetadataKey`, `ConsumerGroupMetadataKey`):

    key version 1  OffsetCommitKey             group string, topic string, partition int32
    key version 2  GroupMetadataKey            group string                     (classic group)
    key version 3  ConsumerGroupMetadataKey    group string                     (KIP-848 group)

A null value is a tombstone: the offset, or the group, is deleted, and log compaction
removes the key once delete.retention.ms has passed. Values carry their own int16 version:
OffsetCommitValue v3, GroupMetadataValue v3, ConsumerGroupMetadataValue v0 (flexible, so it
ends with an empty tagged-field section). The partition of a group is its id's Java
String.hashCode modulo the partition count, so every Kafka tool agrees on it.
"""
from __future__ import annotations

from dataclasses import dataclass

from reference.protocol.primitives import Reader, Writer

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
CONSUMER_GROUP_METADATA_KEY_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
CONSUMER_GROUP_METADATA_VALUE_VERSION = 0


def partition_for(group_id: str, partition_count: int) -> int:
    """The __consumer_offsets partition of a group: Utils.abs(groupId.hashCode()) % count."""
    assert partition_count >= 1
    hash_code = 0
    for unit in _utf16_units(group_id):
        hash_code = (31 * hash_code + unit) & 0xFFFFFFFF
    return (hash_code & 0x7FFFFFFF) % partition_count


def _utf16_units(text: str):
    encoded = text.encode("utf-16-be")
    for index in range(0, len(encoded), 2):
        yield (encoded[index] << 8) | encoded[index + 1]


@dataclass(frozen=True)
class OffsetAndMetadata:
    """One committed offset (OffsetCommitValue)."""

    offset: int
    leader_epoch: int  # -1 when the client did not say
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True)
class MemberMetadata:
    """A classic group member as GroupMetadataValue stores it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the metadata of the group's selected protocol
    assignment: bytes


@dataclass(frozen=True)
class GroupMetadata:
    """A classic group as GroupMetadataValue stores it (written when its generation settles)."""

    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberMetadata, ...]


@dataclass(frozen=True)
class OffsetCommitKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupMetadataKey:
    group_id: str


@dataclass(frozen=True)
class ConsumerGroupMetadataKey:
    group_id: str


RecordKey = OffsetCommitKey | GroupMetadataKey | ConsumerGroupMetadataKey


# ---------------------------------------------------------------------------------------------
# Encoding


def encode_key(key: RecordKey) -> bytes:
    writer = Writer()
    if isinstance(key, OffsetCommitKey):
        writer.int16(OFFSET_COMMIT_KEY_VERSION)
        writer.string(key.group_id)
        writer.string(key.topic)
        writer.int32(key.partition)
    elif isinstance(key, GroupMetadataKey):
        writer.int16(GROUP_METADATA_KEY_VERSION)
        writer.string(key.group_id)
    else:
        writer.int16(CONSUMER_GROUP_METADATA_KEY_VERSION)
        writer.string(key.group_id)
    return writer.getvalue()


def encode_offset_value(value: OffsetAndMetadata) -> bytes:
    writer = Writer()
    writer.int16(OFFSET_COMMIT_VALUE_VERSION)
    writer.int64(value.offset)
    writer.int32(value.leader_epoch)
    writer.string(value.metadata)
    writer.int64(value.commit_timestamp_ms)
    return writer.getvalue()


def encode_group_value(value: GroupMetadata) -> bytes:
    writer = Writer()
    writer.int16(GROUP_METADATA_VALUE_VERSION)
    writer.string(value.protocol_type)
    writer.int32(value.generation_id)
    writer.string(value.protocol_name, nullable=True)
    writer.string(value.leader, nullable=True)
    writer.int64(value.current_state_timestamp_ms)
    writer.array_count(len(value.members))
    for member in value.members:
        writer.string(member.member_id)
        writer.string(member.group_instance_id, nullable=True)
        writer.string(member.client_id)
        writer.string(member.client_host)
        writer.int32(member.rebalance_timeout_ms)
        writer.int32(member.session_timeout_ms)
        writer.bytes(member.subscription)
        writer.bytes(member.assignment)
    return writer.getvalue()


def encode_consumer_group_value(group_epoch: int) -> bytes:
    writer = Writer()
    writer.int16(CONSUMER_GROUP_METADATA_VALUE_VERSION)
    writer.int32(group_epoch)
    writer.tagged_fields([])
    return writer.getvalue()


# ---------------------------------------------------------------------------------------------
# Decoding (replay on start)


def decode_key(data: bytes) -> RecordKey:
    reader = Reader(data)
    version = reader.int16()
    if version in (0, OFFSET_COMMIT_KEY_VERSION):
        key: RecordKey = OffsetCommitKey(reader.string(), reader.string(), reader.int32())
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(reader.string())
    elif version == CONSUMER_GROUP_METADATA_KEY_VERSION:
        key = ConsumerGroupMetadataKey(reader.string())
    else:
        raise ValueError(f"__consumer_offsets key version {version} is not one kspec writes")
    return key


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    reader = Reader(data)
    version = reader.int16()
    assert version == OFFSET_COMMIT_VALUE_VERSION, f"OffsetCommitValue v{version}"
    return OffsetAndMetadata(reader.int64(), reader.int32(), reader.string(), reader.int64())


def decode_group_value(data: bytes) -> GroupMetadata:
    reader = Reader(data)
    version = reader.int16()
    assert version == GROUP_METADATA_VALUE_VERSION, f"GroupMetadataValue v{version}"
    protocol_type = reader.string()
    generation_id = reader.int32()
    protocol_name = reader.string(nullable=True)
    leader = reader.string(nullable=True)
    timestamp_ms = reader.int64()
    members = []
    for _ in range(reader.array_count(nullable=False)):
        members.append(MemberMetadata(
            member_id=reader.string(), group_instance_id=reader.string(nullable=True),
            client_id=reader.string(), client_host=reader.string(),
            rebalance_timeout_ms=reader.int32(), session_timeout_ms=reader.int32(),
            subscription=reader.bytes(), assignment=reader.bytes(),
        ))
    return GroupMetadata(protocol_type, generation_id, protocol_name, leader, timestamp_ms, tuple(members))


def decode_consumer_group_value(data: bytes) -> int:
    """The group epoch."""
    reader = Reader(data)
    version = reader.int16()
    assert version == CONSUMER_GROUP_METADATA_VALUE_VERSION, f"ConsumerGroupMetadataValue v{version}"
    return reader.int32()
