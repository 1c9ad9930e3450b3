"""The idempotent producer (IDM-1, ORD-2), exactly as a producer speaks it on the wire.

An idempotent (not transactional) producer gets a producer id from InitProducerId and numbers
its batches per partition. A retried batch (same producer id, epoch and sequence) must not be
stored twice; a batch that skips sequence numbers must be refused with OUT_OF_ORDER_SEQUENCE_NUMBER
(KIP-98; KIP-360 for the later rules).
"""
from __future__ import annotations

import pytest

from conformance import ops
from conformance.ops import expect
from conformance.target import error_name
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

COLUMN = "wire"


def _producer_id(target) -> tuple[int, int]:
    caps = target.capabilities
    version = caps.version_or_skip(ApiKey.INIT_PRODUCER_ID, 0, 4)
    controller = caps.broker(caps.controller_id) or caps.brokers[0]
    with target.wire(controller.address) as wire:
        response = wire.request(ApiKey.INIT_PRODUCER_ID, version, {
            "transactional_id": None, "transaction_timeout_ms": 60_000, "producer_id": -1, "producer_epoch": -1})
    expect(response.error_code == 0 and response.producer_id >= 0,
           "InitProducerId without a transactional id to give a producer id",
           f"{error_name(response.error_code)}, producer id {response.producer_id}")
    return response.producer_id, response.producer_epoch


@pytest.mark.guarantee("IDM-1")
def test_a_retried_batch_is_stored_once(target):
    caps = target.capabilities
    producer_id, epoch = _producer_id(target)
    topic = target.create_topic("idempotent-retry")
    batch = ops.values_batch([b"once-a", b"once-b"], producer_id=producer_id, producer_epoch=epoch, base_sequence=0)
    with target.leader_wire(topic) as wire:
        first = ops.produce(wire, caps, topic, batch)
        retry = ops.produce(wire, caps, topic, batch)
        stored = ops.read_all(wire, caps, topic)
    expect(first.error_code == 0, "the first send to succeed", error_name(first.error_code))
    expect(retry.error_code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER),
           "the retry acknowledged as a duplicate (NONE with the first offset, or DUPLICATE_SEQUENCE_NUMBER)",
           error_name(retry.error_code))
    expect([r.value for r in stored] == [b"once-a", b"once-b"], "each record stored once (IDM-1)",
           [r.value for r in stored])


@pytest.mark.guarantee("IDM-1", "ORD-2")
def test_a_sequence_gap_is_refused(target):
    caps = target.capabilities
    producer_id, epoch = _producer_id(target)
    topic = target.create_topic("idempotent-gap")
    with target.leader_wire(topic) as wire:
        first = ops.produce(wire, caps, topic, ops.values_batch([b"s0"], producer_id=producer_id,
                                                                producer_epoch=epoch, base_sequence=0))
        gap = ops.produce(wire, caps, topic, ops.values_batch([b"s5"], producer_id=producer_id,
                                                              producer_epoch=epoch, base_sequence=5))
        stored = ops.read_all(wire, caps, topic)
    expect(first.error_code == 0, "the first send to succeed", error_name(first.error_code))
    expect(gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
           "OUT_OF_ORDER_SEQUENCE_NUMBER (45) for sequence 5 after 0", error_name(gap.error_code))
    expect([r.value for r in stored] == [b"s0"], "only the in-order batch stored", [r.value for r in stored])
