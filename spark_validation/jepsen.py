"""Read a Jepsen Kafka history.edn into the kspec history schema (spec/history.py).

Jepsen's shapes (research/jepsen.md section 1): an op is a map with :index :time
:process :type :f :value. send/poll/txn values are micro-operations [:send k v] or
[:send k [offset v]], and [:poll] or [:poll {k [[offset v] ...]}]; assign and subscribe
carry a vector of keys. Key k lives in topic "t{k // 2}", partition k % 2. Every field
the schema has no column for (error, poll-ms, rebalance-log, nemesis values) is kept
in the row's extra JSON.

Jepsen writes one op map per line (bare, or inside one vector that spans the file);
EdnRecords also reads maps spread over several lines. read_range reads the lines of the
common shapes a range at a time with numpy (jepsen_lines.py) and every other line through
EdnRecords and HistoryRows, and merges the two in line order; both this module's in-process
reader and the Spark import (jepsen_import.py) read with it, so they build the same table.
A record that is not a Jepsen op raises JepsenError naming its line.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_validation.edn import EdnEndError, EdnError, Keyword, UnexpectedCloser, read_all, to_json
from spark_validation.jepsen_lines import LINE, line_groups, rows_of
from spec.history import ASSIGNMENT_FS, CLIENT_FS, HISTORY_SCHEMA, NEMESIS_PROCESS, TYPES, Op, ops_from_table

OP_FIELDS = ("index", "time", "process", "type", "f", "value")
# what a client process of Jepsen's Kafka workload invokes (jepsen.tests.kafka); the nemesis may invoke anything
# plus, from kspec's own runs, the replica audit's reads and the leader-epoch observations (faults/audit.py, epochs.py)
CLIENT_PROCESS_FS = (*CLIENT_FS, *ASSIGNMENT_FS, "crash", "debug-topic-partitions", "replica-read", "leader-epochs")
_TYPES = {t: t for t in TYPES}
LOOKBEHIND_BYTES = 1 << 20  # how far a range looks back for the invocations of its first completions


class JepsenError(ValueError):
    """A history.edn line that is not a Jepsen Kafka op."""

    def __init__(self, line: int, problem: str):
        super().__init__(f"line {line}: {problem}")
        self.line, self.problem = line, problem


class EdnRecords:
    """The top-level maps of EDN text given as (line number, line), with the line each starts on.

    A leading "[" on the first form and the "]" that closes it are the vector Jepsen may
    wrap the history in. A form left open at the end of a line continues on the next;
    `open_line` is where a form still open (`pending`) starts.
    """

    def __init__(self, at_file_start: bool = True):
        self.line = 0
        self.at_file_start = at_file_start
        self.wrapper_opened = False
        self.wrapper_closed_line: int | None = None
        self.pending: list[str] = []
        self.open_line: int | None = None

    def records(self, lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, dict]]:
        for self.line, line in lines:
            if self.pending:
                self.pending.append(line)
                text = "\n".join(self.pending)
            else:
                stripped = line.lstrip(" \t\r\n,")
                if not stripped or stripped[0] == ";":
                    continue
                if self.wrapper_closed_line is not None:
                    raise JepsenError(self.line, f"content after the vector closed on line {self.wrapper_closed_line}")
                if self.at_file_start:
                    self.at_file_start = False
                    if stripped[0] == "[":
                        self.wrapper_opened, stripped = True, stripped[1:]
                text, self.open_line = stripped, self.line
            try:
                forms = read_all(text)
            except EdnEndError:
                self.pending = self.pending or [text]
                continue
            except UnexpectedCloser as e:
                forms = self._closing(text, e)
            except EdnError as e:
                raise JepsenError(self.open_line, str(e)) from None
            self.pending = []
            for form in forms:
                if not isinstance(form, dict):
                    raise JepsenError(self.open_line, f"expected an op map {{:index .. :type .. :f ..}}, "
                                                      f"got {_shown(form)}")
                yield self.open_line, form
            self.open_line = None

    def _closing(self, text: str, error: UnexpectedCloser) -> list:
        """The forms before a final "]" that closes the vector around the history."""
        body = text.rstrip(" \t\r\n,")
        if not body.endswith("]"):
            raise JepsenError(self.open_line, str(error)) from None
        try:
            forms = read_all(body[:-1])
        except EdnError as e:
            raise JepsenError(self.open_line, str(e)) from None
        self.wrapper_closed_line = self.line
        return forms


class HistoryRows:
    """Jepsen records mapped onto HISTORY_SCHEMA rows, appended column by column, with the line
    of each row (invoke_time_ns is left null: pair_invocations sets it over a whole range)."""

    def __init__(self):
        self.columns: dict[str, list] = {name: [] for name in HISTORY_SCHEMA.names}
        self.lines: list[int] = []
        self.records = 0
        self.without_index = 0

    @property
    def rows(self) -> int:
        return len(self.columns["rebalanced"])  # appended row by row; the per-record columns follow

    def add(self, line: int, record: dict) -> None:
        index = record.get("index")
        if index is None:
            index, self.without_index = self.records, self.without_index + 1
        self.records += 1
        _need(line, "index", index, int)
        process = record.get("process")
        if isinstance(process, Keyword):
            process = NEMESIS_PROCESS
        else:
            _need(line, "process", process, int)
        kind = _TYPES.get(record["type"]) if isinstance(record.get("type"), Keyword) else None
        if kind is None:
            raise JepsenError(line, f":type must be one of :{' :'.join(TYPES)}, got {_shown(record.get('type'))}")
        f = record.get("f")
        if not isinstance(f, Keyword) or (process != NEMESIS_PROCESS and f not in CLIENT_PROCESS_FS):
            raise JepsenError(line, f"unknown :f {_shown(f)} for process {process}; a client op's :f is one of "
                                    f":{' :'.join(CLIENT_PROCESS_FS)}")
        f = str(f)
        time_ns = record.get("time", 0)
        _need(line, "time", time_ns, int)
        value = record.get("value")
        extra = {str(k): to_json(v) for k, v in record.items() if k not in OP_FIELDS}
        rebalance_log = record.get("rebalance-log") or ()
        rebalanced = {_key(line, k) for event in rebalance_log for k in _rebalanced_keys(line, event)}
        first_row = self.rows
        if f in (*CLIENT_FS, "replica-read") and value is not None:  # a replica read's value is one poll
            if not isinstance(value, list):
                raise JepsenError(line, f":value of a :{f} must be a vector of micro-operations, got {_shown(value)}")
            for mop_index, mop in enumerate(value):
                self._mop(line, mop_index, mop, rebalanced)
        elif f in ASSIGNMENT_FS and isinstance(value, list):
            for k in value:
                key = _key(line, k)
                self._row(None, None, key, None, None, key in rebalanced)
        elif value is not None:
            extra["value"] = to_json(value)
        if self.rows == first_row:
            self._row(None, None, None, None, None, False)
        n = self.rows - first_row
        c = self.columns
        c["index"].extend([index] * n)
        c["seq"].extend(range(n))
        c["process"].extend([process] * n)
        c["type"].extend([kind] * n)
        c["f"].extend([f] * n)
        c["time_ns"].extend([time_ns] * n)
        c["invoke_time_ns"].extend([None] * n)
        c["extra"].append(json.dumps(extra, sort_keys=True) if extra else None)
        c["extra"].extend([None] * (n - 1))
        self.lines.extend([line] * n)

    def _row(self, mop_index, mop_f, key, value, offset, rebalanced: bool) -> None:
        c = self.columns
        c["mop_index"].append(mop_index)
        c["mop_f"].append(mop_f)
        c["topic"].append(None if key is None else f"t{key // 2}")
        c["partition"].append(None if key is None else key % 2)
        c["key"].append(key)
        c["value"].append(value)
        c["offset"].append(offset)
        c["rebalanced"].append(rebalanced)

    def _mop(self, line: int, mop_index: int, mop, rebalanced: set[int]) -> None:
        f = mop[0] if isinstance(mop, list) and mop else None
        if f == "send" and len(mop) == 3:
            key, sent = _key(line, mop[1]), mop[2]
            offset, value = sent if isinstance(sent, list) and len(sent) == 2 else (None, sent)
            self._row(mop_index, "send", key, _value(line, value), _offset(line, offset), key in rebalanced)
        elif f == "poll" and len(mop) <= 2:
            polled = mop[1] if len(mop) == 2 and mop[1] is not None else {}
            if not isinstance(polled, dict):
                raise JepsenError(line, f"a poll's result must be a map of key to [[offset value] ...], "
                                        f"got {_shown(polled)}")
            if not polled:
                self._row(mop_index, "poll", None, None, None, False)
            for k, pairs in polled.items():
                key = _key(line, k)
                if not isinstance(pairs, (list, tuple)):
                    raise JepsenError(line, f"key {key} of a poll must hold [[offset value] ...], got {_shown(pairs)}")
                for pair in pairs:
                    if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                        raise JepsenError(line, f"a polled record must be [offset value], got {_shown(pair)}")
                    self._row(mop_index, "poll", key, _value(line, pair[1]), _offset(line, pair[0]), key in rebalanced)
        else:
            raise JepsenError(line, f"unknown micro-operation {_shown(mop)}; expected [:send k v], [:send k [offset v]],"
                                    f" [:poll] or [:poll {{k [[offset v] ...]}}]")

    def table(self) -> pa.Table:
        return pa.table({name: pa.array(column, HISTORY_SCHEMA.field(name).type)
                         for name, column in self.columns.items()}, schema=HISTORY_SCHEMA)


def _need(line: int, field: str, value, type_: type) -> None:
    if type(value) is not type_:
        raise JepsenError(line, f":{field} must be an integer, got {_shown(value)}")


def _key(line: int, key) -> int:
    if type(key) is not int or key < 0:
        raise JepsenError(line, f"a key must be a non-negative integer, got {_shown(key)}")
    return key


def _value(line: int, value) -> int | None:
    if value is not None and type(value) is not int:
        raise JepsenError(line, f"a record value must be an integer, got {_shown(value)}")
    return value


def _offset(line: int, offset) -> int | None:
    if offset is not None and type(offset) is not int:
        raise JepsenError(line, f"an offset must be an integer or nil, got {_shown(offset)}")
    return offset


def _rebalanced_keys(line: int, event) -> list:
    if not isinstance(event, dict):
        raise JepsenError(line, f"a :rebalance-log entry must be a map with :keys, got {_shown(event)}")
    return event.get("keys", ())


def _shown(x) -> str:
    text = "nil" if x is None else repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class RangeSummary:
    """What the reading of one byte range of a history.edn tells the ranges after it (all small)."""
    first_byte: int
    records: int = 0
    without_index: int = 0           # records whose :index is their position in the range
    open_line: int | None = None     # a form still open at the end of the range starts here
    wrapper_opened: bool = False     # the first form opened the vector around the history
    wrapper_closed_line: int | None = None
    error: tuple[int, str] | None = None              # (line, problem); lines count from the range's first
    unresolved: list[tuple[int, int, int]] = field(default_factory=list)  # pair_invocations
    invoked_ns: list[tuple[int, int | None]] = field(default_factory=list)  # pair_invocations

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "RangeSummary":
        return cls(**json.loads(text))


def read_range(path: Path, start_byte: int, end_byte: int, vectorised: bool = True) -> tuple[pa.Table, RangeSummary]:
    """The rows of the lines that start in [start_byte, end_byte) of a history.edn, and the summary.
    With vectorised, the lines jepsen_lines.LINE matches are read together with numpy; without,
    every line goes through EdnRecords and HistoryRows (the tests compare the two)."""
    with open(path, "rb") as f:
        if start_byte > 0:
            f.seek(start_byte - 1)
            f.readline()  # the rest of a line that started before this range
        summary = RangeSummary(f.tell())
        data = f.read(max(end_byte - summary.first_byte, 0))
        if data and not data.endswith(b"\n"):
            data += f.readline()  # the last line that starts in the range, to its end
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    matches = line_groups(data) if vectorised else [None] * len(lines)
    assert len(matches) == len(lines)
    reader, rows = EdnRecords(at_file_start=start_byte == 0), HistoryRows()
    line_now = 0

    def slow_lines() -> Iterator[tuple[int, str]]:
        """The lines the general reader takes: those LINE did not match, and every line while a form
        is open or after the vector around the history closed."""
        nonlocal line_now
        for position, line in enumerate(lines):
            line_now = position + 1
            if matches[position] is not None:
                if not reader.pending and reader.wrapper_closed_line is None:
                    reader.at_file_start = False
                    continue
                matches[position] = None
            yield line_now, line.decode("utf-8")

    try:
        for line, record in reader.records(slow_lines()):
            rows.add(line, record)
    except JepsenError as e:
        summary.error = (e.line, e.problem)
    except UnicodeDecodeError as e:
        summary.error = (line_now, f"not UTF-8 text ({e.reason} at byte {e.start} of the line)")
    fast = [(position + 1, m) for position, m in enumerate(matches) if m is not None]
    if rows.without_index and fast:  # a record's :index is its position among all the range's records
        return read_range(path, start_byte, end_byte, vectorised=False)
    summary.records, summary.without_index = rows.records + len(fast), rows.without_index
    summary.wrapper_opened = reader.wrapper_opened
    summary.wrapper_closed_line = reader.wrapper_closed_line
    summary.open_line = reader.open_line if reader.pending else None
    if summary.error:
        return HISTORY_SCHEMA.empty_table(), summary
    table = rows.table()
    if fast:
        fast_table, fast_lines = rows_of([line for line, _ in fast], [m for _, m in fast])
        if table.num_rows:
            table = pa.concat_tables([fast_table, table])
            table = table.take(np.lexsort((table["seq"].to_numpy(), np.concatenate([fast_lines, rows.lines]))))
        else:
            table = fast_table
    table, summary.unresolved, summary.invoked_ns = pair_invocations(table)
    if summary.unresolved and start_byte > 0 and vectorised:
        before = invocations_before(path, summary.first_byte, {p for _, _, p in summary.unresolved})
        table = set_invocations(table, [(row, n, before[p]) for row, n, p in summary.unresolved
                                        if before.get(p) is not None])
        summary.unresolved = [(row, n, p) for row, n, p in summary.unresolved if p not in before]
    return table, summary


def invocations_before(path: Path, end_byte: int, processes: set[int]) -> dict[int, int | None]:
    """What the last record of each of processes before end_byte (a line start) leaves pending: its
    time if an invocation, else None; None too when the file start is reached without one. Read
    back line by line up to LOOKBEHIND_BYTES, only over lines jepsen_lines.LINE matches (one op map
    a line); a process not found is left to the import's second job (jepsen_import.py)."""
    start = max(end_byte - LOOKBEHIND_BYTES, 0)
    with open(path, "rb") as f:
        f.seek(start)
        lines = f.read(end_byte - start).split(b"\n")[int(start > 0):-1]  # the first may be a line's tail
    found: dict[int, int | None] = {}
    for line in reversed(lines):
        match = LINE.fullmatch(line)
        if match is None:
            return found
        index, time_ns, kind, process = match.groups()[:4]
        process = int(process)
        if process in processes and process not in found:
            found[process] = int(time_ns) if kind == b"invoke" else None
            if len(found) == len(processes):
                return found
    return {process: found.get(process) for process in processes} if start == 0 else found


def set_invocations(table: pa.Table, fixes: list[tuple[int, int, int]]) -> pa.Table:
    """table with invoke_time_ns set to ns on rows [row, row + n) for each (row, n, ns) of fixes."""
    if not fixes:
        return table
    column = table.column("invoke_time_ns").combine_chunks()
    invoke_ns = pc.fill_null(column, 0).to_numpy().copy()
    known = column.is_valid().to_numpy(zero_copy_only=False).copy()
    for row, n, ns in fixes:
        invoke_ns[row:row + n], known[row:row + n] = ns, True
    return table.set_column(table.schema.get_field_index("invoke_time_ns"), HISTORY_SCHEMA.field("invoke_time_ns"),
                            pa.array(invoke_ns, pa.int64(), mask=~known))


def pair_invocations(table: pa.Table) -> tuple[pa.Table, list[tuple[int, int, int]], list[tuple[int, int | None]]]:
    """Set invoke_time_ns: an invocation's own time, a completion's the time of its process's record
    before it when that was an invocation. Also returns the completions whose process has no record
    before them here, (first row, rows, process): when the rows are a range of a longer history
    their invocation may lie in an earlier range; and what the rows leave pending, process ->
    invocation time or None, in order of first appearance."""
    if table.num_rows == 0:
        return table, [], []
    first = np.flatnonzero(table["seq"].to_numpy() == 0)
    n = np.diff(np.append(first, table.num_rows))
    process = table["process"].to_numpy()[first]
    time_ns = table["time_ns"].to_numpy()[first]
    invoke = pc.equal(table["type"], "invoke").to_numpy(zero_copy_only=False)[first]
    order = np.lexsort((np.arange(len(first)), process))
    p, inv, t = process[order], invoke[order], time_ns[order]
    after = np.concatenate([[False], p[1:] == p[:-1]])  # a record of the same process comes before
    invoke_ns, known, unresolved = (np.empty_like(t), np.empty_like(inv), np.empty_like(inv))
    invoke_ns[order] = np.where(inv, t, np.concatenate([[0], t[:-1]]))
    known[order] = inv | (after & np.concatenate([[False], inv[:-1]]))
    unresolved[order] = ~inv & ~after
    column = pa.array(np.repeat(invoke_ns, n), pa.int64(), mask=np.repeat(~known, n))
    table = table.set_column(table.schema.get_field_index("invoke_time_ns"),
                             HISTORY_SCHEMA.field("invoke_time_ns"), column)
    last = np.concatenate([p[1:] != p[:-1], [True]])
    group_first = np.maximum.accumulate(np.where(~after, np.arange(len(p)), 0))
    pending = sorted((int(order[group_first[i]]), int(p[i]), int(t[i]) if inv[i] else None) for i in np.flatnonzero(last))
    return (table, [(int(first[r]), int(n[r]), int(process[r])) for r in np.flatnonzero(unresolved)],
            [(process_, ns) for _, process_, ns in pending])


def read_whole_again(summaries: list[RangeSummary]) -> bool:
    """Whether ranges read apart cannot be joined: a form crosses a range boundary (the next range
    then starts inside it), or records without :index need their position in the whole file."""
    if len(summaries) == 1:
        return False
    return any(s.open_line is not None for s in summaries[:-1]) or any(s.without_index for s in summaries)


def first_problem(path: Path, summaries: list[RangeSummary]) -> JepsenError | None:
    """The first bad line of a history read as these ranges (in file order), with its line in the file."""
    closed = [(k, s.wrapper_closed_line) for k, s in enumerate(summaries) if s.wrapper_closed_line is not None]
    problems = [(k, *s.error) for k, s in enumerate(summaries) if s.error]
    last = summaries[-1]
    if last.open_line is not None:
        problems.append((len(summaries) - 1, last.open_line, "the file ends inside this form (truncated?)"))
    if closed and not summaries[0].wrapper_opened:
        problems.append((*closed[0], "unexpected ]"))
    if closed and any(s.records for s in summaries[closed[0][0] + 1:]):
        problems.append((closed[0][0] + 1, 1, "content after the vector that holds the history was closed"))
    if summaries[0].wrapper_opened and not closed:
        problems.append((0, 1, "the vector opened here, around the history, is never closed (truncated?)"))
    if not problems:
        return None
    k, line, problem = min(problems)
    return JepsenError(_lines_before(path, summaries[k].first_byte) + line, problem)


def _lines_before(path: Path, end_byte: int) -> int:
    count, chunk_bytes = 0, 1 << 24
    with open(path, "rb") as f:
        while f.tell() < end_byte:
            count += f.read(min(chunk_bytes, end_byte - f.tell())).count(b"\n")
    return count


def invocations_across_ranges(summaries: list[RangeSummary]) -> list[list[tuple[int, int, int]]]:
    """For each range, (first row, rows, invocation time) of the completions whose invocation is
    in an earlier range: the invocations each range leaves pending, chained in file order."""
    pending: dict[int, int | None] = {}
    fixes = []
    for s in summaries:
        fixes.append([(row, n, pending[p]) for row, n, p in s.unresolved if pending.get(p) is not None])
        pending.update(s.invoked_ns)
    return fixes


def read_edn_rows(path: Path, vectorised: bool = True) -> pa.Table:
    """Every record of a history.edn as HISTORY_SCHEMA rows, read in this process as one range
    (jepsen_import.py reads the same in parallel)."""
    table, summary = read_range(path, 0, Path(path).stat().st_size, vectorised)
    problem = first_problem(path, [summary])
    if problem:
        raise problem
    return table


def read_edn_history(path: Path) -> list[Op]:
    return list(ops_from_table(read_edn_rows(Path(path))))
