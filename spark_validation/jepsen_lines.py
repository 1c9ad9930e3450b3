"""The op lines Jepsen's Kafka workload writes most, read a whole range at a time with numpy.

A line such as

    {:index 7, :time 91, :type :ok, :process 3, :f :poll, :value [[:poll {4 [[0 9] [1 12]]}]], :poll-ms 100}

matches LINE (one compiled regex; line_groups runs it over a whole range in one findall, in C,
so a line costs no Python object but its tuple of groups): the op fields in the order
Jepsen's Op record prints them, a :value of the shape its :f takes (micro-operations
of integers, a vector of keys, or nil) and extra fields with integer values. The values of all
matching lines are then joined and read at once: bracket depth is a running sum over the
bytes, every digit run one integer, and each integer's role (key, value, offset) follows from
its depth and the micro-operation around it. Nothing is done per record in Python but
building the groups' columns (about 1.3 us a line for the match, 4 us for the rest, against
about 27 us through edn.py and HistoryRows).

Every other line (nemesis ops, :error values, keywords in values, other spacing, maps spread
over lines, comments) goes through the general reader (jepsen.EdnRecords, HistoryRows); the
two sets of rows are merged in line order by jepsen.read_range, which the tests check against
the general reader alone.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa

from spec.history import CLIENT_FS, HISTORY_SCHEMA

_N = rb"\d{1,18}"  # below 2**63: an int64
_PAIR = rb"\[" + _N + rb" " + _N + rb"\]"
_PAIRS = rb"\[(?:" + _PAIR + rb"(?: " + _PAIR + rb")*)?\]"
_POLLED = rb"\{(?:" + _N + rb" " + _PAIRS + rb"(?:, " + _N + rb" " + _PAIRS + rb")*)?\}"
_MOP = rb"(?:\[:send " + _N + rb" (?:" + _N + rb"|" + _PAIR + rb")\]|\[:poll(?: " + _POLLED + rb")?\])"
_MOPS = rb"\[(?:" + _MOP + rb"(?: " + _MOP + rb")*)?\]"
_KEYS = rb"\[(?:" + _N + rb"(?: " + _N + rb")*)?\]"
LINE = re.compile(
    rb"[ \t,]*\{:index (" + _N + rb"), :time (" + _N + rb"), :type :(invoke|ok|fail|info), :process (" + _N + rb"), "
    rb":f :(send|poll|txn|assign|subscribe|crash|debug-topic-partitions), :value "
    rb"(nil|(?:(?<=:send, :value )|(?<=:poll, :value )|(?<=:txn, :value ))" + _MOPS
    + rb"|(?:(?<=:assign, :value )|(?<=:subscribe, :value ))" + _KEYS + rb")"
    rb"((?:, :(?!(?:index|time|type|process|f|value|rebalance-log) )[a-z][a-z-]* -?" + _N + rb")*)"
    rb"\}[ \t,\r]*")
_EXTRA = re.compile(rb", :([a-z][a-z-]*) (-?\d+)")
# LINE or, failing it, any line: findall over a range gives every line's groups in one pass in C, without
# a match object a line (all groups empty for a line LINE does not match: its :index group never is)
_EVERY_LINE = re.compile(rb"(?m)^(?:" + LINE.pattern + rb"|.*)$")

TYPE_NAMES = ("invoke", "ok", "fail", "info")
F_NAMES = (*CLIENT_FS, "assign", "subscribe", "crash", "debug-topic-partitions")
_TYPE_CODE = {name.encode(): code for code, name in enumerate(TYPE_NAMES)}
_F_CODE = {name.encode(): code for code, name in enumerate(F_NAMES)}
_KEYS_F = (F_NAMES.index("assign"), F_NAMES.index("subscribe"))
_DEPTH_STEP = np.zeros(256, np.int8)
_DEPTH_STEP[[ord("["), ord("{")]], _DEPTH_STEP[[ord("]"), ord("}")]] = 1, -1
_DIGIT = np.zeros(256, bool)
_DIGIT[ord("0"):ord("9") + 1] = 1


def _extra_json(text: bytes, cache: dict[bytes, str]) -> str:
    """The extra fields (", :poll-ms 100") as HistoryRows writes them (a later field of the same name wins)."""
    if text not in cache:
        cache[text] = json.dumps({name.decode(): int(value) for name, value in _EXTRA.findall(text)}, sort_keys=True)
    return cache[text]


def _ints(column) -> np.ndarray:
    return np.array(column, dtype=np.bytes_).astype(np.int64) if len(column) else np.zeros(0, np.int64)


def line_groups(text: bytes) -> list[tuple[bytes, ...] | None]:
    """For each line of text (split at newlines; a final newline ends the last line), LINE's groups
    when LINE matches the whole line, else None."""
    text = text[:-1] if text.endswith(b"\n") else text
    return [groups if groups[0] else None for groups in _EVERY_LINE.findall(text)] if text else []


def rows_of(lines: list[int], groups: list[tuple[bytes, ...]]) -> tuple[pa.Table, np.ndarray]:
    """HISTORY_SCHEMA rows of the lines LINE matched, given as their groups (invoke_time_ns left
    null: jepsen.read_range pairs invocations over all rows), and each row's line number."""
    fields = list(zip(*groups)) if groups else [()] * 7
    index, time_ns, process = _ints(fields[0]), _ints(fields[1]), _ints(fields[3])
    kind = np.array([_TYPE_CODE[t] for t in fields[2]], np.int8)
    f = np.array([_F_CODE[f] for f in fields[4]], np.int8)
    values = fields[5]
    cache: dict[bytes, str] = {}
    extra = [_extra_json(text, cache) if text else None for text in fields[6]]
    line = np.array(lines, np.int64)

    joined = b"\n".join(values)
    starts = np.zeros(len(values), np.int64)
    if len(values) > 1:
        starts[1:] = np.cumsum(np.fromiter(map(len, values), np.int64, len(values)) + 1)[:-1]
    a = np.frombuffer(joined, np.uint8)
    depth = np.cumsum(_DEPTH_STEP[a], dtype=np.int16)  # brackets open around each byte (and itself, if one)
    digit = _DIGIT[a]  # a value starts and ends with a bracket or nil: no digit run touches either end
    edge = np.flatnonzero(digit[1:] != digit[:-1]) + 1  # where digit runs start and end, in turn
    num_start, num_end = edge[0::2], edge[1::2]
    number = np.zeros(len(num_start), np.int64)
    for j in range(int((num_end - num_start).max()) if len(num_start) else 0):
        more = num_start + j < num_end
        number[more] = number[more] * 10 + (a[num_start[more] + j] - ord("0"))
    num_depth = depth[num_start]
    num_record = np.searchsorted(starts, num_start, "right") - 1

    # micro-operations: a "[" at depth 2 of a value whose :f is send, poll or txn
    has_mops = np.isin(f, _KEYS_F, invert=True)
    mop_at = np.flatnonzero((a == ord("[")) & (depth == 2))
    mop_record = np.searchsorted(starts, mop_at, "right") - 1
    mop_at, mop_record = mop_at[has_mops[mop_record]], mop_record[has_mops[mop_record]]
    mop_ordinal = np.arange(len(mop_at)) - np.searchsorted(mop_record, mop_record)
    mop_is_send = a[np.minimum(mop_at + 2, len(a) - 1)] == ord("s")  # "[:send" or "[:poll"
    in_mops = has_mops[num_record]
    mop_num = np.flatnonzero(in_mops)  # the numbers inside micro-operations, and the mop of each
    num_mop = np.searchsorted(mop_at, num_start[mop_num], "right") - 1
    first_num = np.append(mop_num, 0)[np.searchsorted(num_mop, np.arange(len(mop_at)))]
    count = np.searchsorted(num_mop, np.arange(len(mop_at)), "right") - np.searchsorted(num_mop, np.arange(len(mop_at)))

    parts = []  # (position in joined, record, mop_index, is_send, key, value, offset); -1 for none
    # sends: [:send k v] (two numbers) or [:send k [offset v]] (three)
    send = np.flatnonzero(mop_is_send)
    k_at = first_num[send]
    parts.append((mop_at[send], mop_record[send], mop_ordinal[send], np.ones(len(send), bool), number[k_at],
                  number[k_at + count[send] - 1], np.where(count[send] == 3, number[k_at + 1], -1)))
    # polls: one row per [offset value] (depth 5), keyed by the depth-3 number before it; one empty row
    # for a poll that names no key
    in_poll = ~mop_is_send[num_mop]
    poll_key = mop_num[in_poll & (num_depth[mop_num] == 3)]
    pair_num = mop_num[in_poll & (num_depth[mop_num] == 5)][::2]
    pair_key = poll_key[np.searchsorted(poll_key, pair_num) - 1]
    pair_mop = num_mop[np.searchsorted(mop_num, pair_num)]
    parts.append((num_start[pair_num], num_record[pair_num], mop_ordinal[pair_mop], np.zeros(len(pair_num), bool),
                  number[pair_key], number[pair_num + 1], number[pair_num]))
    keyed = np.zeros(len(mop_at), bool)
    keyed[num_mop[np.searchsorted(mop_num, poll_key)]] = True
    empty = np.flatnonzero(~mop_is_send & ~keyed)
    parts.append((mop_at[empty], mop_record[empty], mop_ordinal[empty], np.zeros(len(empty), bool),
                  *(np.full(len(empty), -1, np.int64),) * 3))
    # keys of assign and subscribe: one row each
    key_num = np.flatnonzero(~in_mops)
    parts.append((num_start[key_num], num_record[key_num], np.full(len(key_num), -1), np.zeros(len(key_num), bool),
                  number[key_num], np.full(len(key_num), -1, np.int64), np.full(len(key_num), -1, np.int64)))
    # a record with no row gets one empty row
    counts = np.bincount(np.concatenate([p[1] for p in parts]), minlength=len(values))
    bare = np.flatnonzero(counts == 0)
    parts.append((starts[bare], bare, np.full(len(bare), -1), np.zeros(len(bare), bool),
                  *(np.full(len(bare), -1, np.int64),) * 3))

    position, record, mop_index, is_send, key, value, offset = (np.concatenate([p[i] for p in parts]) for i in range(7))
    order = np.argsort(position, kind="stable")
    record, mop_index, is_send, key, value, offset = (c[order] for c in (record, mop_index, is_send, key, value, offset))
    first_row = np.searchsorted(record, record)
    seq = np.arange(len(record)) - first_row
    has_mop = mop_index >= 0
    has_key = key >= 0
    f_names = pa.array(F_NAMES)

    def nullable(column: np.ndarray, present: np.ndarray, type_: pa.DataType) -> pa.Array:
        return pa.array(column, type_, mask=~present)

    def names(codes: np.ndarray, dictionary: pa.Array, present: np.ndarray | None = None) -> pa.Array:
        mask = None if present is None else ~present
        return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32), mask=mask), dictionary).cast(pa.string())

    topics = pa.array([f"t{k}" for k in range(max(int(key.max()) if len(key) else 0, 0) // 2 + 1)], pa.string())
    extra_rows = [None] * len(record)
    for row in np.flatnonzero(seq == 0).tolist():
        extra_rows[row] = extra[record[row]]
    table = pa.table({
        "index": index[record], "seq": pa.array(seq, pa.int32()), "process": process[record],
        "type": names(kind[record], pa.array(TYPE_NAMES)), "f": names(f[record], f_names),
        "time_ns": time_ns[record], "invoke_time_ns": pa.nulls(len(record), pa.int64()),
        "mop_index": nullable(mop_index, has_mop, pa.int32()),
        "mop_f": names(np.where(is_send, 0, 1), pa.array(["send", "poll"]), has_mop),
        "topic": names(np.maximum(key, 0) // 2, topics, has_key),
        "partition": nullable(key % 2, has_key, pa.int32()), "key": nullable(key, has_key, pa.int64()),
        "value": nullable(value, value >= 0, pa.int64()), "offset": nullable(offset, offset >= 0, pa.int64()),
        "rebalanced": pa.array(np.zeros(len(record), bool)), "extra": pa.array(extra_rows, pa.string()),
    }, schema=HISTORY_SCHEMA)
    return table, line[record]
