"""The numbers behind the plots: latency, fault intervals, throughput, realtime lag, evidence marks."""
from __future__ import annotations

import numpy as np
import pytest

import pyarrow as pa
import pyarrow.parquet as pq

from reports import series
from spark_validation.lag import LAG_SCHEMA
from spec.history import ops_table
from reports_synthetic import (NS, POLL_LATENCY_NS, SEND_LATENCY_NS, SENDS, TIMELINE, build_ops,
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


def test_the_lag_plot_reads_the_checks_realtime_lag_and_nothing_without_a_check(tmp_path):
    path = tmp_path / "realtime-lag.parquet"
    pq.write_table(pa.table({"topic": ["t0", "t1"], "partition": pa.array([0, 1], pa.int32()), "process": [2, 1],
                             "time_ns": [3 * NS, 1 * NS], "lag_ns": [NS // 2, 0]}, schema=LAG_SCHEMA), path)
    lag = series.read_lag(path)
    assert list(lag.time_s) == [1.0, 3.0] and list(lag.lag_s) == [0.0, 0.5]
    assert list(lag.process) == [1, 2] and lag.key == ["t1-1", "t0-0"]
    assert len(series.read_lag(tmp_path / "absent.parquet").lag_s) == 0


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
