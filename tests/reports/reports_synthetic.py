"""A small synthetic run folder, as `kspec faults run` and `kspec check` would leave it.

One producer (process 0) appends values 1..SENDS to t0-0 and t0-1, one consumer
(process 1) assigns both and polls them; after READ_BACK_AT_S the consumer polls
t0-0 from offset 0 again, which the (synthetic) check reports as one nonmonotonic-poll.
The nemesis partitions the network from 1 s to 3 s and kills a node at 4 s for good.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from spark_validation.anomalies import ANOMALY_SCHEMA
from spec.history import NEMESIS_PROCESS, Op, Poll, Record, Send, ops_table, write_history

NS = 1_000_000_000
STEP_NS = 100_000_000       # one send every 100 ms
SEND_LATENCY_NS = 4_000_000
POLL_LATENCY_NS = 1_000_000
SENDS = 60
READ_BACK_AT_S = 5.0
TIMELINE = [
    {"time_ns": 1 * NS, "action": "start", "package": "partition", "value": {"variant": "one", "grudge": {}}},
    {"time_ns": 3 * NS, "action": "stop", "package": "partition", "value": {"healed": True}},
    {"time_ns": 4 * NS, "action": "start", "package": "kill", "value": {"variant": "leader", "node": 1}},
]


@dataclass
class SyntheticRun:
    path: Path
    ops: list[Op]
    first_poll: int      # the op index of the poll that read t0-0 up to the highest offset before the re-read
    reread_poll: int     # the op index of the poll that read t0-0 from offset 0 again
    info_send: int       # a send whose outcome is unknown


def build_ops() -> tuple[list[Op], int, int, int]:
    ops: list[Op] = []
    logs: dict[int, list[int]] = {0: [], 1: []}
    read_up_to = {0: 0, 1: 0}
    first_poll = reread_poll = info_send = -1

    def add(process, type_, f, time_ns, invoke_ns=None, **fields) -> Op:
        op = Op(len(ops), process, type_, f, time_ns, time_ns if type_ == "invoke" else invoke_ns, **fields)
        ops.append(op)
        return op

    add(1, "invoke", "assign", 0, assignment=(("t0", 0), ("t0", 1)))
    add(1, "ok", "assign", 1_000, 0, assignment=(("t0", 0), ("t0", 1)))
    for step in range(SENDS):
        now_ns = (step + 1) * STEP_NS
        partition = step % 2
        value = step + 1
        if now_ns == 2 * NS:  # during the partition: one send times out
            add(0, "invoke", "send", now_ns, mops=(Send(Record("t0", partition, partition, value)),))
            info_send = add(0, "info", "send", now_ns + 900_000_000, now_ns,
                            mops=(Send(Record("t0", partition, partition, value)),), extra={"error": "timed out"}).index
            continue
        offset = len(logs[partition])
        logs[partition].append(value)
        add(0, "invoke", "send", now_ns, mops=(Send(Record("t0", partition, partition, value)),))
        add(0, "ok", "send", now_ns + SEND_LATENCY_NS, now_ns,
            mops=(Send(Record("t0", partition, partition, value, offset)),))
        if step % 4 == 3 or now_ns == int(READ_BACK_AT_S * NS):
            poll_ns = now_ns + SEND_LATENCY_NS + 1_000
            reread = now_ns >= READ_BACK_AT_S * NS and reread_poll < 0
            if reread:
                read_up_to[0] = 0
            records = tuple(Record("t0", p, p, logs[p][o], o) for p in (0, 1) for o in range(read_up_to[p], len(logs[p])))
            add(1, "invoke", "poll", poll_ns, mops=(Poll(),))
            op = add(1, "ok", "poll", poll_ns + POLL_LATENCY_NS, poll_ns, mops=(Poll(records),))
            if reread:
                reread_poll = op.index
            elif reread_poll < 0:
                first_poll = op.index
            for p in (0, 1):
                read_up_to[p] = len(logs[p])
    for event in TIMELINE:
        f = f"{event['action']}-{event['package']}"
        add(NEMESIS_PROCESS, "invoke", f, event["time_ns"] - 1_000)
        add(NEMESIS_PROCESS, "info", f, event["time_ns"], event["time_ns"] - 1_000, extra={"value": event["value"]})
    ops.sort(key=lambda op: op.time_ns)
    renumber = {op.index: position for position, op in enumerate(ops)}
    ops = [Op(renumber[op.index], op.process, op.type, op.f, op.time_ns, op.invoke_time_ns, op.mops, op.assignment,
              op.rebalanced, op.extra) for op in ops]
    return ops, renumber[first_poll], renumber[reread_poll], renumber[info_send]


def write_run(path: Path, *, checked: bool = True, conformance: bool = False) -> SyntheticRun:
    ops, first_poll, reread_poll, info_send = build_ops()
    path.mkdir(parents=True)
    write_history(ops_table(ops), path / "history.parquet")
    (path / "nemesis.jsonl").write_text("".join(json.dumps(e) + "\n" for e in TIMELINE))
    (path / "node-0.log").write_text("node 0 log\n")
    completions = {"ok": sum(op.type == "ok" for op in ops), "info": sum(op.type == "info" for op in ops)}
    (path / "results.json").write_text(json.dumps({
        "history": "history.parquet", "network_mode": "netns", "network_mode_reason": "network namespaces available",
        "completions": completions, "main_phase_ops_per_s": 20.0, "final_reads_complete": True,
        "workload_failures": [],
        "options": {"target": "reference", "nodes": 3, "nemeses": ["partition", "kill"], "time_limit_s": 6.0,
                    "workload": {"acks": "all", "concurrency": 2}}}))
    if checked:
        _write_check(path / "check", ops, first_poll, reread_poll)
    if conformance:
        _write_conformance(path / "conformance")
    return SyntheticRun(path, ops, first_poll, reread_poll, info_send)


def _write_check(out: Path, ops: list[Op], first_poll: int, reread_poll: int) -> None:
    """What `kspec check` writes for this history: one nonmonotonic-poll (ORD-3) and one allowed G0."""
    last_value = max(r.value for op in ops if op.index == first_poll for mop in op.mops for r in mop.records
                     if r.partition == 0)
    rows = [
        {"anomaly": "nonmonotonic-poll", "guarantee": "ORD-3", "violation": True, "topic": "t0", "partition": 0,
         "process": 1, "ops": [first_poll, reread_poll], "values": [last_value, 1], "offsets": None, "delta": -29,
         "detail": f"process 1 read value {last_value} of t0-0 in op {first_poll}, then value 1 first in op "
                   f"{reread_poll}"},
        {"anomaly": "G0", "guarantee": None, "violation": False, "topic": None, "partition": None, "process": None,
         "ops": [3, 5], "values": None, "offsets": None, "delta": None, "detail": "op 3 ww op 5 ww op 3"},
    ]
    out.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=ANOMALY_SCHEMA), out / "anomalies.parquet")
    guarantees = {g: {"status": "held", "anomalies": {}} for g in ("DUR-1", "IDM-1", "ORD-1", "ORD-2", "VIS-1", "VIS-2")}
    guarantees["ORD-3"] = {"status": "violated", "anomalies": {"nonmonotonic-poll": 1}}
    (out / "verdict.json").write_text(json.dumps({
        "valid": False, "ops": sum(op.type != "invoke" for op in ops), "checks": ["poll-order", "cycles"],
        "anomalies": {"nonmonotonic-poll": 1, "G0": 1}, "violations": {"nonmonotonic-poll": 1},
        "guarantees": dict(sorted(guarantees.items())), "seconds": {"total": 12.5},
        "realtime-lag": {"worst": {"time_s": 2.5, "lag_s": 0.75, "process": 1, "topic": "t0", "partition": 0},
                         "points": 40},
        "consume-counts": {"distribution": {"1": 12, "2": 1}, "dup-counts": {"t0-0": {"7": 2}}}}))


def _write_conformance(out: Path) -> None:
    from conformance.results import Outcome, RunResult
    from reports.conformance import write_report

    result = RunResult({"bootstrap_servers": "127.0.0.1:9092", "quick": True, "clients": ["confluent-kafka"]},
                       "2026-01-01T00:00:00Z", 1.0,
                       [Outcome("test_round_trip[confluent-kafka]", "produce", ["ORD-1"], "confluent-kafka", "passed"),
                        Outcome("test_leader_kill", "replication", ["DUR-1"], "confluent-kafka", "skipped",
                                "no --node-stop-command")])
    result.write(out / "conformance.json")
    write_report(result.to_json(), out)

