"""The records of `__transaction_state`: keys and values in Kafka's own binary layouts.

One record per change of a transactional id's state, keyed by the id, so log compaction
keeps the latest state of each id and the coordinator rebuilds every id by replaying its
partition in order (`TransactionLogKey` and `TransactionLogValue` v0 in Kafka):

    key    int16 version (0), transactional_id string
    value  int16 version (0), producer_id int64, producer_epoch int16,
           transaction_timeout_ms int32, transaction_status int8,
           transaction_partitions nullable array of (topic string, partition_ids array of int32),
           transaction_last_update_timestamp_ms int64, transaction_start_timestamp_ms int64

A null value is a tombstone (the id expired). The partition of an id is its Java
String.hashCode modulo transaction.state.log.num.partitions, as for group ids.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from reference.coordinator.records import partition_for
from reference.protocol.primitives import Reader, Writer

TRANSACTION_STATE_TOPIC = "__transaction_state"
TRANSACTION_LOG_KEY_VERSION = 0
TRANSACTION_LOG_VALUE_VERSION = 0

__all__ = ["TRANSACTION_STATE_TOPIC", "TransactionState", "TransactionLogValue", "encode_key", "decode_key",
           "encode_value", "decode_value", "partition_for"]


class TransactionState(IntEnum):
    """The transaction states, with the byte Kafka stores as transaction_status."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name Kafka's admin APIs use (ListTransactions, DescribeTransactions)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


@dataclass(frozen=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TransactionState
    partitions: frozenset[tuple[str, int]]
    last_update_timestamp_ms: int
    start_timestamp_ms: int


def encode_key(transactional_id: str) -> bytes:
    writer = Writer()
    writer.int16(TRANSACTION_LOG_KEY_VERSION)
    writer.string(transactional_id)
    return writer.getvalue()


def decode_key(data: bytes) -> str:
    reader = Reader(data)
    version = reader.int16()
    if version != TRANSACTION_LOG_KEY_VERSION:
        raise ValueError(f"__transaction_state key version {version}")
    transactional_id = reader.string()
    assert transactional_id is not None
    return transactional_id


def encode_value(value: TransactionLogValue) -> bytes:
    writer = Writer()
    writer.int16(TRANSACTION_LOG_VALUE_VERSION)
    writer.int64(value.producer_id)
    writer.int16(value.producer_epoch)
    writer.int32(value.transaction_timeout_ms)
    writer.int8(value.state)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(value.partitions):
        by_topic.setdefault(topic, []).append(partition)
    writer.int32(len(by_topic))
    for topic, partition_ids in by_topic.items():
        writer.string(topic)
        writer.int32(len(partition_ids))
        for partition in partition_ids:
            writer.int32(partition)
    writer.int64(value.last_update_timestamp_ms)
    writer.int64(value.start_timestamp_ms)
    return writer.getvalue()


def decode_value(data: bytes) -> TransactionLogValue:
    reader = Reader(data)
    version = reader.int16()
    if version != TRANSACTION_LOG_VALUE_VERSION:
        raise ValueError(f"__transaction_state value version {version}")
    producer_id, producer_epoch = reader.int64(), reader.int16()
    timeout_ms, state = reader.int32(), TransactionState(reader.int8())
    partitions = set()
    for _ in range(max(0, reader.int32())):  # -1: a null array
        topic = reader.string()
        for _ in range(reader.int32()):
            partitions.add((topic, reader.int32()))
    return TransactionLogValue(producer_id, producer_epoch, timeout_ms, state, frozenset(partitions),
                               reader.int64(), reader.int64())
