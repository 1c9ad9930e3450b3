"""Fetch edge cases: out of range, size limits, long poll (VIS-1, ORD-3, PRO-1).

Fetch past the end is OFFSET_OUT_OF_RANGE; the first batch is returned even when it exceeds
max_bytes (KIP-74), so a consumer always makes progress; a long poll waits up to max_wait_ms
for min_bytes and returns early when data arrives.
"""
from __future__ import annotations

import threading
import time

import pytest

from conformance import ops
from conformance.ops import expect
from reference.protocol.errors import ErrorCode

COLUMN = "wire"
LONG_POLL_WAIT_MS = 1500
LONG_POLL_SLACK_S = 0.2  # a broker may answer a little early (timer granularity)
LARGE_VALUE_BYTES = 64 * 1024


@pytest.mark.guarantee("PRO-1", "VIS-1")
def test_fetch_beyond_the_high_watermark_is_offset_out_of_range(target):
    caps = target.capabilities
    topic = target.create_topic("out-of-range")
    with target.leader_wire(topic) as wire:
        ops.produce(wire, caps, topic, ops.values_batch([b"a", b"b"]))
        at_end = ops.fetch(wire, caps, topic, 2)
        beyond = ops.fetch(wire, caps, topic, 10)
    expect(at_end.error_code == 0 and not ops.batches_of(at_end),
           "no error and no records at the high watermark (2)", f"error {at_end.error_code}")
    expect(beyond.error_code == ErrorCode.OFFSET_OUT_OF_RANGE, "OFFSET_OUT_OF_RANGE (1) at offset 10 > HW 2",
           f"error {beyond.error_code}, {len(ops.fetched_records(beyond))} records")


@pytest.mark.guarantee("ORD-3")
def test_first_batch_is_returned_even_when_larger_than_max_bytes(target):
    caps = target.capabilities
    topic = target.create_topic("max-bytes")
    with target.leader_wire(topic) as wire:
        ops.produce(wire, caps, topic, ops.values_batch([b"x" * LARGE_VALUE_BYTES]))
        ops.produce(wire, caps, topic, ops.values_batch([b"y" * LARGE_VALUE_BYTES]))
        data = ops.fetch(wire, caps, topic, 0, max_bytes=1024, partition_max_bytes=1024)
    records = ops.fetched_records(data)
    expect(data.error_code == 0 and records and records[0].offset == 0,
           "the first batch (offset 0), whole, although it exceeds max_bytes=1024 (KIP-74)",
           f"error {data.error_code}, offsets {[r.offset for r in records]}")
    expect(all(r.offset == 0 for r in records), "no second batch beyond the first when over max_bytes",
           [r.offset for r in records])


@pytest.mark.guarantee("VIS-1")
def test_long_poll_waits_for_max_wait_when_no_data_arrives(target):
    caps = target.capabilities
    topic = target.create_topic("long-poll-empty")
    with target.leader_wire(topic) as wire:
        started = time.monotonic()
        data = ops.fetch(wire, caps, topic, 0, max_wait_ms=LONG_POLL_WAIT_MS, min_bytes=1)
        waited_s = time.monotonic() - started
    expect(data.error_code == 0 and not ops.batches_of(data), "an empty answer", f"error {data.error_code}")
    expect(waited_s >= LONG_POLL_WAIT_MS / 1000 - LONG_POLL_SLACK_S,
           f"the broker to hold the fetch about {LONG_POLL_WAIT_MS} ms", f"an answer after {waited_s * 1000:.0f} ms")


@pytest.mark.guarantee("VIS-1")
def test_long_poll_returns_early_when_data_arrives(target):
    caps = target.capabilities
    topic = target.create_topic("long-poll-data")
    wait_ms = 8000

    def produce_later():
        time.sleep(0.5)
        with target.leader_wire(topic) as producer_wire:
            ops.produce(producer_wire, caps, topic, ops.values_batch([b"arrived"]))

    producer = threading.Thread(target=produce_later)
    with target.leader_wire(topic) as wire:
        producer.start()
        started = time.monotonic()
        data = ops.fetch(wire, caps, topic, 0, max_wait_ms=wait_ms, min_bytes=1, timeout_s=wait_ms / 1000 + 10)
        waited_s = time.monotonic() - started
    producer.join()
    expect([r.value for r in ops.fetched_records(data)] == [b"arrived"], "the record produced while polling",
           f"{[r.value for r in ops.fetched_records(data)]} after {waited_s * 1000:.0f} ms")
    expect(waited_s < wait_ms / 1000 / 2, f"an answer well before max_wait_ms={wait_ms}",
           f"{waited_s * 1000:.0f} ms")
