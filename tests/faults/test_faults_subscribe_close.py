"""A group member's close (faults/subscribe.py Member.close): librdkafka runs the revocation
callback inside consumer.close(), while its group handler is terminating. In a lanes run under
faults, asking for the group metadata there waited forever holding the GIL (a stack dump showed
the callback in rd_kafka_consumer_group_metadata under rd_kafka_consumer_close) and froze the
whole run; the member now asks nothing and records nothing once it is closing. This test does not
make librdkafka hang (a lone broker stopped before the close did not); it checks that a closing
member's revocation, its coordinator gone, records nothing and that close returns."""
from __future__ import annotations

import threading
import time

import pytest

from faults.recorder import Recorder
from faults.subscribe import Member
from faults.workload import Workload, WorkloadOptions
from reference.process import BrokerProcess

CLOSE_TIMEOUT_S = 20.0
ASSIGNED_TIMEOUT_S = 30.0


@pytest.mark.timeout(90)
def test_a_member_that_owns_partitions_closes_and_its_revocation_is_not_recorded(tmp_path):
    options = WorkloadOptions(key_count=2, concurrency=1, sub_via="subscribe")
    with BrokerProcess(str(tmp_path / "broker"), overrides={"group.initial.rebalance.delay.ms": "0"}) as broker:
        recorder = Recorder(tmp_path / "history")
        Workload(broker.bootstrap, recorder, options).create_topics()
        assigned = threading.Event()
        member = Member(0, broker.bootstrap, options, assigned)
        member.subscribe(recorder)
        deadline_s = time.monotonic() + ASSIGNED_TIMEOUT_S
        while not member.owned and time.monotonic() < deadline_s:
            member.poll(recorder)
        assert member.owned, "the member was given the topic's partitions"
        broker.stop()  # its group coordinator gone, as a node killed or cut off at the run's end
        recorded = recorder.next_index
        closing = threading.Thread(target=member.close, daemon=True)
        closing.start()
        closing.join(CLOSE_TIMEOUT_S)
        assert not closing.is_alive(), f"close() did not return within {CLOSE_TIMEOUT_S:.0f} s"
        assert not member.owned, "the revocation ran"
        member.record_rebalances(recorder)
        assert recorder.next_index == recorded, "a closing member records nothing"
        recorder.close()
