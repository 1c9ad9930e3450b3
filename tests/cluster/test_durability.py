"""DUR-1 and ORD-1 on a real 3-node cluster: acks=all with min.insync.replicas=2 while kill -9
hits the partition's leader several times; every acked record is read back exactly once, in
offset order."""
from __future__ import annotations

import threading

from .conftest import WAIT_S, create_topic, producer, read_all, wait_until

LEADER_KILLS = 3
SEND_INTERVAL_S = 0.005


def test_acked_records_survive_leader_kills(start_cluster):
    cluster = start_cluster()
    topic = create_topic(cluster, **{"min.insync.replicas": "2"})
    acked: dict[bytes, int] = {}
    stop = threading.Event()

    def produce() -> None:
        client = producer(cluster, **{"enable.idempotence": True, "message.timeout.ms": 30_000})

        def on_delivery(error, message) -> None:
            if error is None:
                acked[message.value()] = message.offset()

        for sequence in range(1_000_000):
            if stop.is_set():
                break
            client.produce(topic, b"%08d" % sequence, partition=0, on_delivery=on_delivery)
            client.poll(SEND_INTERVAL_S)
        assert client.flush(WAIT_S * 2) == 0, "every record was acked or failed"

    writer = threading.Thread(target=produce)
    writer.start()
    killed = []
    try:
        for _ in range(LEADER_KILLS):
            acked_before = len(acked)
            wait_until(lambda: len(acked) > acked_before + 50, "records acked before the next kill")
            leader = wait_until(lambda: max(cluster.leader_of(topic, 0), 0), "a leader")
            cluster.kill(leader)  # kill -9
            killed.append(leader)
            wait_until(lambda: cluster.leader_of(topic, 0) not in (-1, leader), "a new leader")
            cluster.start_node(leader)
        acked_before = len(acked)
        wait_until(lambda: len(acked) > acked_before + 50, "records acked on the last leader")
    finally:
        stop.set()
        writer.join()

    records = read_all(cluster, topic)
    offsets = [offset for offset, _ in records]
    assert offsets == list(range(len(records))), "ORD-1: contiguous, increasing offsets"
    read_offsets: dict[bytes, list[int]] = {}
    for offset, value in records:
        read_offsets.setdefault(value, []).append(offset)
    lost = sorted(value for value in acked if value not in read_offsets)
    duplicated = sorted(value for value, at in read_offsets.items() if len(at) > 1)
    assert not lost, f"DUR-1: {len(lost)} acked records lost, first {lost[:5]}"
    assert not duplicated, f"{len(duplicated)} records read twice, first {duplicated[:5]}"
    moved = {value: (offset, read_offsets[value][0]) for value, offset in acked.items()
             if read_offsets[value][0] != offset}
    assert not moved, f"acked offsets differ from where the records are: {list(moved.items())[:5]}"
    values = [value for _, value in records]
    assert values == sorted(values), "ORD-2: the idempotent producer's records are stored in send order"
    assert len(killed) == LEADER_KILLS and len(acked) > 200, (killed, len(acked))
