"""Consumer groups in a subscribe-mode history (faults/subscribe.py): GRP-1, GRP-2, GRP-3.

The ops read are few (rebalances, commits, one offset fetch, and the first poll of each
partition after an assignment), so this check runs in the driver with pyarrow.

- double-assignment (GRP-1): one partition in the owned sets of two members recorded under
  one generation (classic protocol) or member epoch (KIP-848). A member partitioned away
  keeps believing it owns its partitions under its old generation; that is not a violation,
  the group has moved to a newer generation without it.
- lost-commit (GRP-2): after the run, OffsetFetch returned for a partition neither the offset
  of the last acknowledged commit (the ok commit that completed last) nor that of a commit
  that may have landed after it (one whose completion came after that commit's invocation,
  ok or unknown). Also when a member given a partition began reading below the offset last
  acknowledged for it before its assignment: the commit did not survive (rewound-assignment).
- commit-backwards (GRP-3): an acknowledged commit of a partition that began after another
  acknowledged commit of it had completed, with a lower offset. The workload never resets
  offsets explicitly, so every commit carries a consumed position of the current owner.

Not applicable (None) when the history has no rebalance ops: an assign-mode run.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_validation.anomalies import anomaly_row
from spark_validation.frames import RowGroupReader, read_filtered, row_groups
from spark_validation.partition_log import group_starts
from spark_validation.options import RunOptions

GROUP_FS = ("rebalance", "commit", "offset-fetch")
GUARANTEES = ("GRP-1", "GRP-2", "GRP-3")
NOT_APPLICABLE = "no group members in the history: a subscribe-mode run checks them (kspec faults run --sub-via subscribe)"
ANOMALIES = ("double-assignment", "lost-commit", "rewound-assignment", "commit-backwards")


def _read(parquet_path: Path, keep) -> pa.Table | None:
    columns = ["index", "seq", "process", "type", "f", "time_ns", "invoke_time_ns", "mop_f", "topic", "partition",
               "offset", "extra"]
    return read_filtered(parquet_path, columns, keep)


def check(parquet_path: Path, options: RunOptions) -> list[dict] | None:
    ops = _read(parquet_path, lambda t: pc.and_(pc.is_in(t["f"], pa.array(GROUP_FS)),
                                                pc.and_(pc.equal(t["seq"], 0), pc.not_equal(t["type"], "invoke"))))
    if ops is None or not pc.any(pc.equal(ops["f"], "rebalance")).as_py():
        return None
    ops = [{**row, "extra": json.loads(row["extra"]) if row["extra"] else {}}
           for row in ops.sort_by("index").to_pylist()]
    rebalances = [op for op in ops if op["f"] == "rebalance" and op["type"] == "ok"]
    commits = [op for op in ops if op["f"] == "commit"]
    fetches = [op for op in ops if op["f"] == "offset-fetch"]
    return [*double_assignments(rebalances), *commits_backwards(commits), *lost_commits(commits, fetches),
            *rewound_assignments(rebalances, commits, parquet_path)]


def double_assignments(rebalances: list[dict]) -> list[dict]:
    """GRP-1: per generation, the partitions each process owned at any of its rebalances under it."""
    owners: dict[tuple[int, str, int], dict[int, dict]] = defaultdict(dict)  # (generation, tp) -> process -> op
    for op in rebalances:
        extra = op["extra"]
        if extra.get("generation", -1) < 0:
            continue
        for topic, partition in extra.get("owned", ()):
            owners[(extra["generation"], topic, partition)].setdefault(op["process"], op)
    rows = []
    for (generation, topic, partition), by_process in sorted(owners.items()):
        if len(by_process) > 1:
            evidence = list(by_process.values())
            members = ", ".join(f"process {op['process']} (member {op['extra'].get('member')}, "
                                f"{op['extra']['event']} at op {op['index']})" for op in evidence)
            rows.append(anomaly_row(
                "double-assignment", f"generation {generation}: owned by {members}", topic=topic,
                partition=partition, ops=[op["index"] for op in evidence]))
    return rows


def _offsets(op: dict) -> dict[tuple[str, int], int]:
    return {(t, p): o for t, p, o in op["extra"].get("offsets", ())}


def commits_backwards(commits: list[dict]) -> list[dict]:
    """GRP-3: ok commits of a partition in real-time order never go down."""
    rows = []
    by_tp: dict[tuple[str, int], list[tuple[dict, int]]] = defaultdict(list)
    for op in commits:
        if op["type"] == "ok":
            for tp, offset in _offsets(op).items():
                by_tp[tp].append((op, offset))
    for (topic, partition), acked in sorted(by_tp.items()):
        acked.sort(key=lambda c: c[0]["invoke_time_ns"])
        best: tuple[dict, int] | None = None   # the highest commit completed before the current one began
        done = sorted(acked, key=lambda c: c[0]["time_ns"])
        position = 0
        for op, offset in acked:
            while position < len(done) and done[position][0]["time_ns"] < op["invoke_time_ns"]:
                if best is None or done[position][1] > best[1]:
                    best = done[position]
                position += 1
            if best is not None and offset < best[1]:
                rows.append(anomaly_row(
                    "commit-backwards", f"offset {offset} committed (op {op['index']}, process {op['process']}) after "
                    f"{best[1]} had been (op {best[0]['index']}, process {best[0]['process']})",
                    topic=topic, partition=partition, process=op["process"], ops=[best[0]["index"], op["index"]],
                    offsets=[best[1], offset], delta=offset - best[1]))
    return rows


def lost_commits(commits: list[dict], fetches: list[dict]) -> list[dict]:
    """GRP-2: the offsets read back after the run are the last acknowledged commits (or later ones)."""
    fetched = next((op for op in reversed(fetches) if op["type"] == "ok"), None)
    last_ok: dict[tuple[str, int], tuple[dict, int]] = {}
    for op in commits:
        if op["type"] == "ok":
            for tp, offset in _offsets(op).items():
                if tp not in last_ok or op["time_ns"] > last_ok[tp][0]["time_ns"]:
                    last_ok[tp] = (op, offset)
    if not last_ok:
        return []
    if fetched is None:
        error = fetches[-1]["extra"].get("error") if fetches else "no offset fetch in the history"
        return [anomaly_row("lost-commit", f"the committed offsets could not be read back: {error}",
                            ops=[op["index"] for op, _ in last_ok.values()][:16])]
    read_back = _offsets(fetched)
    rows = []
    for (topic, partition), (last, offset) in sorted(last_ok.items()):
        allowed = {offset} | {o for op in commits if op["type"] != "fail" and op["time_ns"] > last["invoke_time_ns"]
                              for tp, o in _offsets(op).items() if tp == (topic, partition)}
        got = read_back.get((topic, partition))
        if got not in allowed:
            rows.append(anomaly_row(
                "lost-commit", f"OffsetFetch after the run returned {got if got is not None else 'no offset'}; "
                f"the last acknowledged commit (op {last['index']}) was {offset}, commits that may have landed "
                f"after it: {sorted(allowed - {offset}) or 'none'}", topic=topic, partition=partition,
                process=last["process"], ops=[last["index"], fetched["index"]],
                offsets=[offset, got], delta=None if got is None else got - offset))
    return rows


def rewound_assignments(rebalances: list[dict], commits: list[dict], parquet_path: Path) -> list[dict]:
    """GRP-2 in the run: a member assigned a partition starts reading at or above the offset of
    every commit of it acknowledged before the assignment (auto.offset.reset only applies when
    nothing is committed)."""
    acked = sorted(((op["time_ns"], tp, o, op) for op in commits if op["type"] == "ok"
                    for tp, o in _offsets(op).items()), key=lambda c: c[0])
    by_process = defaultdict(list)
    for op in rebalances:
        by_process[op["process"]].append(op)
    windows: list[_Window] = []
    for process, events in by_process.items():
        for position, op in enumerate(events):
            if op["extra"]["event"] != "assign":
                continue
            assigned_ns = op["extra"].get("callback_time_ns", op["time_ns"])
            ends = [e["time_ns"] for e in events[position + 1:] if e["extra"]["event"] != "assign"]
            for topic, partition in op["extra"]["partitions"]:
                committed = [(o, c) for t_ns, tp, o, c in acked if tp == (topic, partition) and t_ns < assigned_ns]
                if committed:
                    offset_committed, commit = max(committed, key=lambda x: x[0])
                    windows.append(_Window(process, topic, partition, op, ends[0] if ends else None,
                                           offset_committed, commit))
    rows = []
    for w, first in zip(windows, _first_reads(parquet_path, windows)):
        if first is not None and first[1] < w.offset_committed:
            rows.append(anomaly_row(
                "rewound-assignment", f"process {w.process} assigned the partition (op {w.op['index']}) first "
                f"read offset {first[1]} (op {first[2]}); {w.offset_committed} had been committed and "
                f"acknowledged before (op {w.commit['index']})", topic=w.topic, partition=w.partition,
                process=w.process, ops=[w.commit["index"], w.op["index"], first[2]],
                offsets=[w.offset_committed, first[1]], delta=first[1] - w.offset_committed))
    return rows


@dataclass(frozen=True)
class _Window:
    """A member's assignment of a partition with acknowledged commits before it, until its next revoke."""
    process: int
    topic: str
    partition: int
    op: dict              # the rebalance that assigned it; reads after its completion count
    until_ns: int | None  # the member's next revoke or loss, if any
    offset_committed: int
    commit: dict


def _first_reads(parquet_path: Path, windows: list[_Window]) -> list[tuple[int, int, int] | None]:
    """The first read (time_ns, offset, op index) of each window's partition by its member inside it,
    the ok polls read one row group at a time: the driver keeps one read per window, not the polls."""
    first: list[tuple[int, int, int] | None] = [None] * len(windows)
    if not windows:
        return first
    keys = ["process", "topic", "partition"]
    table = pa.table({"window": np.arange(len(windows)), "process": pa.array([w.process for w in windows], pa.int64()),
                      "topic": pa.array([w.topic for w in windows], pa.string()),
                      "partition": pa.array([w.partition for w in windows], pa.int32()),
                      "after_ns": [w.op["time_ns"] for w in windows],
                      "until_ns": [w.until_ns if w.until_ns is not None else np.iinfo(np.int64).max for w in windows]})
    history = RowGroupReader([])
    for file, group in row_groups(parquet_path):
        polls = history.read(file, group, ["index", "process", "type", "mop_f", "topic", "partition", "time_ns",
                                           "offset"])
        polls = polls.filter(pc.and_(pc.equal(polls["mop_f"], "poll"), pc.and_(
            pc.equal(polls["type"], "ok"), pc.is_valid(polls["offset"]))))
        inside = polls.select(["index", *keys, "time_ns", "offset"]).join(table, keys)
        inside = inside.filter(pc.and_(pc.greater(inside["time_ns"], inside["after_ns"]),
                                       pc.less(inside["time_ns"], inside["until_ns"])))
        inside = inside.sort_by([(c, "ascending") for c in ("window", "time_ns", "offset", "index")])
        window = inside["window"].to_numpy()
        for at in group_starts(window).tolist():
            read = (inside["time_ns"][at].as_py(), inside["offset"][at].as_py(), inside["index"][at].as_py())
            w = int(window[at])
            if first[w] is None or read < first[w]:
                first[w] = read
    return first
