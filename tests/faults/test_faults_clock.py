"""Clock skew: a broker under libfaketime stamps LogAppendTime from its moved wall clock, the
clock moves while it runs, and its timers (on the monotonic clock) keep it serving."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, TopicPartition

from broker_helpers import TOPIC, produce
from faults import clock
from faults.targets import ReferenceNode

try:
    clock.libfaketime()
except clock.ClockUnavailable as e:
    pytest.skip(str(e), allow_module_level=True)

SLACK_S = 30  # the broker's stamp against the test's clock, after the offset


def append_times_s(bootstrap: str, count: int) -> list[float]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kspec-test", "log_level": 0})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        stamps = []
        deadline = time.monotonic() + 20
        while len(stamps) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                kind, stamp_ms = message.timestamp()
                assert kind == TIMESTAMP_LOG_APPEND_TIME
                stamps.append(stamp_ms / 1000)
        return stamps
    finally:
        consumer.close()


@pytest.mark.timeout(90)
def test_log_append_time_follows_the_nodes_clock_as_it_moves_forwards_and_backwards(tmp_path):
    node_clock = clock.NodeClock("kt-clock", 0, tmp_path / "state")
    node_clock.create()
    broker = ReferenceNode(str(tmp_path / "node-0"), listen="127.0.0.1:0", node_id=0,
                           overrides={"log.message.timestamp.type": "LogAppendTime"},
                           stderr_path=str(tmp_path / "broker.log"),
                           wrap=lambda command: clock.wrap(node_clock, command))
    try:
        node_clock.set_offset(3 * 3600)
        broker.start()
        acked, _ = produce(broker.bootstrap, range(0, 10))
        node_clock.set_offset(-2 * 3600)
        time.sleep(clock.REREAD_S + 1)  # libfaketime re-reads the offset file once a second
        acked_later, _ = produce(broker.bootstrap, range(10, 20))
        stamps = append_times_s(broker.bootstrap, 20)
        assert broker.running
    finally:
        broker.kill()
        node_clock.remove()
    now_s = time.time()
    assert len(acked) == len(acked_later) == 10 and len(stamps) == 20
    assert all(abs(s - (now_s + 3 * 3600)) < SLACK_S for s in stamps[:10]), stamps[:10]
    assert all(abs(s - (now_s - 2 * 3600)) < SLACK_S for s in stamps[10:]), stamps[10:]
