"""ListOffsets and timestamps: earliest, latest, by timestamp, max timestamp (ORD-1, VIS-1).

Offsets name records: the latest offset is the high watermark, the earliest is the log start
offset, and a timestamp lookup returns the first offset whose timestamp is at or after it.
"""
from __future__ import annotations

import time

import pytest

from conformance import ops
from conformance.ops import expect

COLUMN = "wire"
# An hour ago, inside any retention.ms a target has by default (7 days): a record older than its
# topic's retention.ms has its segment rolled at the next append (segment.ms counts from a
# segment's first timestamp) and deleted by the broker's next retention check.
BASE_TIMESTAMP_MS = int(time.time() * 1000) - 3_600_000
STEP_MS = 1000


@pytest.fixture
def stamped_topic(target):
    """A topic with three batches at BASE, BASE+1 s and BASE+2 s (two records each)."""
    topic = target.create_topic("timestamps")
    with target.leader_wire(topic) as wire:
        for i in range(3):
            response = ops.produce(wire, target.capabilities, topic,
                                   ops.values_batch([f"t{i}a".encode(), f"t{i}b".encode()],
                                                    timestamp_ms=BASE_TIMESTAMP_MS + i * STEP_MS))
            expect(response.error_code == 0, "setup produce to succeed", response.error_code)
    return topic


@pytest.mark.guarantee("ORD-1", "VIS-1")
def test_earliest_and_latest_offsets_bound_the_log(stamped_topic, target):
    with target.leader_wire(stamped_topic) as wire:
        earliest = ops.list_offset(wire, target.capabilities, stamped_topic, ops.EARLIEST_TIMESTAMP)
        latest = ops.list_offset(wire, target.capabilities, stamped_topic, ops.LATEST_TIMESTAMP)
    expect((earliest.error_code, earliest.offset) == (0, 0), "earliest offset 0", (earliest.error_code, earliest.offset))
    expect((latest.error_code, latest.offset) == (0, 6), "latest offset 6 (the high watermark after 6 records)",
           (latest.error_code, latest.offset))


@pytest.mark.guarantee("ORD-1")
@pytest.mark.parametrize("after_base_ms, offset", [(-1, 0), (0, 0), (1, 2), (STEP_MS, 2), (2 * STEP_MS, 4),
                                                   (2 * STEP_MS + 1, -1)])
def test_timestamp_lookup_finds_the_first_offset_at_or_after(after_base_ms, offset, stamped_topic, target):
    query_ms = BASE_TIMESTAMP_MS + after_base_ms
    with target.leader_wire(stamped_topic) as wire:
        found = ops.list_offset(wire, target.capabilities, stamped_topic, query_ms)
    expect(found.error_code == 0 and found.offset == offset,
           f"offset {offset} for timestamp {query_ms} (-1: no record at or after it)",
           f"error {found.error_code}, offset {found.offset}, timestamp {found.timestamp}")


@pytest.mark.guarantee("ORD-1")
def test_max_timestamp_names_the_record_with_the_largest_timestamp(stamped_topic, target):
    """KIP-734: ListOffsets v7+ with timestamp -3 returns the offset of the max-timestamp record."""
    with target.leader_wire(stamped_topic) as wire:
        found = ops.list_offset(wire, target.capabilities, stamped_topic, ops.MAX_TIMESTAMP, low_version=7)
    expect(found.error_code == 0 and found.timestamp == BASE_TIMESTAMP_MS + 2 * STEP_MS and found.offset in (4, 5),
           f"timestamp {BASE_TIMESTAMP_MS + 2 * STEP_MS} at offset 4 or 5",
           f"error {found.error_code}, offset {found.offset}, timestamp {found.timestamp}")
