"""The history schema: what a run records and what the checker reads.

A history is the list of every operation a client invoked and how it completed, in the
order the recorder saw them, as Jepsen records them (see research/jepsen.md section 1).
Each history *record* is an invocation (type "invoke") or a completion ("ok": it
happened; "fail": it definitely did not; "info": unknown). A completion follows its
invocation in the same process, and one process runs one operation at a time.

The Parquet form has one row per micro-operation, so that a million operations are a
flat table Spark can partition by topic-partition:

- a `send` or `txn` op has one row per record sent (mop_f "send") and one row per record
  a poll returned (mop_f "poll"); a poll that returned nothing is one row with no
  topic-partition. `txn` is a transaction: its type is its outcome (ok = committed,
  fail = aborted, info = unknown), and a `send`/`poll` is a non-transactional op.
- `assign`/`subscribe` has one row per topic-partition in its new assignment (partition
  null for a whole topic).
- every other op (crash, debug, nemesis activity) is one row; the nemesis process is -1.

Columns (units in names; times are nanoseconds since the start of the run):

| column | meaning |
|---|---|
| index | the record's position in the history; rows of one record share it |
| seq | the row's position within its record (the order of mops and polled records) |
| process | client process id; NEMESIS_PROCESS for fault injection |
| type | invoke, ok, fail, info |
| f | send, poll, txn, assign, subscribe, crash, ... or the nemesis function |
| time_ns | when the record happened |
| invoke_time_ns | on a completion, the time of its invocation (equal to time_ns on an invoke) |
| mop_index | position of the micro-operation in the op's value; null for ops without mops |
| mop_f | send or poll; null for ops without mops |
| topic, partition | the topic-partition of the row |
| key | the record key (Jepsen's abstract key: topic "t{key // 2}", partition key % 2) |
| value | the record value, unique per topic-partition in a workload |
| offset | the offset the broker assigned (send) or the record's offset (poll); null if unknown |
| rebalanced | the op saw a rebalance of this row's topic-partition (Jepsen :rebalance-log) |
| extra | JSON object of the record's other fields (error, poll-ms, rebalance-log, nemesis value), on seq 0 |

`ops_from_table` turns the rows back into `Op`s, so a history survives the round trip.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

NEMESIS_PROCESS = -1
TYPES = ("invoke", "ok", "fail", "info")
CLIENT_FS = ("send", "poll", "txn")      # ops with micro-operations
ASSIGNMENT_FS = ("assign", "subscribe")  # ops that replace a consumer's assignment
ROW_GROUP_ROWS = 1 << 20

HISTORY_SCHEMA = pa.schema([
    pa.field("index", pa.int64(), nullable=False),
    pa.field("seq", pa.int32(), nullable=False),
    pa.field("process", pa.int64(), nullable=False),
    pa.field("type", pa.string(), nullable=False),
    pa.field("f", pa.string(), nullable=False),
    pa.field("time_ns", pa.int64(), nullable=False),
    pa.field("invoke_time_ns", pa.int64()),
    pa.field("mop_index", pa.int32()),
    pa.field("mop_f", pa.string()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("key", pa.int64()),
    pa.field("value", pa.int64()),
    pa.field("offset", pa.int64()),
    pa.field("rebalanced", pa.bool_(), nullable=False),
    pa.field("extra", pa.string()),
])


@dataclass(frozen=True)
class Record:
    """One record sent or polled. offset is None when the broker did not say."""
    topic: str
    partition: int
    key: int | None
    value: int | None
    offset: int | None = None


@dataclass(frozen=True)
class Send:
    record: Record


@dataclass(frozen=True)
class Poll:
    """One consumer.poll(): the records it returned, in order (empty: nothing)."""
    records: tuple[Record, ...] = ()


@dataclass(frozen=True)
class Op:
    """One history record. mops for send/poll/txn; assignment for assign/subscribe."""
    index: int
    process: int
    type: str
    f: str
    time_ns: int
    invoke_time_ns: int | None = None
    mops: tuple[Send | Poll, ...] = ()
    assignment: tuple[tuple[str, int | None], ...] = ()
    rebalanced: frozenset[tuple[str, int]] = frozenset()
    extra: dict | None = None

    def __post_init__(self) -> None:
        assert self.type in TYPES, self.type
        assert not (self.mops and self.assignment), "an op has mops or an assignment, not both"
        assert self.type != "invoke" or self.invoke_time_ns in (None, self.time_ns)


def topic_partition(key: int) -> tuple[str, int]:
    """Jepsen's mapping of an abstract key to a Kafka topic-partition (two partitions a topic)."""
    return f"t{key // 2}", key % 2


def key_of(topic: str, partition: int) -> int:
    """The abstract key of a workload topic-partition (the inverse of topic_partition)."""
    assert topic.startswith("t") and partition in (0, 1), (topic, partition)
    return int(topic[1:]) * 2 + partition


def op_rows(op: Op) -> list[dict]:
    """The Parquet rows of one op, in seq order."""
    base = {"index": op.index, "process": op.process, "type": op.type, "f": op.f, "time_ns": op.time_ns,
            "invoke_time_ns": op.time_ns if op.type == "invoke" else op.invoke_time_ns}
    rows: list[dict] = []

    def add(mop_index, mop_f, topic=None, partition=None, key=None, value=None, offset=None):
        rows.append({**base, "seq": len(rows), "mop_index": mop_index, "mop_f": mop_f, "topic": topic,
                     "partition": partition, "key": key, "value": value, "offset": offset,
                     "rebalanced": (topic, partition) in op.rebalanced, "extra": None})

    for mop_index, mop in enumerate(op.mops):
        if isinstance(mop, Send):
            r = mop.record
            add(mop_index, "send", r.topic, r.partition, r.key, r.value, r.offset)
        elif not mop.records:
            add(mop_index, "poll")
        else:
            for r in mop.records:
                add(mop_index, "poll", r.topic, r.partition, r.key, r.value, r.offset)
    for topic, partition in op.assignment:
        add(None, None, topic, partition)
    if not rows:
        add(None, None)
    if op.extra is not None:
        rows[0]["extra"] = json.dumps(op.extra, sort_keys=True)
    return rows


def ops_table(ops: Iterable[Op]) -> pa.Table:
    """The history as an Arrow table in HISTORY_SCHEMA."""
    rows = [row for op in ops for row in op_rows(op)]
    return pa.Table.from_pylist(rows, schema=HISTORY_SCHEMA)


def ops_from_table(table: pa.Table) -> Iterator[Op]:
    """The ops of a history table, in index order (the inverse of ops_table)."""
    table = table.sort_by([("index", "ascending"), ("seq", "ascending")])
    rows = table.to_pylist()
    start = 0
    while start < len(rows):
        end = start
        while end < len(rows) and rows[end]["index"] == rows[start]["index"]:
            end += 1
        yield _op_from_rows(rows[start:end])
        start = end


def _op_from_rows(rows: list[dict]) -> Op:
    first = rows[0]
    mops: list[Send | Poll] = []
    assignment = []
    rebalanced = set()
    for row in rows:
        record = Record(row["topic"], row["partition"], row["key"], row["value"], row["offset"])
        if row["rebalanced"]:
            rebalanced.add((row["topic"], row["partition"]))
        if row["mop_f"] == "send":
            mops.append(Send(record))
        elif row["mop_f"] == "poll":
            if len(mops) == row["mop_index"]:
                mops.append(Poll())
            if row["topic"] is not None:
                mops[-1] = Poll(mops[-1].records + (record,))
        elif row["topic"] is not None:
            assignment.append((row["topic"], row["partition"]))
    return Op(first["index"], first["process"], first["type"], first["f"], first["time_ns"], first["invoke_time_ns"],
              tuple(mops), tuple(assignment), frozenset(rebalanced),
              json.loads(first["extra"]) if first["extra"] is not None else None)


def write_history(table: pa.Table, path: str | Path) -> Path:
    """Write a history table to Parquet (zstd, large row groups); returns the path."""
    assert table.schema.equals(HISTORY_SCHEMA), f"not a history table: {table.schema}"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd", row_group_size=ROW_GROUP_ROWS)
    return path


def read_history(path: str | Path) -> pa.Table:
    """Read a history written by write_history; a ValueError says what is wrong."""
    table = pq.read_table(path)
    missing = [f.name for f in HISTORY_SCHEMA if f.name not in table.schema.names]
    if missing:
        raise ValueError(f"{path} is not a kspec history: missing columns {', '.join(missing)}")
    return table.select(HISTORY_SCHEMA.names).cast(HISTORY_SCHEMA)
