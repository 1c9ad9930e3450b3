"""Import a Jepsen Kafka history.edn into the kspec history schema (spec/history.py).

Jepsen's shapes (research/jepsen.md section 1): an op is a map with :index :time
:process :type :f :value. send/poll/txn values are micro-operations [:send k v] or
[:send k [offset v]], and [:poll] or [:poll {k [[offset v] ...]}]; assign and subscribe
carry a vector of keys. Key k lives in topic "t{k // 2}", partition k % 2. Every field
the schema has no column for (error, poll-ms, rebalance-log, nemesis values) is kept
in the row's extra JSON.
"""
from __future__ import annotations

from pathlib import Path

from spark_validation.edn import Keyword, read_all, to_json
from spec.history import (ASSIGNMENT_FS, CLIENT_FS, NEMESIS_PROCESS, Op, Poll, Record, Send, ops_table,
                          topic_partition, write_history)

OP_FIELDS = ("index", "time", "process", "type", "f", "value")


def jepsen_ops(records: list[dict]) -> list[Op]:
    """Jepsen history records (EDN maps) as kspec Ops, completions paired with invocations."""
    invoked_ns: dict[int, int] = {}
    ops = []
    for position, record in enumerate(records):
        if not isinstance(record, dict) or "type" not in record:
            raise ValueError(f"history record {position} is not a Jepsen op map: {str(record)[:80]}")
        process = record.get("process")
        process = NEMESIS_PROCESS if isinstance(process, Keyword) else int(process)
        kind, f = str(record["type"]), str(record.get("f"))
        time_ns = int(record.get("time", 0))
        if kind == "invoke":
            invoked_ns[process] = time_ns
        invoke_ns = time_ns if kind == "invoke" else invoked_ns.pop(process, None)
        value = record.get("value")
        extra = {str(k): to_json(v) for k, v in record.items() if k not in OP_FIELDS}
        mops, assignment = (), ()
        if f in CLIENT_FS and isinstance(value, list):
            mops = tuple(_mop(m) for m in value)
        elif f in ASSIGNMENT_FS and isinstance(value, list):
            assignment = tuple(topic_partition(k) for k in value)
        elif value is not None:
            extra["value"] = to_json(value)
        rebalanced = frozenset(topic_partition(k) for event in record.get("rebalance-log") or ()
                               for k in event.get("keys", ()))
        ops.append(Op(int(record.get("index", position)), process, kind, f, time_ns, invoke_ns, mops, assignment,
                      rebalanced, extra or None))
    return ops


def _mop(mop: list) -> Send | Poll:
    f = str(mop[0])
    if f == "send":
        key, sent = mop[1], mop[2]
        offset, value = sent if isinstance(sent, list) else (None, sent)
        return Send(Record(*topic_partition(key), key, value, offset))
    if f == "poll":
        polled = mop[1] if len(mop) > 1 and mop[1] is not None else {}
        return Poll(tuple(Record(*topic_partition(k), k, v, o) for k, pairs in polled.items() for o, v in pairs))
    raise ValueError(f"unknown micro-operation {mop!r}; expected [:send k v] or [:poll ...]")


def read_edn_history(path: Path) -> list[Op]:
    forms = read_all(Path(path).read_text())
    records = forms[0] if len(forms) == 1 and isinstance(forms[0], list) else forms
    return jepsen_ops(records)


def import_edn(path: Path, parquet_path: Path) -> Path:
    """Convert a Jepsen history.edn to a kspec history Parquet file."""
    return write_history(ops_table(read_edn_history(path)), parquet_path)
