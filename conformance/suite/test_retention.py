"""Retention and DeleteRecords: offsets are never reused, and data is kept as configured (RET-1, DUR-1).

DeleteRecords moves the log start offset; reads below it are out of range, ListOffsets
earliest follows it, and new records continue from the high watermark. A topic with the
default retention (7 days, no size limit) keeps every acknowledged record, however many.
"""
from __future__ import annotations

import pytest

from conformance import ops
from conformance.ops import expect
from conformance.target import error_name
from conformance.wire import answered_entry
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

COLUMN = "wire"
KEPT_BYTES_TOTAL = 12 * 1024 * 1024  # more than a broker that trims its logs by size would keep
KEPT_BATCH_BYTES = 512 * 1024


@pytest.mark.guarantee("RET-1")
def test_delete_records_moves_the_log_start_and_offsets_are_not_reused(target):
    caps = target.capabilities
    version = caps.version_or_skip(ApiKey.DELETE_RECORDS, 0, 2)
    topic = target.create_topic("delete-records")
    with target.leader_wire(topic) as wire:
        ops.produce(wire, caps, topic, ops.values_batch([f"r{i}".encode() for i in range(10)]))
        response = wire.request(ApiKey.DELETE_RECORDS, version, {
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 4}]}], "timeout_ms": 10_000})
        request = f"DELETE_RECORDS v{version} of {topic}-0"
        deleted = answered_entry(request, answered_entry(request, response.topics, "name", topic, "topic").partitions,
                                 "partition_index", 0, "partition")
        expect((deleted.error_code, deleted.low_watermark) == (0, 4), "low watermark 4 after DeleteRecords to 4",
               f"{error_name(deleted.error_code)}, low watermark {deleted.low_watermark}")
        earliest = ops.list_offset(wire, caps, topic, ops.EARLIEST_TIMESTAMP)
        below = ops.fetch(wire, caps, topic, 2)
        after = ops.produce(wire, caps, topic, ops.values_batch([b"new"]))
        remaining = ops.read_all(wire, caps, topic, start_offset=4)
    expect(earliest.offset == 4, "ListOffsets earliest = 4", earliest.offset)
    expect(below.error_code == ErrorCode.OFFSET_OUT_OF_RANGE, "OFFSET_OUT_OF_RANGE for a fetch at 2 < 4",
           error_name(below.error_code))
    expect(after.base_offset == 10, "the next record at offset 10: offsets are never reused (RET-1)",
           after.base_offset)
    expect([(r.offset, r.value) for r in remaining] == [(i, f"r{i}".encode()) for i in range(4, 10)] + [(10, b"new")],
           "offsets 4..10 with their original records", [(r.offset, r.value) for r in remaining])


@pytest.mark.guarantee("DUR-1", "RET-1")
def test_default_retention_keeps_every_acknowledged_record(target):
    caps = target.capabilities
    topic = target.create_topic("kept")
    batch = ops.values_batch([b"k" * (KEPT_BATCH_BYTES - 100)])
    batches = KEPT_BYTES_TOTAL // KEPT_BATCH_BYTES
    with target.leader_wire(topic) as wire:
        for i in range(batches):
            response = ops.produce(wire, caps, topic, batch)
            expect(response.error_code == 0, f"acks=all produce {i} to succeed", error_name(response.error_code))
        earliest = ops.list_offset(wire, caps, topic, ops.EARLIEST_TIMESTAMP)
        first = ops.fetch(wire, caps, topic, 0, max_bytes=KEPT_BATCH_BYTES, partition_max_bytes=KEPT_BATCH_BYTES)
    expect(earliest.offset == 0, f"log start offset 0 after {KEPT_BYTES_TOTAL >> 20} MiB with the default retention "
           "(7 days, no size limit)", f"log start offset {earliest.offset}: acknowledged records were dropped")
    expect(first.error_code == 0 and ops.fetched_records(first), "offset 0 still readable",
           error_name(first.error_code))
