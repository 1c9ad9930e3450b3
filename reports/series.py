"""What a run report plots, computed from a history table (spec/history.py) and a nemesis timeline.

Pure functions: a pyarrow table and the timeline's lines in, numpy arrays and small
dataclasses out; reports/plots.py draws them. Times are seconds since the run started.

- completions: every completed client op (send, poll, txn) with its latency and outcome;
- nemesis_intervals: when each fault package was active;
- throughput: completions per time bin, by f and outcome;
- read_lag: how far behind the log each consumer was when it polled, as the Spark check
  computed it (realtime-lag.parquet beside verdict.json);
- partition_timeline: the offsets a partition's sends got and its polls read, over time.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spec.history import CLIENT_FS, NEMESIS_PROCESS

NS_PER_S = 1e9
NS_PER_MS = 1e6
OUTCOMES = ("ok", "info", "fail")


@dataclass(frozen=True)
class Completions:
    """One entry per completed client op, in history order."""
    index: np.ndarray        # history index of the completion
    invoke_s: np.ndarray
    complete_s: np.ndarray
    latency_ms: np.ndarray
    type: np.ndarray         # ok, info, fail
    f: np.ndarray            # send, poll, txn


@dataclass(frozen=True)
class Interval:
    """A fault package active from start_s to stop_s (the run's end when it was never healed)."""
    package: str
    start_s: float
    stop_s: float
    label: str


@dataclass(frozen=True)
class Throughput:
    bin_starts_s: np.ndarray
    bin_s: float
    counts: dict[tuple[str, str], np.ndarray]  # (f, type) -> completions per bin


@dataclass(frozen=True)
class Lag:
    """One point per (ok poll, partition the polling process had), thinned by the check on long runs."""
    time_s: np.ndarray
    lag_s: np.ndarray
    process: np.ndarray
    key: list[str]           # "topic-partition"


@dataclass(frozen=True)
class PartitionTimeline:
    topic: str
    partition: int
    send_s: np.ndarray       # ack time of each ok send with a known offset
    send_offset: np.ndarray
    send_value: np.ndarray
    send_index: np.ndarray
    read_s: np.ndarray       # completion time of each read of the partition
    read_offset: np.ndarray
    read_value: np.ndarray
    read_index: np.ndarray


@dataclass(frozen=True)
class Highlight:
    """A send or read of a partition that is evidence of an anomaly."""
    time_s: float
    offset: int
    op: int
    anomaly: str
    send: bool


def _client_completions(table: pa.Table) -> pa.Table:
    """The first row of every completed client op (send, poll, txn)."""
    mask = pc.and_(pc.and_(pc.equal(table["seq"], 0), pc.not_equal(table["type"], "invoke")),
                   pc.and_(pc.not_equal(table["process"], NEMESIS_PROCESS), pc.is_in(table["f"], pa.array(CLIENT_FS))))
    return table.filter(mask)


def completions(table: pa.Table) -> Completions:
    rows = _client_completions(table)
    time_ns = rows["time_ns"].to_numpy()
    invoke_ns = pc.fill_null(rows["invoke_time_ns"], rows["time_ns"]).to_numpy()
    assert (time_ns >= invoke_ns).all(), "a completion precedes its invocation"
    return Completions(rows["index"].to_numpy(), invoke_ns / NS_PER_S, time_ns / NS_PER_S,
                       (time_ns - invoke_ns) / NS_PER_MS, np.array(rows["type"].to_pylist(), dtype=object),
                       np.array(rows["f"].to_pylist(), dtype=object))


def read_timeline(path: Path) -> list[dict]:
    """The nemesis timeline (faults/run.py writes nemesis.jsonl): one dict per start or stop."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _fault_label(package: str, value: dict) -> str:
    if "error" in value:
        return f"{package} (could not apply: {value['error']})"
    what = value.get("variant") or value.get("toxic") or ""
    node = f" node {value['node']}" if "node" in value else ""
    return f"{package} {what}{node}".strip()


def nemesis_intervals(timeline: list[dict], end_s: float) -> list[Interval]:
    """Pair each package's starts with its next stop; a start never stopped lasts to end_s."""
    open_starts: dict[str, dict] = {}
    intervals = []
    for event in sorted(timeline, key=lambda e: e["time_ns"]):
        package, at_s = event["package"], event["time_ns"] / NS_PER_S
        if event["action"] == "start":
            open_starts[package] = event
        elif package in open_starts:
            start = open_starts.pop(package)
            intervals.append(Interval(package, start["time_ns"] / NS_PER_S, at_s,
                                      _fault_label(package, start["value"])))
    for package, start in open_starts.items():
        start_s = start["time_ns"] / NS_PER_S
        intervals.append(Interval(package, start_s, max(end_s, start_s), _fault_label(package, start["value"])))
    return sorted(intervals, key=lambda i: i.start_s)


def throughput(done: Completions, bin_s: float, end_s: float) -> Throughput:
    """Completions per bin of bin_s seconds, by (f, type), from 0 to end_s."""
    assert bin_s > 0
    bins = max(1, int(np.ceil(end_s / bin_s)))
    edges = np.arange(bins + 1) * bin_s
    counts = {}
    for f in sorted(set(done.f)):
        for outcome in OUTCOMES:
            chosen = (done.f == f) & (done.type == outcome)
            if chosen.any():
                counts[f, outcome] = np.histogram(done.complete_s[chosen], bins=edges)[0]
    return Throughput(edges[:-1], bin_s, counts)


def read_lag(path: Path) -> Lag:
    """The realtime lag `kspec check` computed (spark_validation/lag.py: Jepsen's realtime lag,
    research/jepsen.md section 3), from its realtime-lag.parquet; no points when the run was not checked."""
    if not path.exists():
        return Lag(np.empty(0), np.empty(0), np.empty(0, dtype=int), [])
    lag = pq.read_table(path).sort_by("time_ns")
    return Lag(lag["time_ns"].to_numpy() / NS_PER_S, lag["lag_ns"].to_numpy() / NS_PER_S, lag["process"].to_numpy(),
               [f"{t}-{p}" for t, p in zip(lag["topic"].to_pylist(), lag["partition"].to_pylist())])


def partition_timeline(table: pa.Table, topic: str, partition: int) -> PartitionTimeline:
    rows = table.filter(pc.and_(pc.and_(pc.equal(table["topic"], topic), pc.equal(table["partition"], partition)),
                                pc.invert(pc.is_null(table["offset"]))))
    sends = rows.filter(pc.and_(pc.equal(rows["mop_f"], "send"), pc.equal(rows["type"], "ok")))
    reads = rows.filter(pc.and_(pc.equal(rows["mop_f"], "poll"), pc.not_equal(rows["type"], "invoke")))
    def column(rows: pa.Table, name: str) -> np.ndarray:
        return pc.fill_null(rows[name], -1).to_numpy()

    return PartitionTimeline(topic, partition,
                             sends["time_ns"].to_numpy() / NS_PER_S, column(sends, "offset"), column(sends, "value"),
                             sends["index"].to_numpy(),
                             reads["time_ns"].to_numpy() / NS_PER_S, column(reads, "offset"), column(reads, "value"),
                             reads["index"].to_numpy())


def highlights(timeline: PartitionTimeline, anomaly_rows: list[dict]) -> list[Highlight]:
    """The sends and reads of the timeline's partition that the anomaly rows name as evidence:
    of each op of a row, the records with the row's values or offsets (every record of the
    partition when the row names neither)."""
    marks: dict[tuple[bool, int, int], Highlight] = {}
    for row in anomaly_rows:
        if (row["topic"], row["partition"]) != (timeline.topic, timeline.partition):
            continue
        values, offsets = set(row["values"] or ()), set(row["offsets"] or ())
        for send, times, op_indexes, record_offsets, record_values in (
                (True, timeline.send_s, timeline.send_index, timeline.send_offset, timeline.send_value),
                (False, timeline.read_s, timeline.read_index, timeline.read_offset, timeline.read_value)):
            chosen = np.isin(op_indexes, list(row["ops"] or ()))
            if values or offsets:
                chosen &= np.isin(record_values, list(values)) | np.isin(record_offsets, list(offsets))
            for at in np.flatnonzero(chosen):
                key = (send, int(op_indexes[at]), int(record_offsets[at]))
                marks.setdefault(key, Highlight(float(times[at]), int(record_offsets[at]), int(op_indexes[at]),
                                                row["anomaly"], send))
    return sorted(marks.values(), key=lambda h: (h.time_s, h.offset))


def end_s(table: pa.Table, timeline: list[dict]) -> float:
    """The run's last recorded moment."""
    last_ns = [pc.max(table["time_ns"]).as_py() or 0] if table.num_rows else [0]
    last_ns += [e["time_ns"] for e in timeline]
    return max(last_ns) / NS_PER_S
