"""Compaction (RET-1): whatever the cleaner removes, offsets keep their records and every key's
latest value stays.

The test writes keyed records in rounds to a compacted topic with short segments, then
watches the log for a while. It checks safety at every look (offsets strictly increasing,
each offset holding the record first written there, every key's latest value present) and
records whether compaction was observed; a broker that has not compacted yet still passes,
since compaction is never promised to happen by a given time. A --quick run looks once.
"""
from __future__ import annotations

import time

import pytest

from conformance import ops
from conformance.ops import expect

COLUMN = "wire"
KEYS = 10
ROUNDS = 5
ROUND_PAUSE_S = 0.3  # lets segment.ms roll a segment between rounds
WATCH_S = 15.0
LOOK_INTERVAL_S = 1.0


@pytest.mark.guarantee("RET-1")
def test_compaction_keeps_offsets_and_the_latest_value_per_key(target, record_property):
    caps = target.capabilities
    topic = target.create_topic("compacted", configs={"cleanup.policy": "compact", "segment.ms": "100"})
    written: dict[int, tuple[bytes, bytes]] = {}
    latest: dict[bytes, int] = {}
    with target.leader_wire(topic) as wire:
        for round_number in range(ROUNDS):
            keys = [f"key-{k}".encode() for k in range(KEYS)]
            values = [f"round-{round_number}-{k}".encode() for k in range(KEYS)]
            response = ops.produce(wire, caps, topic, ops.values_batch(values, keys=keys))
            expect(response.error_code == 0, "keyed produce to succeed", response.error_code)
            for i, (key, value) in enumerate(zip(keys, values)):
                written[response.base_offset + i] = (key, value)
                latest[key] = response.base_offset + i
            time.sleep(ROUND_PAUSE_S)
        observed_removal = False
        deadline = time.monotonic() + (WATCH_S if not target.quick else 0)
        while True:
            stored = ops.read_all(wire, caps, topic, start_offset=ops.list_offset(
                wire, caps, topic, ops.EARLIEST_TIMESTAMP).offset)
            offsets = [r.offset for r in stored]
            expect(offsets == sorted(set(offsets)), "strictly increasing offsets", offsets)
            changed = [r.offset for r in stored if written.get(r.offset) != (r.key, r.value)]
            expect(not changed, "every offset to hold the record first written there", f"changed at {changed}")
            missing = sorted(o for o in latest.values() if o not in set(offsets))
            expect(not missing, "every key's latest value kept", f"latest values missing at offsets {missing}")
            observed_removal = observed_removal or len(offsets) < len(written)
            if observed_removal or time.monotonic() > deadline:
                break
            time.sleep(LOOK_INTERVAL_S)
    record_property("compaction_observed", observed_removal)
