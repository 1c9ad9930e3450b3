"""The workload's clients against a real broker. Pipelined sends (faults.workload.Sender): a
send waiting on a paused broker holds up no other send, every send in flight is its own
process, and every send invoked completes: ok with its offset, or info once
message.timeout.ms has passed, naming the records reported timed out. Assign (faults.workload.Client): a partition kept resumes
where the process last read, also when nothing was read since the last assign."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from faults.recorder import Recorder
from faults.workload import Client, Sender, Workload, WorkloadOptions
from faults_helpers import wait_until
from reference.process import BrokerProcess
from spec.history import Poll, Record, ops_from_table, read_history

OPTIONS = WorkloadOptions(key_count=2, send_timeout_s=3.0)
SENDS = 200
COMPLETION_WAIT_S = 60.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(str(tmp_path_factory.mktemp("sender") / "data")) as broker:
        recorder = Recorder(tmp_path_factory.mktemp("topics"))
        Workload(broker.bootstrap, recorder, OPTIONS).create_topics()
        recorder.close()
        yield broker


def sends_of(out_dir: Path, sends: list[Record]) -> list:
    """The completed send ops of the history, checking that no process ever had two ops open."""
    open_by_process = {}
    completions = []
    for op in ops_from_table(read_history(out_dir / "history.parquet")):
        if op.type == "invoke":
            assert op.process not in open_by_process, f"process {op.process} invoked while its op was open"
            open_by_process[op.process] = op
        else:
            assert open_by_process.pop(op.process).f == op.f
            completions.append(op)
    assert not open_by_process and len(completions) == len(sends)
    return completions


def completed(sender: Sender) -> bool:
    sender.serve(0.1)
    return not sender.in_flight


def test_sends_complete_ok_with_their_offsets_and_free_processes_serve_later_sends(broker, tmp_path):
    recorder = Recorder(tmp_path)
    sender = Sender(broker.bootstrap, OPTIONS, recorder, iter(range(1_000_000)))
    sends = [Record("t0", n % 2, n % 2, n) for n in range(SENDS)]
    waves = [sends[: SENDS // 2], sends[SENDS // 2:]]
    for wave in waves:
        for record in wave:
            sender.send([record])
        assert wait_until(lambda: completed(sender), COMPLETION_WAIT_S)
    sender.close(0)
    recorder.close()
    completions = sends_of(tmp_path, sends)
    assert {op.type for op in completions} == {"ok"}
    offsets = {(m.record.partition, m.record.offset) for op in completions for m in op.mops}
    assert len(offsets) == SENDS and all(offset is not None for _, offset in offsets)
    first, second = completions[: SENDS // 2], completions[SENDS // 2:]
    assert {op.process for op in second} <= {op.process for op in first}, "the first wave's processes serve the second"


def test_sends_to_a_paused_broker_return_at_once_and_complete_as_info_on_retired_processes(broker, tmp_path):
    recorder = Recorder(tmp_path)
    sender = Sender(broker.bootstrap, OPTIONS, recorder, iter(range(1_000_000)))
    sends = [Record("t0", n % 2, n % 2, 1_000_000 + n) for n in range(SENDS // 4)]
    os.kill(broker.process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        for record in sends:
            sender.send([record])
        assert time.monotonic() - started < OPTIONS.send_timeout_s, "no send waited for an ack"
        assert len(sender.in_flight) == len(sends)
        assert wait_until(lambda: completed(sender), COMPLETION_WAIT_S)
    finally:
        os.kill(broker.process.pid, signal.SIGCONT)
    sender.close(0)
    recorder.close()
    completions = sends_of(tmp_path, sends)
    assert {op.type for op in completions} == {"info"}
    assert len({op.process for op in completions}) == len(sends), "a process whose op is info is retired"
    # each op names its record librdkafka reported timed out (_MSG_TIMED_OUT): IDM-1 allows its resend's duplicate
    assert sorted(tuple(r) for op in completions for r in op.extra["timed_out"]) == \
        sorted((r.topic, r.partition, r.value) for r in sends)
    assert sender.idle_processes == []


def test_a_reassign_keeping_a_partition_resumes_where_the_process_last_read(broker, tmp_path):
    from confluent_kafka import TopicPartition
    recorder = Recorder(tmp_path)
    sender = Sender(broker.bootstrap, OPTIONS, recorder, iter(range(1_000_000)))
    for n in range(SENDS // 4):
        sender.send([Record("t0", 0, 0, 2_000_000 + n)])
    assert wait_until(lambda: completed(sender), COMPLETION_WAIT_S)
    client = Client(0, broker.bootstrap, OPTIONS)
    try:
        _, high_watermark = client.consumer.get_watermark_offsets(TopicPartition("t0", 0), timeout=COMPLETION_WAIT_S)
        client.assign(recorder, [0])
        assert wait_until(lambda: client.poll(recorder) and client.positions[("t0", 0)] >= high_watermark,
                          COMPLETION_WAIT_S, interval_s=0)
        client.assign(recorder, [0, 1])  # key 0 kept, nothing read from it since
        client.assign(recorder, [0])     # kept again, still nothing read
        sender.send([Record("t0", 0, 0, 3_000_000)])
        assert wait_until(lambda: completed(sender), COMPLETION_WAIT_S)
        assert wait_until(lambda: client.poll(recorder) and client.positions[("t0", 0)] > high_watermark,
                          COMPLETION_WAIT_S, interval_s=0)
    finally:
        sender.close(0)
        client.close()
    recorder.close()
    ops = list(ops_from_table(read_history(tmp_path / "history.parquet")))
    assigns = [i for i, op in enumerate(ops) if op.f == "assign" and op.type == "ok"]
    polled_after = [r for op in ops[assigns[1]:] if op.f == "poll" and op.type == "ok"
                    for m in op.mops if isinstance(m, Poll) for r in m.records if r.partition == 0]
    assert polled_after and min(r.offset for r in polled_after) == high_watermark, "no record read twice"


def test_a_transactional_call_blocked_past_its_timeout_is_given_up_and_its_errors_pass_through():
    """librdkafka's send_offsets_to_transaction can block far past its timeout (issues 5456 and
    5511); the workload gives such a call up instead of waiting for it forever."""
    import threading
    from faults.workload import TxnCallBlocked, _bounded
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(TxnCallBlocked, match="still blocked"):
        _bounded(release.wait, 60, limit_s=0.2)
    assert time.monotonic() - started < 5
    release.set()
    assert _bounded(lambda a, b: a + b, 2, 3, limit_s=5) == 5
    with pytest.raises(ZeroDivisionError):
        _bounded(lambda: 1 / 0, limit_s=5)
