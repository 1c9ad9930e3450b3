"""A historical bug on its switch, caught in a real cluster: with kspec.bug.ack.before.isr the
leader answers acks=all before the ISR has the records, so a leader killed right after loses
records a producer was told are safe (DUR-1 fails); with the switch off the same run loses
nothing acked."""
from __future__ import annotations

import signal
import time

import pytest

from .conftest import WAIT_S, create_topic, partition_state, producer, read_all, wait_until

ACK_WAIT_S = 0.8  # the followers stay paused for about this long: less than the session and lag timeouts
FETCH_DRAIN_S = 0.3  # a paused follower's fetch already at the leader is answered (empty) within this


@pytest.mark.parametrize("ack_before_isr", [True, False], ids=["bug-on", "bug-off"])
def test_ack_before_isr_loses_acked_records_only_with_the_bug(start_cluster, ack_before_isr):
    cluster = start_cluster(**{"kspec.bug.ack.before.isr": str(ack_before_isr).lower()})
    topic = create_topic(cluster, **{"min.insync.replicas": "2"})
    acked: dict[bytes, int] = {}
    client = producer(cluster, **{"message.timeout.ms": 20_000})

    def send(prefix: str, count: int) -> None:
        for i in range(count):
            client.produce(topic, f"{prefix}-{i:03d}".encode(), partition=0,
                           on_delivery=lambda error, m: acked.__setitem__(m.value(), m.offset()) if not error else None)

    send("replicated", 20)
    assert client.flush(WAIT_S) == 0 and len(acked) == 20
    wait_until(lambda: len(read_all(cluster, topic)) == 20, "the high watermark passes them: the ISR has them")
    leader, replicas, _ = partition_state(cluster, topic)
    followers = [cluster.nodes[r].process for r in replicas if r != leader]
    for process in followers:
        process.send_signal(signal.SIGSTOP)  # alive but not fetching
    time.sleep(FETCH_DRAIN_S)
    try:
        send("unreplicated", 20)
        client.flush(ACK_WAIT_S)
        acked_unreplicated = sorted(value for value in acked if value.startswith(b"unreplicated"))
        cluster.kill(leader)
    finally:
        for process in followers:
            process.send_signal(signal.SIGCONT)
    wait_until(lambda: partition_state(cluster, topic)[0] not in (-1, leader), "a follower is elected")
    send("after", 1)  # a record of the new leader's epoch
    client.flush(WAIT_S)
    assert b"after-000" in acked
    read = wait_until(lambda: (values := {value for _, value in read_all(cluster, topic)}) >= {b"after-000"} and values,
                      "the new leader's record is below the high watermark")
    lost = sorted(value for value in acked if value not in read)
    if ack_before_isr:
        assert acked_unreplicated and lost == acked_unreplicated, f"the bug loses what it acked early: {lost}"
    else:
        assert not acked_unreplicated, "nothing is acked while the followers are paused"
        assert lost == [], f"DUR-1: lost {lost}"
