"""Export a kspec history as Jepsen's Kafka history.edn (the shapes of jepsen.tests.kafka).

One EDN map per op, one per line, in history order (research/jepsen.md section 1):

    {:index 7, :time 81234567, :process 2, :type :ok, :f :send, :value [[:send 3 [12 41]]]}
    {:index 9, :time 90000000, :process 0, :type :ok, :f :poll, :value [[:poll {3 [[12 41] [13 42]]}]]}
    {:index 11, :time 95000000, :process :nemesis, :type :info, :f :start-kill, :value {"node" 0}}

send and poll micro-operations as Jepsen writes them ([:send k v] before the offset is
known, [:send k [offset v]] after; [:poll] on invoke, [:poll {k [[offset v] ...]}] on
completion), assign/subscribe values as vectors of keys, every other field of the op's
extra as a keyword field. Only workload topics ("t{key // 2}") can be exported.
spark_validation/jepsen.py reads this format back, so export then import gives the
same Parquet history.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from spec.history import NEMESIS_PROCESS, Op, Poll, Send, key_of


def op_edn(op: Op) -> str:
    fields = [("index", str(op.index)), ("time", str(op.time_ns)),
              ("process", ":nemesis" if op.process == NEMESIS_PROCESS else str(op.process)),
              ("type", ":" + op.type), ("f", ":" + op.f)]
    extra = dict(op.extra or {})
    if op.mops:
        fields.append(("value", "[" + " ".join(_mop(m) for m in op.mops) + "]"))
    elif op.assignment:
        fields.append(("value", "[" + " ".join(str(key_of(t, p)) for t, p in op.assignment) + "]"))
    elif "value" in extra:
        fields.append(("value", value_edn(extra.pop("value"))))
    assert not op.rebalanced, "rebalance logs are not exported"
    fields += [(name, value_edn(value)) for name, value in sorted(extra.items())]
    return "{" + ", ".join(f":{name} {value}" for name, value in fields) + "}"


def _mop(mop: Send | Poll) -> str:
    if isinstance(mop, Send):
        r = mop.record
        sent = str(r.value) if r.offset is None else f"[{r.offset} {r.value}]"
        return f"[:send {key_of(r.topic, r.partition)} {sent}]"
    if not mop.records:
        return "[:poll]"
    by_key: dict[int, list[str]] = {}
    for r in mop.records:
        by_key.setdefault(key_of(r.topic, r.partition), []).append(f"[{r.offset} {r.value}]")
    keys = list(by_key)
    assert keys == sorted(keys), "a poll's records are grouped by key in key order (faults/workload.py)"
    return "[:poll {" + ", ".join(f"{k} [{' '.join(pairs)}]" for k, pairs in by_key.items()) + "}]"


def value_edn(value) -> str:
    """JSON-like data as EDN: dicts keep string keys (so the importer gives them back as they were)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # EDN strings escape like JSON's for \\, \" and \n
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(value_edn(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{value_edn(k)} {value_edn(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as EDN")


def export_edn(ops: Iterable[Op], path: str | Path) -> Path:
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f:
        for op in ops:
            f.write(op_edn(op) + "\n")
    return path
