"""Linearizability of one partition log: verify against the offsets, or search (WGL).

A partition is a log: append(value) returns the offset it got, a read returns records
(offset, value) and says nothing about where the log ends. With offsets known, the
order of appends is given, so checking is verification, not search:

1. offsets and values are one-to-one (no inconsistent-offsets, no duplicate);
2. an append acked before another was invoked has the lower offset (realtime-order);
3. every append at or below the highest offset a read returned was invoked before the
   read completed (future-read).

Reads only bound their position from below, so they never constrain each other. The
Spark jobs apply rules 1-3 to millions of ops; `verify` applies them to a small history
in plain Python, and `wgl_search` decides the same question by the Wing-Gong-Lowe
search (with Lowe's memo of visited configurations), which is exponential in the worst
case: the benchmark compares the two, and tests check that they agree.
"""
from __future__ import annotations

from dataclasses import dataclass

NONLINEARIZABLE_CAUSES = ("inconsistent-offsets", "duplicate", "realtime-order", "future-read")


@dataclass(frozen=True)
class LogOp:
    """One ok operation on a partition log. An append has value and offset; a read has reads."""
    op: int
    invoke_ns: int
    complete_ns: int
    value: int | None = None
    offset: int | None = None
    reads: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        assert self.invoke_ns <= self.complete_ns
        assert (self.value is None) == (self.offset is None), "an append has a value and an offset"
        assert not (self.value is not None and self.reads), "an op appends or reads, not both"

    @property
    def is_append(self) -> bool:
        return self.value is not None


def verify(ops: list[LogOp]) -> tuple[str, LogOp, LogOp] | None:
    """None when the log is linearizable, else (rule, op, op) naming a minimal counterexample."""
    appends = [o for o in ops if o.is_append]
    at_offset: dict[int, LogOp] = {}
    for a in appends:
        if a.offset in at_offset:
            return "inconsistent-offsets", at_offset[a.offset], a
        at_offset[a.offset] = a
    for r in ops:
        for offset, value in r.reads:
            if offset not in at_offset or at_offset[offset].value != value:
                return "inconsistent-offsets", at_offset.get(offset, r), r
    done = None  # the completed append with the highest offset so far, by time
    events = sorted([(a.invoke_ns, 0, a) for a in appends] + [(a.complete_ns, 1, a) for a in appends],
                    key=lambda e: (e[0], e[1]))
    for _, kind, a in events:
        if kind == 1:
            done = a if done is None or a.offset > done.offset else done
        elif done is not None and done.offset > a.offset:
            return "realtime-order", done, a
    latest = None  # the append with the latest invocation so far, by offset
    events = sorted([(a.offset, 0, a) for a in appends]
                    + [(max(o for o, _ in r.reads), 1, r) for r in ops if r.reads], key=lambda e: (e[0], e[1]))
    for _, kind, x in events:
        if kind == 0:
            latest = x if latest is None or x.invoke_ns > latest.invoke_ns else latest
        elif latest.invoke_ns > x.complete_ns:
            return "future-read", latest, x
    return None


def wgl_search(ops: list[LogOp]) -> bool:
    """True when some order of ops respects real time and the log model (offsets 0, 1, ...)."""
    ops = sorted(ops, key=lambda o: o.invoke_ns)
    seen: set[tuple[frozenset[int], tuple[int, ...]]] = set()

    def applies(o: LogOp, log: tuple[int, ...]) -> tuple[int, ...] | None:
        if o.is_append:
            return log + (o.value,) if o.offset == len(log) else None
        return log if all(off < len(log) and log[off] == v for off, v in o.reads) else None

    def search(done: frozenset[int], log: tuple[int, ...]) -> bool:
        if len(done) == len(ops):
            return True
        if (done, log) in seen:
            return False
        seen.add((done, log))
        pending = [i for i in range(len(ops)) if i not in done]
        horizon = min(ops[i].complete_ns for i in pending)
        for i in pending:
            if ops[i].invoke_ns > horizon:
                break  # invoked after some pending op completed: cannot be next
            after = applies(ops[i], log)
            if after is not None and search(done | {i}, after):
                return True
        return False

    return search(frozenset(), ())


def nonlinearizable_rows(rows: list[dict]) -> list[dict]:
    """One row per partition whose log is not linearizable: its first counterexample by offset."""
    first: dict[tuple[str, int], dict] = {}
    for row in rows:
        if row["anomaly"] not in NONLINEARIZABLE_CAUSES or row["topic"] is None:
            continue
        tp = (row["topic"], row["partition"])
        if tp not in first or min(row["offsets"] or [0]) < min(first[tp]["offsets"] or [0]):
            first[tp] = row
    return [{**row, "anomaly": "nonlinearizable", "violation": True,
             "detail": f"{tp[0]}-{tp[1]} is not linearizable ({row['anomaly']}): {row['detail']}"}
            for tp, row in sorted(first.items())]
