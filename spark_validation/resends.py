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
from the resend and is allowed too. And the partition's linearizability is judged again without
the allowed duplicate (judgement.py).

All of this is judged one topic-partition at a time, where the Spark pass has its mops
(judgement.py): the sends of a duplicated value are the partition's own send mops, and which of
them were reported timed out the pass brings along (frames.py, timed-out sends).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spark_validation import epoch_bumps
from spark_validation.partition_log import PartitionLog, member, sorted_unique

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


def explain(rows: list[dict], p: PartitionLog, history_path: Path) -> bool:
    """Of one topic-partition's rows (p's): turn each duplicate a resend after a timeout explains into
    duplicate-after-timeout (allowed), each that an epoch bump explains into duplicate-after-epoch-bump
    (allowed), and the order anomalies that follow from either; whether any row changed."""
    duplicates = [r for r in rows if r["anomaly"] == "duplicate" and r["violation"]]
    if not duplicates:
        return False
    attempts = _attempts(p, np.array([r["values"][0] for r in duplicates], np.int64))
    resent: set[int] = set()
    for r in duplicates:
        explained = _resends(attempts.get(r["values"][0], []))
        if len(explained) < len(r["offsets"]) - 1:
            continue
        resent.add(r["values"][0])
        shown = explained[:len(r["offsets"]) - 1]
        told = "; ".join(f"op {timed_out.op} was told it timed out (_MSG_TIMED_OUT) at "
                         f"{timed_out.complete_ns / NS_PER_S:.3f} s and op {again.op} sent it again"
                         for timed_out, again in shown)
        r.update(anomaly=ANOMALY, violation=False, ops=[op for pair in shown for op in (pair[0].op, pair[1].op)],
                 detail=f"{r['detail']}: {told} (a resend after a client timeout, not a broker's duplicate)")
    bumped = {v for _, _, v in epoch_bumps.explain([r for r in duplicates if r["violation"]], history_path)}
    for r in (r for r in rows if r["violation"] and r["anomaly"] in FOLLOWS_FROM_RESEND):
        cause = next((cause for cause, values in (("a resend after a client timeout", resent),
                                                  ("a client's resend after a producer epoch bump", bumped))
                      if any(v in values for v in r["values"] or ())), None)
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


def _attempts(p: PartitionLog, values: np.ndarray) -> dict[int, list[_Attempt]]:
    """Every completed send op of each of values in p, by invocation time."""
    sends = np.flatnonzero(p.is_send & member(sorted_unique(values), p.value))
    sends = sends[np.lexsort((p.index[sends], p.invoke_ns[sends]))]
    found: dict[int, list[_Attempt]] = {}
    for value, op, invoke_ns, complete_ns, timed_out in zip(*(column[sends].tolist() for column in (
            p.value, p.index, p.invoke_ns, p.time_ns, p.timed_out))):
        found.setdefault(value, []).append(_Attempt(op, invoke_ns, complete_ns, timed_out))
    return found
