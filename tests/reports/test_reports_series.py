"""The numbers behind the plots: latency, fault intervals, throughput, realtime lag, evidence marks."""
from __future__ import annotations

import numpy as np
import pytest

from reports import series
from spec.history import ops_table
from reports_synthetic import (NS, POLL_LATENCY_NS, SEND_LATENCY_NS, SENDS, STEP_NS, TIMELINE, build_ops,
                                    write_run)


@pytest.fixture(scope="module")
def history():
    return ops_table(build_ops()[0])


def test_completions_are_client_ops_with_their_latency(history):
    done = series.completions(history)
    assert set(done.f) == {"send", "poll"}, "assign and nemesis ops are not plotted"
    sends = done.f == "send"
    assert sends.sum() == SENDS
    ok_sends = sends & (done.type == "ok")
    assert np.allclose(done.latency_ms[ok_sends], SEND_LATENCY_NS / series.NS_PER_MS)
    assert np.allclose(done.latency_ms[done.f == "poll"], POLL_LATENCY_NS / series.NS_PER_MS)
    assert (done.type == "info").sum() == 1 and done.latency_ms[done.type == "info"][0] == pytest.approx(900)
    assert np.allclose(done.complete_s - done.invoke_s, done.latency_ms / 1000)


def test_a_fault_lasts_from_its_start_to_its_stop_or_to_the_end_of_the_run():
    intervals = series.nemesis_intervals(TIMELINE, end_s=6.5)
    assert [(i.package, i.start_s, i.stop_s) for i in intervals] == [("partition", 1.0, 3.0), ("kill", 4.0, 6.5)]
    assert intervals[1].label == "kill leader node 1"
    failed = series.nemesis_intervals([{"time_ns": 0, "action": "start", "package": "pause",
                                        "value": {"error": "OSError: no such process"}}], end_s=1.0)
    assert failed[0].label == "pause (could not apply: OSError: no such process)"


def test_throughput_counts_every_completion_once_in_its_bin(history):
    done = series.completions(history)
    rate = series.throughput(done, bin_s=1.0, end_s=series.end_s(history, TIMELINE))
    assert len(rate.bin_starts_s) == 7, "the last send is acked just after 6 s"
    assert sum(int(c.sum()) for c in rate.counts.values()) == len(done.f)
    # one send every STEP_NS: ten per second, minus the one that timed out in the third second
    assert list(rate.counts["send", "ok"]) == [9, 10, 9, 10, 10, 10, 1]
    assert rate.counts["send", "info"].sum() == 1 and rate.counts["send", "info"][2] == 1


def test_realtime_lag_is_poll_start_minus_when_the_next_offset_existed(history):
    lag = series.realtime_lag(history)
    keys = np.array(lag.key)
    first = np.argmin(np.where(keys == "t0-0", lag.time_s, np.inf))
    # the first poll starts just after send 4 (0.4 s); offset 0 of t0-0 was acked at 0.1 s
    assert lag.time_s[first] == pytest.approx(4 * STEP_NS / NS + (SEND_LATENCY_NS + 1_000) / NS)
    assert lag.lag_s[first] == pytest.approx(lag.time_s[first] - (STEP_NS + SEND_LATENCY_NS) / NS)
    assert (lag.lag_s >= 0).all() and set(lag.process) == {1}
    # a poll that read everything there was leaves no lag until a newer offset is acked
    assert lag.lag_s.max() < 1.0


def test_a_process_with_nothing_to_catch_up_on_has_no_lag():
    from spec.history import Op, Poll, Record, Send
    ops = [Op(0, 0, "invoke", "send", 0, 0, (Send(Record("t", 0, 0, 1)),)),
           Op(1, 0, "ok", "send", 10, 0, (Send(Record("t", 0, 0, 1, 0)),)),
           Op(2, 1, "invoke", "assign", 20, 20, assignment=(("t", 0),)),
           Op(3, 1, "ok", "assign", 21, 20, assignment=(("t", 0),)),
           Op(4, 1, "invoke", "poll", 30, 30, (Poll(),)),
           Op(5, 1, "ok", "poll", 40, 30, (Poll((Record("t", 0, 0, 1, 0),)),)),
           Op(6, 1, "invoke", "poll", 50, 50, (Poll(),)),
           Op(7, 1, "ok", "poll", 60, 50, (Poll(),))]
    lag = series.realtime_lag(ops_table(ops))
    assert list(lag.lag_s * series.NS_PER_S) == pytest.approx([20, 0])  # 30 - 10, then caught up


def test_highlights_are_the_anomalys_records_not_whole_polls(tmp_path):
    run = write_run(tmp_path / "run")
    import pyarrow.parquet as pq
    rows = pq.read_table(run.path / "check" / "anomalies.parquet").to_pylist()
    timeline = series.partition_timeline(ops_table(run.ops), "t0", 0)
    marks = series.highlights(timeline, rows)
    assert {m.op for m in marks} == {run.first_poll, run.reread_poll}
    reread = [m for m in marks if m.op == run.reread_poll]
    # of the re-read's thirty records, only those with the anomaly's values (1, and the last read before)
    assert sorted(m.offset for m in reread) == [0, 23]
    assert not any(m.send for m in marks) and {m.anomaly for m in marks} == {"nonmonotonic-poll"}
    assert series.highlights(series.partition_timeline(ops_table(run.ops), "t0", 1), rows) == []
