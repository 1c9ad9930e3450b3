"""Check the auth lane's history (faults/lane_auth.py): AUTH-1, AUTH-2, AUTH-3 held or violated.

The history is small (a probe a few times a second), so it is read with pyarrow on the driver,
as the other driver-side checks read theirs. Each probe op (f="auth") names its guarantee, and
its completion says whether the node refused it as Kafka does (type fail), served it (ok) or
left it unknown (info: a node down or paused, another error). The final reads (f="poll") and
what they found (f="auth-final") show what the denied operations could have changed.

Anomalies, one row each, the ops as evidence (ANOMALY_SCHEMA):
- auth-served-unauthenticated (AUTH-1): a request before authentication succeeded was served.
- auth-denied-served (AUTH-2): an operation the ACLs deny was served.
- auth-denied-stored (AUTH-2): the final reads hold a record of a refused produce, the topic
  the intruder was refused to create exists, the topic it was refused to delete is gone, or the
  log start moved (DeleteRecords).
- auth-unauthenticated-stored (AUTH-1): the final reads hold a record produced before authentication.
- auth-cluster-action-served (AUTH-3): a client principal's replica or controller request was served.
- auth-marker-stored (AUTH-3): a control batch in the lane's topics, which no transaction ever wrote to.

A guarantee is held when at least one of its probes was refused and nothing violates it; with no
probe refused and none served (every node unreachable whenever asked) it is not checked, and
the verdict says so. `check_auth` gives what `kspec check` needs for one lane
(spark_validation/lanes.py check_folder).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from faults.lane_auth import AUTH_F, AUTH_FILE, FINAL_F
from spark_validation.anomalies import ANOMALY_SCHEMA, AnomalyKind

HISTORY_FILE = "history.parquet"
GUARANTEES = ("AUTH-1", "AUTH-2", "AUTH-3")
EVIDENCE_OPS_MAX = 64              # op indexes kept in one row; the count stays exact
# Kept apart from anomalies.ANOMALY_KINDS: a queue run's verdict must not list AUTH-* as held.
AUTH_KINDS = {k.name: k for k in (
    AnomalyKind("auth-served-unauthenticated", "AUTH-1", "a request before authentication succeeded was served"),
    AnomalyKind("auth-unauthenticated-stored", "AUTH-1", "a record produced before authentication was stored"),
    AnomalyKind("auth-denied-served", "AUTH-2", "an operation the ACLs deny was served"),
    AnomalyKind("auth-denied-stored", "AUTH-2", "an operation the ACLs deny changed what the cluster stores"),
    AnomalyKind("auth-cluster-action-served", "AUTH-3",
                "a client principal's replica or controller request (CLUSTER_ACTION) was served"),
    AnomalyKind("auth-marker-stored", "AUTH-3", "a transaction marker stands in a topic no transaction wrote to"),
)}
SERVED = {"AUTH-1": "auth-served-unauthenticated", "AUTH-2": "auth-denied-served", "AUTH-3": "auth-cluster-action-served"}
STORED = {"AUTH-1": "auth-unauthenticated-stored", "AUTH-2": "auth-denied-stored"}


def is_auth_history(path: Path) -> bool:
    """A folder the auth lane wrote (its auth.json beside the history)."""
    return path.is_dir() and (path / AUTH_FILE).exists()


def check_auth(history: Path) -> tuple[pa.Table, dict]:
    """(anomalies as ANOMALY_SCHEMA, a verdict as checker.run_checks gives one) for one auth lane."""
    started = time.monotonic()
    table = pq.read_table(history / HISTORY_FILE)
    ops = _completions(table)
    probes = [op for op in ops if op["f"] == AUTH_F]
    final = next((op for op in ops if op["f"] == FINAL_F), None)
    rows: list[dict] = []
    tally = {g: {"refused": 0, "served": 0, "unknown": 0} for g in GUARANTEES}
    for op in probes:
        tally[op["extra"]["guarantee"]][op["extra"]["outcome"]] += 1
    for guarantee_id in GUARANTEES:
        served = [op for op in probes if op["extra"]["guarantee"] == guarantee_id and op["type"] == "ok"]
        for (probe, node), group in _grouped(served, lambda op: (op["extra"]["probe"], op["extra"]["node"])).items():
            rows.append(_row(SERVED[guarantee_id], group, f"{len(group)} {probe} probe(s) to node {node} served: "
                                                          f"{group[0]['extra']['answer']}"))
    complete = final is not None and final["type"] == "ok"
    if complete:
        rows += _stored(table, probes, final)
    anomalies = pa.Table.from_pylist(rows, schema=ANOMALY_SCHEMA)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["anomaly"]] = counts.get(row["anomaly"], 0) + 1
    guarantees, unchecked = {}, {}
    for guarantee_id in GUARANTEES:
        found = {a: n for a, n in counts.items() if AUTH_KINDS[a].guarantee_id == guarantee_id}
        if found:
            guarantees[guarantee_id] = {"status": "violated", "anomalies": found}
        elif tally[guarantee_id]["refused"] and complete:
            guarantees[guarantee_id] = {"status": "held", "anomalies": {}}
        else:
            unchecked[guarantee_id] = ("the final reads did not complete" if not complete else
                                       f"no {guarantee_id} probe reached a node ({tally[guarantee_id]['unknown']} "
                                       "unknown)")
    verdict = {
        "valid": not counts, "history": str(history / HISTORY_FILE), "ops": len(ops), "rows": table.num_rows,
        "options": json.loads((history / "run.json").read_text()) if (history / "run.json").exists() else None,
        "checks": ["auth"], "anomalies": counts, "violations": dict(counts),
        "guarantees": dict(sorted(guarantees.items())), "unchecked": unchecked,
        "auth": {"probes": tally, "final": final["extra"] if complete else None,
                 **json.loads((history / AUTH_FILE).read_text())},
        "seconds": {"auth": round(time.monotonic() - started, 3), "total": round(time.monotonic() - started, 3)},
        # Jepsen's informational outputs, empty: the lane has no subscribed reads
        "realtime-lag": {"worst": {"time_s": 0.0, "lag_s": 0.0}, "points": 0},
        "consume-counts": {"distribution": {}, "dup-counts": {}},
    }
    return anomalies, verdict


def _completions(table: pa.Table) -> list[dict]:
    """Every completion (seq 0 rows: one per op), its extra decoded."""
    rows = table.filter(pc.and_(pc.equal(table["seq"], 0), pc.not_equal(table["type"], "invoke")))
    ops = rows.select(["index", "process", "type", "f", "extra"]).to_pylist()
    for op in ops:
        op["extra"] = json.loads(op["extra"]) if op["extra"] else {}
    return ops


def _stored(table: pa.Table, probes: list[dict], final: dict) -> list[dict]:
    """What the final reads show a refused (or served) operation changed."""
    rows = []
    read = table.filter(pc.and_(pc.equal(table["f"], "poll"), pc.equal(table["mop_f"], "poll")))
    stored = {value: (topic, partition, offset) for topic, partition, value, offset in zip(
        *(read[c].to_pylist() for c in ("topic", "partition", "value", "offset"))) if value is not None}
    sent = table.filter(pc.and_(pc.equal(table["f"], AUTH_F), pc.equal(table["mop_f"], "send")))
    by_index = {op["index"]: op for op in probes}
    found: dict[str, list[tuple[dict, int, tuple]]] = {}
    for index, value in zip(sent["index"].to_pylist(), sent["value"].to_pylist()):
        op = by_index.get(index)
        if op is not None and value in stored and op["extra"]["guarantee"] in STORED:
            found.setdefault(op["extra"]["guarantee"], []).append((op, value, stored[value]))
    for guarantee_id, hits in found.items():
        ops = [op for op, _, _ in hits]
        row = _row(STORED[guarantee_id], ops, f"{len(hits)} record(s) of produces the ACLs deny in the final reads, "
                                              f"e.g. value {hits[0][1]} at {hits[0][2][0]}-{hits[0][2][1]} offset "
                                              f"{hits[0][2][2]}")
        row.update(topic=hits[0][2][0], partition=hits[0][2][1], values=[v for _, v, _ in hits][:EVIDENCE_OPS_MAX],
                   offsets=[where[2] for _, _, where in hits][:EVIDENCE_OPS_MAX])
        rows.append(row)
    state = final["extra"]
    denied_probes = {op["extra"]["probe"]: op for op in probes if op["extra"]["guarantee"] == "AUTH-2"}
    topic_c = next((op["extra"]["topic"] for op in probes if op["extra"]["probe"] == "create-topic-denied"), None)
    changes = []
    if topic_c is not None and state["topics_exist"].get(topic_c):
        changes.append((denied_probes["create-topic-denied"], f"topic {topic_c}, whose creation was refused, exists"))
    for topic, exists in state["topics_exist"].items():
        if topic != topic_c and not exists and "delete-topic-denied" in denied_probes:
            changes.append((denied_probes["delete-topic-denied"],
                            f"topic {topic}, whose deletion was refused, is gone"))
    for name, start in state["log_start_offsets"].items():
        if start > 0 and "delete-records-denied" in denied_probes:
            changes.append((denied_probes["delete-records-denied"],
                            f"{name} starts at offset {start}: records were deleted, and only a refused "
                            "DeleteRecords asked for it"))
    for op, detail in changes:
        rows.append(_row("auth-denied-stored", [op], detail))
    markers = {name: offsets for name, offsets in state["control_batches"].items() if offsets}
    if markers:
        marker_probes = [op for op in probes if op["extra"]["probe"] == "write-txn-markers"]
        name, offsets = next(iter(markers.items()))
        row = _row("auth-marker-stored", marker_probes, f"control batches in {', '.join(sorted(markers))}, e.g. at "
                                                        f"{name} offsets {offsets[:8]}")
        row["offsets"] = offsets[:EVIDENCE_OPS_MAX]
        rows.append(row)
    return rows


def _grouped(ops: list[dict], key) -> dict:
    groups: dict = {}
    for op in ops:
        groups.setdefault(key(op), []).append(op)
    return groups


def _row(anomaly: str, ops: list[dict], detail: str) -> dict:
    kind = AUTH_KINDS[anomaly]
    first = ops[0]["extra"] if ops else {}
    return {"anomaly": anomaly, "guarantee": kind.guarantee_id, "violation": True, "topic": first.get("topic"),
            "partition": first.get("partition"), "process": ops[0]["process"] if ops else None,
            "ops": [op["index"] for op in ops][:EVIDENCE_OPS_MAX], "values": None, "offsets": None, "delta": None,
            "detail": f"{kind.definition}: {detail}"}
