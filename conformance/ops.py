"""Wire-level operations the suite builds its checks from, and the way a check reports a failure.

Each operation picks the highest version that the broker, kspec's codec and the operation's
own range allow (Capabilities.version), sends one exact request and returns the part of the
response a test looks at; a response without the topic or partition asked for is a Finding
that says so. `expect` turns a failed check into a message that says what was expected and
what was seen.
"""
from __future__ import annotations

import time

from conformance.capabilities import Capabilities
from conformance.wire import Finding, WireClient, answered_entry, error_name, request_name
from reference.protocol.api_keys import ApiKey
from reference.protocol.records import Record, RecordBatch, build_batch, iter_batches

PRODUCE_RANGE = (3, 12)  # v3 brings RecordBatch v2; v13 names topics by id (KIP-516)
FETCH_RANGE = (4, 12)  # v4 brings isolation_level and the LSO; v13 names topics by id
LIST_OFFSETS_RANGE = (1, 9)  # v7 adds MAX_TIMESTAMP (-3), v8 EARLIEST_LOCAL, v9 LATEST_TIERED
REQUEST_TIMEOUT_MS = 10_000

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3  # KIP-734

READ_UNCOMMITTED = 0
READ_COMMITTED = 1

CONSUMER_REPLICA_ID = -1
NO_LEADER_EPOCH = -1
FETCH_LEADER_EPOCH_VERSION = 9  # Fetch v9 carries the fetcher's current leader epoch (KIP-320)


def expect(condition: bool, expected: str, seen: object) -> None:
    """Fail with 'expected ...; seen ...' unless condition holds."""
    if not condition:
        raise AssertionError(f"expected {expected}; seen {seen}")


def values_batch(values: list[bytes], *, keys: list[bytes | None] | None = None, timestamp_ms: int | None = None,
                 **batch_fields) -> bytes:
    """One RecordBatch v2 holding the values (and keys) with one timestamp, as a producer builds it."""
    timestamp_ms = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    keys = keys or [None] * len(values)
    return build_batch([Record(timestamp=timestamp_ms, key=k, value=v) for k, v in zip(keys, values)], **batch_fields)


def produce(wire: WireClient, caps: Capabilities, topic: str, records: bytes, *, partition: int = 0,
            acks: int = -1, transactional_id: str | None = None, timeout_ms: int = REQUEST_TIMEOUT_MS):
    """The partition response of one Produce request (acks=0 must use send_produce_without_response).
    timeout_ms bounds how long an acks=all produce waits for the in-sync replicas."""
    assert acks in (-1, 1), "acks=0 gets no response; use send_produce"
    version = caps.version_or_skip(ApiKey.PRODUCE, *PRODUCE_RANGE)
    response = wire.request(ApiKey.PRODUCE, version,
                            produce_body(topic, records, partition, acks, transactional_id, timeout_ms))
    request = f"{request_name(ApiKey.PRODUCE, version)} to {topic}-{partition} at {wire.address}"
    answered = answered_entry(request, response.responses, "name", topic, "topic")
    return answered_entry(request, answered.partition_responses, "index", partition, "partition")


def produce_body(topic: str, records: bytes, partition: int, acks: int, transactional_id: str | None = None,
                 timeout_ms: int = REQUEST_TIMEOUT_MS) -> dict:
    return {"transactional_id": transactional_id, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}


def fetch(wire: WireClient, caps: Capabilities, topic: str, offset: int, *, partition: int = 0,
          max_wait_ms: int = 0, min_bytes: int = 0, max_bytes: int = 1 << 20,
          partition_max_bytes: int = 1 << 20, isolation_level: int = READ_UNCOMMITTED, timeout_s: float | None = None,
          replica_id: int = CONSUMER_REPLICA_ID, current_leader_epoch: int = NO_LEADER_EPOCH):
    """The partition data of one Fetch request (no fetch session); a consumer's unless replica_id
    names a broker. A current_leader_epoch other than -1 needs v9 (KIP-320)."""
    low_version = FETCH_RANGE[0] if current_leader_epoch == NO_LEADER_EPOCH else FETCH_LEADER_EPOCH_VERSION
    version = caps.version_or_skip(ApiKey.FETCH, low_version, FETCH_RANGE[1])
    response = wire.request(ApiKey.FETCH, version, {
        "replica_id": replica_id, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
        "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                                     "log_start_offset": -1,
                                                     "current_leader_epoch": current_leader_epoch,
                                                     "partition_max_bytes": partition_max_bytes}]}],
        "forgotten_topics_data": [], "rack_id": ""}, timeout_s=timeout_s)
    request = f"{request_name(ApiKey.FETCH, version)} of {topic}-{partition} at offset {offset} from {wire.address}"
    if response.get("error_code", 0) != 0:
        raise Finding(f"{request}: answered the whole request with {error_name(response.error_code)}; Kafka's "
                      "top-level Fetch error is for fetch sessions (KIP-227), and this request opens none")
    answered = answered_entry(request, response.responses, "topic", topic, "topic")
    return answered_entry(request, answered.partitions, "partition_index", partition, "partition")


def batches_of(partition_data) -> list[RecordBatch]:
    """The v2 batches in a fetch response's records (a trailing partial batch is dropped, as clients do)."""
    records = partition_data.records
    return [b for b in iter_batches(bytes(records))] if records else []


def fetched_records(partition_data) -> list[Record]:
    """The data records of a fetch response, control batches left out."""
    return [r for batch in batches_of(partition_data) if not batch.is_control for r in batch.records()]


def read_batches(wire: WireClient, caps: Capabilities, topic: str, *, partition: int = 0, start_offset: int = 0,
                 isolation_level: int = READ_UNCOMMITTED) -> list[RecordBatch]:
    """Every batch from start_offset to the end the broker serves (HW, or LSO for read_committed)."""
    batches: list[RecordBatch] = []
    offset = start_offset
    while True:
        data = fetch(wire, caps, topic, offset, partition=partition, isolation_level=isolation_level)
        expect(data.error_code == 0, f"Fetch {topic}-{partition} at {offset} to succeed", error_name(data.error_code))
        fetched = batches_of(data)
        if not fetched:
            return batches
        batches += fetched
        offset = fetched[-1].next_offset


def read_all(wire: WireClient, caps: Capabilities, topic: str, *, partition: int = 0, start_offset: int = 0,
             isolation_level: int = READ_UNCOMMITTED) -> list[Record]:
    """Every data record from start_offset to the end the broker serves; control batches left out.
    (Aborted records are not filtered: read_committed here means "up to the LSO".)"""
    batches = read_batches(wire, caps, topic, partition=partition, start_offset=start_offset,
                           isolation_level=isolation_level)
    return [r for b in batches if not b.is_control for r in b.records() if r.offset >= start_offset]


def list_offset(wire: WireClient, caps: Capabilities, topic: str, timestamp: int, *, partition: int = 0,
                low_version: int = LIST_OFFSETS_RANGE[0], isolation_level: int = READ_UNCOMMITTED):
    version = caps.version_or_skip(ApiKey.LIST_OFFSETS, low_version, LIST_OFFSETS_RANGE[1])
    response = wire.request(ApiKey.LIST_OFFSETS, version, {
        "replica_id": -1, "isolation_level": isolation_level,
        "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp,
                                                   "current_leader_epoch": -1}]}]})
    request = f"{request_name(ApiKey.LIST_OFFSETS, version)} of {topic}-{partition} (timestamp {timestamp})"
    answered = answered_entry(request, response.topics, "name", topic, "topic")
    return answered_entry(request, answered.partitions, "partition_index", partition, "partition")


def high_watermark(wire: WireClient, caps: Capabilities, topic: str, partition: int = 0) -> int:
    """The latest offset ListOffsets reports: the high watermark, for read_uncommitted."""
    return list_offset(wire, caps, topic, LATEST_TIMESTAMP, partition=partition).offset
