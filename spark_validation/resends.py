"""IDM-1 and a client's message timeouts: which duplicates the application caused.

An idempotent producer deduplicates its own retries only. librdkafka reports a record that
outlived message.timeout.ms as failed with _MSG_TIMED_OUT although it may have been stored
(its request was in flight), then bumps its producer epoch (librdkafka issue 4953; so does
Java's client); if the application sends the value again, the broker cannot know the resend
from a new record and rightly stores it a second time. That duplicate is not the broker's.

So each `duplicate` row (a value stored at two or more offsets of a partition) is judged here by
the sends of that value, as the workload records them (faults/workload.py: a send op lists the
records reported timed out in its completion's extra, "timed_out"):

- duplicate-after-timeout (IDM-1, allowed): every copy beyond the first is explained by a send of
  the value that was reported timed out and a later send of it, invoked after that report (the
  application's resend). The row names both ops and when the timeout was reported.
- a duplicate no resend explains is judged by its copies' producer epochs (epoch_bumps.py:
  duplicate-after-epoch-bump when the client bumped its epoch and sent the record again).
- any other duplicate stays a `duplicate` (IDM-1, violation).

A resent value (by the application, or by the client after an epoch bump) also shows in the
order checks of its partition (its first copy sits among records sent after it, and a value at
two offsets has no one place in the order): an order row that names a value so resent follows
from the resend and is allowed too. And the checker judges
the partition's linearizability again without the allowed duplicate (checker.run_checks).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from spark_validation import epoch_bumps
from spark_validation.frames import RowGroupReader, row_groups

ANOMALY = "duplicate-after-timeout"
# the order anomalies a resent value's first copy can cause in its partition
FOLLOWS_FROM_RESEND = ("poll-skip", "nonmonotonic-poll", "int-poll-skip", "int-nonmonotonic-poll",
                       "nonmonotonic-send", "send-skip", "int-nonmonotonic-send")
NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class _Attempt:
    """One send op of a value: its completion index, when it was invoked and completed, whether
    the value was reported timed out to the application."""
    op: int
    invoke_ns: int
    complete_ns: int
    timed_out: bool


def explain(rows: list[dict], parquet_path: Path) -> bool:
    """Turn each duplicate a resend after a timeout explains into duplicate-after-timeout (allowed),
    each that an epoch bump explains into duplicate-after-epoch-bump (allowed), and the order
    anomalies that follow from either; whether any row changed."""
    duplicates = [r for r in rows if r["anomaly"] == "duplicate" and r["violation"]]
    if not duplicates:
        return False
    attempts = _attempts(parquet_path, {(r["topic"], r["partition"], r["values"][0]) for r in duplicates})
    resent: set[tuple[str, int, int]] = set()
    for r in duplicates:
        where = (r["topic"], r["partition"], r["values"][0])
        explained = _resends(attempts.get(where, []))
        if len(explained) < len(r["offsets"]) - 1:
            continue
        resent.add(where)
        shown = explained[:len(r["offsets"]) - 1]
        told = "; ".join(f"op {timed_out.op} was told it timed out (_MSG_TIMED_OUT) at "
                         f"{timed_out.complete_ns / NS_PER_S:.3f} s and op {again.op} sent it again"
                         for timed_out, again in shown)
        r.update(anomaly=ANOMALY, violation=False, ops=[op for pair in shown for op in (pair[0].op, pair[1].op)],
                 detail=f"{r['detail']}: {told} (a resend after a client timeout, not a broker's duplicate)")
    bumped = epoch_bumps.explain([r for r in duplicates if r["violation"]], parquet_path)
    for r in (r for r in rows if r["violation"] and r["anomaly"] in FOLLOWS_FROM_RESEND):
        cause = next((cause for cause, values in (("a resend after a client timeout", resent),
                                                  ("a client's resend after a producer epoch bump", bumped))
                      if any((r["topic"], r["partition"], v) in values for v in r["values"] or ())), None)
        if cause:
            r["violation"], r["detail"] = False, f"follows from {cause} (IDM-1): {r['detail']}"
    return bool(resent or bumped)


def _resends(attempts: list[_Attempt]) -> list[tuple[_Attempt, _Attempt]]:
    """(timed-out send, a later send of the value invoked after that report) pairs, each send in one pair."""
    pairs, used = [], set()
    for timed_out in (a for a in attempts if a.timed_out):
        again = next((a for a in attempts if a.op not in used and a.op != timed_out.op
                      and a.invoke_ns >= timed_out.complete_ns), None)
        if again is not None and timed_out.op not in used:
            used |= {timed_out.op, again.op}
            pairs.append((timed_out, again))
    return pairs


def _attempts(parquet_path: Path, wanted: set[tuple[str, int, int]]) -> dict[tuple[str, int, int], list[_Attempt]]:
    """Every completed send op of each wanted (topic, partition, value), by invocation time."""
    values = pa.array(sorted({v for _, _, v in wanted}), pa.int64())
    columns = ["index", "seq", "type", "f", "time_ns", "invoke_time_ns", "mop_f", "topic", "partition", "value"]
    sends, timed_out_ops = [], {}
    history = RowGroupReader(["type", "f", "mop_f"])
    for file, group in row_groups(parquet_path):  # one row group at a time: a long history's columns stay on disk
        table = history.read(file, group, [*columns, "extra"])
        completions = pc.not_equal(table["type"], "invoke")
        mops = table.filter(pc.and_(completions, pc.and_(pc.equal(table["mop_f"], "send"),
                                                         pc.is_in(table["value"], values))))
        sends.extend(mops.select(columns).to_pylist())
        reported = table.filter(pc.and_(pc.and_(completions, pc.equal(table["seq"], 0)),
                                        pc.and_(pc.equal(table["f"], "send"), pc.is_valid(table["extra"]))))
        for index, extra in zip(reported["index"].to_pylist(), reported["extra"].to_pylist()):
            if "timed_out" in extra:
                timed_out_ops[index] = {tuple(t) for t in json.loads(extra)["timed_out"]}
    found: dict[tuple[str, int, int], list[_Attempt]] = {}
    for s in sends:
        where = (s["topic"], s["partition"], s["value"])
        if where in wanted:
            found.setdefault(where, []).append(_Attempt(s["index"], s["invoke_time_ns"], s["time_ns"],
                                                        where in timed_out_ops.get(s["index"], ())))
    return {where: sorted(a, key=lambda x: (x.invoke_ns, x.op)) for where, a in found.items()}
