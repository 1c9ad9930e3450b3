"""Produce, acks and ordering through each real client (ORD-1, ORD-2, ORD-3, DUR-1, DUR-2).

Every selected client writes keyed records with headers to two partitions, one slice per
compression codec; the suite reads them back twice: byte-exact through the wire layer (what
the broker stored) and through the same client (what applications see).
"""
from __future__ import annotations

import pytest

from conformance import ops
from conformance.clients import COMPRESSION_CODECS, Record
from conformance.ops import expect

PARTITIONS = (0, 1)
RECORDS_PER_CODEC_QUICK = 20
RECORDS_PER_CODEC = 200


def _records(client: str, count_per_codec: int) -> list[tuple[str, list[Record]]]:
    slices = []
    for codec in COMPRESSION_CODECS:
        batch = [Record(partition=i % len(PARTITIONS), key=f"key-{i % 7}", value=f"{client}-{codec}-{i:05d}",
                        headers=(("codec", codec),)) for i in range(count_per_codec)]
        slices.append((codec, sorted(batch, key=lambda r: r.partition)))  # kcat sends runs per partition
    return slices


def _read_back(client: str, client_driver, target, topic: str, count: int):
    if client == "kafkajs":  # kafkajs reads only through a consumer group
        if not target.capabilities.offers_classic_groups:
            pytest.skip("kafkajs reads only through consumer groups, which the broker does not offer")
        return client_driver.consume_group(target.bootstrap, topic, f"{topic}-group", count,
                                           extra=target.client_extra(client))
    return client_driver.consume(target.bootstrap, topic, list(PARTITIONS), count, extra=target.client_extra(client))


def _produce(client: str, client_driver, target, topic: str, records: list[Record], **options):
    return client_driver.produce(target.bootstrap, topic, records, extra=target.client_extra(client), **options)


@pytest.mark.guarantee("ORD-1", "ORD-2", "ORD-3")
def test_records_round_trip_in_send_order_with_every_codec(client, client_driver, target):
    topic = target.create_topic(f"roundtrip-{client}", partitions=len(PARTITIONS))
    per_codec = RECORDS_PER_CODEC_QUICK if target.quick else RECORDS_PER_CODEC
    sent: dict[int, list[Record]] = {p: [] for p in PARTITIONS}
    for codec, batch in _records(client, per_codec):
        deliveries = _produce(client, client_driver, target, topic, batch, compression=codec)
        expect(len(deliveries) == len(batch), f"{len(batch)} deliveries for {codec}", len(deliveries))
        for record in batch:
            sent[record.partition].append(record)

    for partition in PARTITIONS:
        with target.leader_wire(topic, partition) as wire:
            stored = ops.read_all(wire, target.capabilities, topic, partition=partition)
        offsets = [r.offset for r in stored]
        expect(offsets == list(range(len(sent[partition]))),
               f"contiguous offsets 0..{len(sent[partition]) - 1} in partition {partition} (ORD-1)",
               f"{len(offsets)} records, offsets {offsets[:5]}...{offsets[-5:]}")
        values = [r.value.decode() for r in stored]
        expected = [r.value for r in sent[partition]]
        first_difference = next((i for i, (a, b) in enumerate(zip(values, expected)) if a != b), None)
        expect(values == expected, f"partition {partition} stored in send order (ORD-2)",
               f"first difference at offset {first_difference}: {values[first_difference:first_difference + 3]} "
               f"vs sent {expected[first_difference:first_difference + 3]}" if first_difference is not None
               else f"{len(values)} stored vs {len(expected)} sent")
        expect(all(r.key.decode() == s.key and dict(r.headers) == {k: v.encode() for k, v in s.headers}
                   for r, s in zip(stored, sent[partition])), "keys and headers stored as sent", "a difference")

    total = sum(len(v) for v in sent.values())
    read = _read_back(client, client_driver, target, topic, total)
    for partition in PARTITIONS:
        seen = [(m.offset, m.value) for m in read if m.partition == partition]
        expect(seen == [(i, r.value) for i, r in enumerate(sent[partition])],
               f"{client} to read partition {partition} in offset order with nothing skipped (ORD-3)",
               f"{len(seen)} records, first offsets {[o for o, _ in seen[:5]]}")


@pytest.mark.guarantee("DUR-1", "DUR-2")
@pytest.mark.parametrize("acks", ["all", 1])
def test_acknowledged_records_are_readable(acks, client, client_driver, target):
    topic = target.create_topic(f"acks{acks}-{client}")
    records = [Record(partition=0, key=None, value=f"acks-{acks}-{i}") for i in range(10)]
    _produce(client, client_driver, target, topic, records, acks=acks)
    with target.leader_wire(topic) as wire:
        stored = ops.read_all(wire, target.capabilities, topic)
    expect([r.value.decode() for r in stored] == [r.value for r in records],
           f"all 10 records acknowledged with acks={acks} readable from the leader", [r.value for r in stored])
