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
MAX_COMPACTION_WAIT_S = 90.0  # two passes of a cleaner that backs off 15 s (log.cleaner.backoff.ms), loaded


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


@pytest.mark.guarantee("RET-1")
@pytest.mark.thorough
def test_max_compaction_lag_bounds_how_long_a_superseded_value_stays(target):
    """KIP-354: with max.compaction.lag.ms a superseded value is compacted away within that lag
    (plus the cleaner's own pace), even when min.cleanable.dirty.ratio alone would never
    start a pass: here one dirty record of a dozen against a ratio of 0.99."""
    caps = target.capabilities
    topic = target.create_topic("max-compaction-lag", configs={
        "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.99", "max.compaction.lag.ms": "1000",
        "segment.ms": "100"})
    keys = [f"key-{k}".encode() for k in range(KEYS)]
    with target.leader_wire(topic) as wire:
        ops.produce(wire, caps, topic, ops.values_batch([b"first"] * KEYS, keys=keys))
        ops.produce(wire, caps, topic, ops.values_batch([b"second"], keys=keys[:1]))  # offset 0 superseded: all dirty
        time.sleep(ROUND_PAUSE_S)
        ops.produce(wire, caps, topic, ops.values_batch([b"rolls"], keys=keys[-1:]))
        _await_removed(wire, caps, topic, 0, "a never compacted log (all of it dirty)")
        ops.produce(wire, caps, topic, ops.values_batch([b"second"], keys=keys[1:2]))
        superseded = 1  # key-1's first value
        time.sleep(ROUND_PAUSE_S)
        ops.produce(wire, caps, topic, ops.values_batch([b"rolls-again"], keys=keys[-1:]))
        _await_removed(wire, caps, topic, superseded, "max.compaction.lag.ms=1000 with min.cleanable.dirty.ratio=0.99")


def _await_removed(wire, caps, topic: str, offset: int, why: str) -> None:
    deadline = time.monotonic() + MAX_COMPACTION_WAIT_S
    while True:
        start = ops.list_offset(wire, caps, topic, ops.EARLIEST_TIMESTAMP).offset
        offsets = [r.offset for r in ops.read_all(wire, caps, topic, start_offset=start)]
        if offset not in offsets:
            return
        expect(time.monotonic() < deadline, f"the superseded record at offset {offset} compacted away within "
               f"{MAX_COMPACTION_WAIT_S:.0f} s ({why}; KIP-354)", f"offsets {offsets}")
        time.sleep(LOOK_INTERVAL_S)
