"""Acceptance: five unmodified Kafka clients produce and consume through `kspec broker`.

Each client writes RECORD_COUNT records with keys and headers, a fifth of them with each
compression codec, to two partitions, and reads them all back: in order per partition,
nothing missing, nothing extra, keys, values and headers intact (ORD-1, ORD-2, ORD-3).
"""
from __future__ import annotations

import pytest

from conformance.clients import COMPRESSION_CODECS, CLIENTS, Record, driver, unavailable_reason

RECORD_COUNT = 100_000
PARTITIONS = (0, 1)


def records_for(client: str) -> list[list[Record]]:
    """RECORD_COUNT records in one slice per codec; each slice sorted by partition for kcat's runs."""
    per_codec = RECORD_COUNT // len(COMPRESSION_CODECS)
    slices = []
    for c, codec in enumerate(COMPRESSION_CODECS):
        base = c * per_codec
        batch = [Record(partition=i % len(PARTITIONS), key=f"{client}-key-{i % 97}",
                        value=f"{codec}-value-{i:06d}-" + "x" * (i % 50),
                        headers=(("client", client), ("codec", codec)))
                 for i in range(base, base + per_codec)]
        slices.append(sorted(batch, key=lambda r: r.partition))
    return slices


def expected_by_partition(slices: list[list[Record]]) -> dict[int, list[Record]]:
    by_partition: dict[int, list[Record]] = {p: [] for p in PARTITIONS}
    for batch in slices:
        for record in batch:
            by_partition[record.partition].append(record)
    return by_partition


def consume_with(client: str, bootstrap: str, topic: str, count: int, broker):
    if client == "kafkajs":
        if not broker.supports_groups():
            pytest.skip("kafkajs reads only through consumer groups, which this broker does not offer yet")
        return driver(client).consume_group(bootstrap, topic, f"group-{topic}", count)
    return driver(client).consume(bootstrap, topic, list(PARTITIONS), count)


@pytest.mark.parametrize("client", CLIENTS)
def test_client_round_trips_records_in_order_with_every_codec(client, broker, admin_create_topic):
    reason = unavailable_reason(client)
    if reason:
        pytest.skip(reason)
    topic = f"five-clients-{client}"
    admin_create_topic(topic, partitions=len(PARTITIONS))
    slices = records_for(client)
    deliveries = []
    for codec, batch in zip(COMPRESSION_CODECS, slices):
        deliveries += driver(client).produce(broker.bootstrap, topic, batch, compression=codec)

    expected = expected_by_partition(slices)
    # Deliveries, where the client reports them, name contiguous offsets in send order per partition.
    sent_in_order = [record for batch in slices for record in batch]
    next_offset = {p: 0 for p in PARTITIONS}
    for record, delivery in zip(sent_in_order, deliveries, strict=True):
        assert delivery.partition == record.partition
        if delivery.offset is not None:
            assert delivery.offset == next_offset[record.partition], (record, delivery)
        next_offset[record.partition] += 1

    messages = consume_with(client, broker.bootstrap, topic, RECORD_COUNT, broker)
    assert len(messages) == RECORD_COUNT
    for partition in PARTITIONS:
        read = [m for m in messages if m.partition == partition]
        assert [m.offset for m in read] == list(range(len(expected[partition]))), "offsets not contiguous"
        for message, record in zip(read, expected[partition], strict=True):
            assert (message.key, message.value) == (record.key, record.value)
            assert dict(message.headers) == dict(record.headers)
