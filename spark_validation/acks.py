"""acks=1 (DUR-2): which lost records fall in the documented loss window.

With acks=1 the leader acknowledges a record as soon as it has appended it; until a follower
has fetched it, the leader's log is its only copy, so a leader that dies (or is cut off and
replaced) in that window takes it along. Kafka documents this; DUR-1 promises no more than
acks=all. So in an acks=1 run (run.json acks "1") every acknowledged value that no poll ever
returned is judged here, and the per-partition lost-write/unseen rows, and the rows a window
loss explains, are kept only as allowed (explain):

- acks1-window-loss (allowed): the partition's leader at the ack, as the Metadata samples
  named it (faults/leaders.py, the last sample before the ack), was struck (killed, paused,
  power cut, or cut off from a majority of the nodes) while the value was acknowledged or
  within FOLLOWER_WINDOW_S after. The row names the ack, the leader and the fault.
- acks1-loss (violation): any other loss: no fault struck the leader, or the leader is unknown.

The report's one sentence on the difference is the definition of acks1-window-loss (anomalies.py).
"""
from __future__ import annotations

import json
from bisect import bisect_right
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_validation import retention
from spark_validation.anomalies import anomaly_row
from spark_validation.frames import history_files
from spark_validation.options import RunOptions
from spec.history import NEMESIS_PROCESS

GUARANTEES = ("DUR-2",)
DUR_1_UNCHECKED = "the producers used acks=1: DUR-1 is for acks=all, each loss is judged under DUR-2"
NOT_APPLICABLE = "the producers used acks=all: an acks=1 run checks it (kspec faults run --acks 1)"
ANOMALIES = ("acks1-window-loss", "acks1-loss")
FOLLOWER_WINDOW_S = 30.0   # Kafka's replica.lag.time.max.ms: how long a follower may lag and stay in sync
NS_PER_S = 1_000_000_000
STRIKES = ("kill", "pause", "power", "partition")


def _read(parquet_path: Path, columns: list[str], keep) -> list[dict]:
    parts = [pq.read_table(file, columns=columns) for file in history_files(parquet_path)]
    table = pa.concat_tables(parts)
    return table.filter(keep(table)).to_pylist()


def struck_nodes(package: str, value: dict, nodes: int) -> set[int]:
    """The nodes a fault start took away from their followers or clients."""
    if package in ("kill", "pause") and "node" in value:
        return {value["node"]}
    if package == "power":
        return set(value.get("nodes", ()))
    if package == "partition" and "grudge" in value:
        grudge = {int(n): set(peers) for n, peers in value["grudge"].items()}
        struck = set()
        for n in range(nodes):
            reachable = {m for m in range(nodes) if m not in grudge.get(n, ()) and n not in grudge.get(m, ())}
            if len(reachable | {n}) <= nodes // 2:
                struck.add(n)
        return struck
    return set()


def check(parquet_path: Path, options: RunOptions) -> list[dict] | None:
    if options.acks != "1":
        return None
    columns = ["index", "seq", "process", "type", "f", "time_ns", "mop_f", "topic", "partition", "value", "offset",
               "extra"]
    rows = _read(parquet_path, columns, lambda t: pc.or_(
        pc.is_in(t["f"], pa.array(["leaders"])),
        pc.or_(pc.equal(t["process"], NEMESIS_PROCESS), pc.is_in(t["mop_f"], pa.array(["send", "poll"])))))
    read = {(r["topic"], r["partition"], r["value"]) for r in rows
            if r["mop_f"] == "poll" and r["type"] == "ok" and r["topic"] is not None}
    acked = [r for r in rows if r["mop_f"] == "send" and r["type"] == "ok"]
    lost = [r for r in acked if (r["topic"], r["partition"], r["value"]) not in read]
    if options.compacted:  # the cleaner removes a value once a later one of its key exists: RET-1 judges those
        newest: dict[tuple, int] = {}
        for r in rows:
            if r["mop_f"] == "poll" and r["type"] == "ok" and r["topic"] is not None:
                key = (r["topic"], r["partition"], r["value"] % retention.COMPACTION_KEYS)
                newest[key] = max(newest.get(key, -1), r["offset"])
        lost = [r for r in lost if r["offset"] is None or
                newest.get((r["topic"], r["partition"], r["value"] % retention.COMPACTION_KEYS), -1) <= r["offset"]]
    if not lost:
        return []
    samples: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    nodes = 1
    for r in rows:
        if r["f"] == "leaders" and r["type"] == "ok" and r["seq"] == 0:
            for topic, partition, node in json.loads(r["extra"])["leaders"]:
                samples[(topic, partition)].append((r["time_ns"], node))
                nodes = max(nodes, node + 1)
    faults = _strikes([r for r in rows if r["process"] == NEMESIS_PROCESS and r["type"] != "invoke"], nodes)
    found = []
    for r in lost:
        tp = (r["topic"], r["partition"])
        times = samples.get(tp, [])
        at = bisect_right([t for t, _ in times], r["time_ns"])
        leader = times[at - 1][1] if at else None
        window_end_ns = r["time_ns"] + int(FOLLOWER_WINDOW_S * NS_PER_S)
        strike = next((f for f in faults if leader in f["nodes"] and f["start_ns"] <= window_end_ns
                       and (f["end_ns"] is None or f["end_ns"] >= r["time_ns"])), None)
        where = f"value {r['value']} of {r['topic']}-{r['partition']} (op {r['index']}, offset {r['offset']})"
        if strike is not None:
            found.append(anomaly_row(
                "acks1-window-loss", f"{where} acked at {r['time_ns'] / NS_PER_S:.3f} s by leader node {leader}, "
                f"struck by {strike['package']} at {strike['start_ns'] / NS_PER_S:.3f} s (op {strike['op']}): "
                "lost in the acks=1 window", violation=False, topic=r["topic"], partition=r["partition"],
                process=r["process"], ops=[r["index"], strike["op"]], values=[r["value"]], offsets=[r["offset"]]))
        else:
            found.append(anomaly_row(
                "acks1-loss", f"{where} acked at {r['time_ns'] / NS_PER_S:.3f} s by leader node "
                f"{leader if leader is not None else 'unknown'}, lost with no fault on that leader within "
                f"{FOLLOWER_WINDOW_S:.0f} s", topic=r["topic"], partition=r["partition"], process=r["process"],
                ops=[r["index"]], values=[r["value"]], offsets=[r["offset"]]))
    return found


def explain(rows: list[dict]) -> None:
    """In an acks=1 run: lost-write and unseen judge DUR-1, which holds only for acks=all, so they
    stay as allowed (this check judges each loss); and a violation whose values include a value lost
    in the window (its offset then holds a later value: inconsistent-offsets, realtime-order,
    nonlinearizable) follows from that loss, so it is allowed too, its detail saying so."""
    window = {(r["topic"], r["partition"], v) for r in rows if r["anomaly"] == "acks1-window-loss" for v in r["values"]}
    for r in rows:
        if r["anomaly"] in ("lost-write", "unseen"):
            r["violation"], r["detail"] = False, f"acks=1, judged under DUR-2: {r['detail']}"
        elif r["violation"] and r["anomaly"] not in ANOMALIES and any(
                (r["topic"], r["partition"], v) in window for v in r["values"] or ()):
            r["violation"], r["detail"] = False, f"follows from an acks=1 window loss (DUR-2): {r['detail']}"


def _strikes(nemesis_ops: list[dict], nodes: int) -> list[dict]:
    """Fault starts with the nodes they struck and when their package was healed."""
    strikes, open_by_package = [], {}
    for op in sorted(nemesis_ops, key=lambda o: o["time_ns"]):
        action, _, package = op["f"].partition("-")
        if package not in STRIKES or op["seq"] != 0:
            continue
        if action == "start":
            value = json.loads(op["extra"] or "{}").get("value", {})
            strike = {"package": package, "op": op["index"], "start_ns": op["time_ns"], "end_ns": None,
                      "nodes": struck_nodes(package, value, nodes)}
            strikes.append(strike)
            open_by_package[package] = strike
        elif action == "stop" and package in open_by_package:
            open_by_package.pop(package)["end_ns"] = op["time_ns"]
    return strikes
