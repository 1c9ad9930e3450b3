"""Visibility: nothing above the high watermark, and a read offset never changes (VIS-1, VIS-2).

On every broker that leads a partition of the topic, a fetch returns only records below the
high watermark it reports; reading the same offsets again, from a new connection, returns the
same records.
"""
from __future__ import annotations

import pytest

from conformance import ops
from conformance.ops import expect

COLUMN = "wire"
PARTITION_COUNT = 3
BATCHES = 5


@pytest.mark.guarantee("VIS-1", "VIS-2")
def test_fetches_stop_at_the_high_watermark_and_repeat_exactly(target):
    caps = target.capabilities
    topic = target.create_topic("visibility", partitions=PARTITION_COUNT, replication_factor=-1)
    for partition in range(PARTITION_COUNT):
        with target.leader_wire(topic, partition) as wire:
            for i in range(BATCHES):
                response = ops.produce(wire, caps, topic, ops.values_batch([f"p{partition}-{i}".encode()] * 3),
                                       partition=partition)
                expect(response.error_code == 0, "produce acks=all to succeed", response.error_code)
            data = ops.fetch(wire, caps, topic, 0, partition=partition)
            first_read = ops.fetched_records(data)
        expect(all(r.offset < data.high_watermark for r in first_read),
               f"only records below the high watermark {data.high_watermark} (VIS-1)",
               [r.offset for r in first_read if r.offset >= data.high_watermark])
        expect(data.high_watermark == BATCHES * 3, f"HW {BATCHES * 3} once acks=all produces returned",
               data.high_watermark)
        with target.leader_wire(topic, partition) as again:
            second_read = ops.read_all(again, caps, topic, partition=partition)
        expect(second_read[:len(first_read)] == first_read, "the same records at the same offsets (VIS-2)",
               "a difference between two reads")
