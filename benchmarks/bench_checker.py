"""Checker benchmark: all checks on a synthetic history with Spark local[2], beside a
single-process numpy/pyarrow implementation of the same per-partition checks, the cycle
search on transactional ops, log verification beside a WGL search on small histories, and
`kspec check` end to end on a Jepsen-format history.edn (generated here in the shape of
Jepsen's queue workload, with a lost write and a duplicate injected), repeated, optionally in
turn with an earlier commit's source tree (--before), with the process tree's CPU seconds and
per-process peaks, and (--edn-readers) its import alone with each EDN reader (every line
through edn.py, or the common lines vectorised).

    python benchmarks/bench_checker.py                      # 1M ops
    python benchmarks/bench_checker.py --ops 1000000 10000000 --cycle-ops 1000000
    python benchmarks/bench_checker.py --edn-only --edn-ops 1000000 10000000
    python benchmarks/bench_checker.py --edn-only --edn-ops 1000000 --before /tmp/before  # git archive of a commit
    python benchmarks/bench_checker.py --cluster-ops 10000000 --work /tmp/h  # a standalone cluster (checker_cluster.py)
    python benchmarks/bench_checker.py --anomalous-ops 2000000  # a broker whose fetches skip: many anomaly rows

The history is clean (a correct broker, simulated), 32 partitions, one consumer per
partition, ~2.5 ops in flight. Each Spark run is a fresh process: times include Spark
start-up and reading the Parquet file, memory is the peak of the driver, its JVM and
the Python workers.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_validation.checker import CHECKS, PARTITION_CHECKS, run_checks
from spark_validation.linearizability import LogOp, verify, wgl_search
from spark_validation.options import RunOptions
from spark_validation.session import spark_session
from spec.history import HISTORY_SCHEMA, ROW_GROUP_ROWS

MASTER = "local[2]"
PARTITIONS = 32
PROCESSES = PARTITIONS  # consumer p reads partition p
STEP_NS = 1_000  # one op invoked every STEP_NS
LATENCY_NS_MAX = 4 * STEP_NS
SHARES = (0.45, 0.35, 0.20)  # send, poll, txn
SEND, POLL, TXN = 0, 1, 2
BASELINE_CHECKS = ("inconsistent-offsets", "duplicate", "lost-write", "unseen", "phantom-read", "G1a",
                   "precommitted-read", "internal-poll-order", "internal-send-order", "poll-order", "send-order",
                   "realtime-order", "future-read")
WGL_SIZES = (4, 8, 12, 16, 20)
WGL_HISTORIES = 20
SAMPLE_S = 0.2  # how often the memory of the Spark run is sampled


# -- synthetic history --------------------------------------------------------------------------
CHUNK_OPS = 1_000_000  # ops generated (and written as row groups) at a time: memory does not grow with the history


class _Carried:
    """What a chunk of the synthetic history needs from the chunks before it, all per partition
    (consumer p reads partition p): records sent so far, the sends of the last LATENCY_NS_MAX
    (a poll reads only sends invoked that long before it), where each consumer has read up to,
    and the values from there on (the next poll reads them)."""

    def __init__(self):
        self.sent = np.zeros(PARTITIONS, np.int64)
        self.recent_part = np.zeros(0, np.int64)
        self.recent_invoke_ns = np.zeros(0, np.int64)
        self.read_upto = np.zeros(PROCESSES, np.int64)
        self.unread = [np.zeros(0, np.int64) for _ in range(PARTITIONS)]  # values at offsets read_upto[p]..sent[p]


def generate(n_ops: int, seed: int = 1, txn_only: bool = False, chunk_ops: int = CHUNK_OPS) -> Iterator[pa.Table]:
    """A clean history of n_ops client ops (plus assigns and final polls) in HISTORY_SCHEMA, in index
    order, chunk_ops ops at a time."""
    rng = np.random.default_rng(seed)
    carried = _Carried()
    for first in range(0, n_ops, chunk_ops):
        yield _chunk(rng, carried, first, min(first + chunk_ops, n_ops), n_ops, txn_only)


def _chunk(rng: np.random.Generator, carried: _Carried, first: int, end: int, n_ops: int,
           txn_only: bool) -> pa.Table:
    """Ops [first, end) of the history; the assigns with the first chunk, the final polls with the last."""
    n = end - first
    ops = np.arange(first, end)
    kind = np.full(n, TXN) if txn_only else rng.choice(3, n, p=SHARES)
    process = ops % PROCESSES
    invoke_ns = (ops.astype(np.int64) + 1) * STEP_NS
    complete_ns = invoke_ns + rng.integers(1, LATENCY_NS_MAX, n)
    base = 2 * PROCESSES  # the assign records come first

    send_at = np.flatnonzero(kind != POLL)  # positions in the chunk
    send_part = rng.integers(0, PARTITIONS, len(send_at))
    order = np.lexsort((send_at, send_part))
    counts = np.bincount(send_part, minlength=PARTITIONS)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    offset = np.empty(len(send_at), np.int64)
    offset[order] = np.arange(len(send_at)) - start[send_part[order]] + carried.sent[send_part[order]]
    value = ops[send_at].astype(np.int64) + 1
    # per partition, the values a poll may read: those not yet read, then this chunk's in offset order
    unread = carried.unread
    readable = [np.concatenate([unread[k], value[order][start[k]:start[k] + counts[k]]]) for k in range(PARTITIONS)]
    readable_start = np.concatenate([[0], np.cumsum([len(r) for r in readable])[:-1]])
    readable_values = np.concatenate(readable)

    def value_at(part: np.ndarray, offset_: np.ndarray) -> np.ndarray:
        if len(readable_values) == 0:
            return np.full(len(part), -1, np.int64)
        at = readable_start[part] + offset_ - carried.read_upto[part]
        return readable_values[np.clip(at, 0, len(readable_values) - 1)]

    # a consumer reads what was certainly acked: every send invoked a full latency before its poll
    poll_at = np.flatnonzero(kind != SEND)
    poll_part = process[poll_at] % PARTITIONS
    recent_n = np.bincount(carried.recent_part, minlength=PARTITIONS)
    key_part = np.concatenate([carried.recent_part, send_part])
    keys = np.sort(key_part * (1 << 42) + np.concatenate([carried.recent_invoke_ns, invoke_ns[send_at]]))
    key_start = np.searchsorted(keys, np.arange(PARTITIONS) * (1 << 42))
    upto = (np.searchsorted(keys, poll_part * (1 << 42) + invoke_ns[poll_at] - LATENCY_NS_MAX) - key_start[poll_part]
            + carried.sent[poll_part] - recent_n[poll_part])
    by_process = np.lexsort((poll_at, process[poll_at]))
    sorted_proc, sorted_upto = process[poll_at][by_process], upto[by_process]
    prev = np.concatenate([[0], sorted_upto[:-1]])
    first_poll = np.concatenate([[True], sorted_proc[1:] != sorted_proc[:-1]])
    prev[first_poll] = carried.read_upto[sorted_proc[first_poll]]
    begin = np.empty_like(upto)
    begin[by_process] = prev
    read_upto = carried.read_upto.copy()
    read_upto[sorted_proc] = np.maximum(sorted_upto, prev)  # the last poll per process wins
    sent = carried.sent + counts

    last = end == n_ops
    procs = np.arange(PROCESSES)
    final_index = base + 2 * n_ops + 2 * procs + 1
    final_time = (n_ops + 10 + procs.astype(np.int64)) * STEP_NS
    columns: dict[str, list[np.ndarray]] = {c: [] for c in HISTORY_SCHEMA.names}

    def add(index, seq, proc, typ, f, time_ns, inv_ns, mop_index, mop_f, part, value_, offset_):
        rows_ = len(index)
        for name, column in (("index", index), ("seq", seq), ("process", proc), ("type", typ), ("f", f),
                             ("time_ns", time_ns), ("invoke_time_ns", inv_ns), ("mop_index", mop_index),
                             ("mop_f", mop_f), ("partition", part), ("value", value_), ("offset", offset_)):
            columns[name].append(np.broadcast_to(np.asarray(column), (rows_,)))

    f_code = np.array([0, 1, 2])[kind]  # f dictionary: send, poll, txn, assign
    if first == 0:  # assigns: invoke and ok per process
        add(2 * procs, 0, procs, 0, 3, procs + 1, procs + 1, -1, -1, -1, -1, -1)
        add(2 * procs + 1, 0, procs, 1, 3, procs + 2, procs + 1, -1, -1, procs % PARTITIONS, -1, -1)
    # invocations: one row each
    add(base + 2 * ops, 0, process, 0, f_code, invoke_ns, invoke_ns, 0, np.where(kind == SEND, 0, 1), -1, -1, -1)
    # polls (of poll and txn ops, and the final polls of the last chunk): one row per record, or one empty row
    finals = procs if last else procs[:0]
    p_begin = np.concatenate([begin, read_upto[finals]])
    p_end = np.concatenate([np.maximum(upto, begin), sent[finals % PARTITIONS]])
    p_index = np.concatenate([base + 2 * ops[poll_at] + 1, final_index[finals]])
    p_proc = np.concatenate([process[poll_at], finals])
    p_f = np.concatenate([f_code[poll_at], np.ones(len(finals), np.int64)])
    p_time = np.concatenate([complete_ns[poll_at], final_time[finals] + STEP_NS // 2])
    p_inv = np.concatenate([invoke_ns[poll_at], final_time[finals]])
    p_part = np.concatenate([poll_part, finals % PARTITIONS])
    n_records = p_end - p_begin
    rows = np.maximum(n_records, 1)
    owner = np.repeat(np.arange(len(rows)), rows)
    within = np.arange(rows.sum()) - np.repeat(np.cumsum(rows) - rows, rows)
    has = np.repeat(n_records > 0, rows)
    rec_offset = np.where(has, p_begin[owner] + within, -1)
    rec_value = np.where(has, value_at(p_part[owner], np.maximum(rec_offset, 0)), -1)
    add(p_index[owner], within, p_proc[owner], 1, p_f[owner], p_time[owner], p_inv[owner], 0, 1,
        np.where(has, p_part[owner], -1), rec_value, rec_offset)
    # sends (of send and txn ops): after the poll rows of a txn
    txn_rows = np.zeros(n, np.int64)
    txn_rows[poll_at] = rows[:len(poll_at)]
    txn_rows[kind == SEND] = 0
    add(base + 2 * ops[send_at] + 1, txn_rows[send_at], process[send_at], 1, f_code[send_at], complete_ns[send_at],
        invoke_ns[send_at], np.where(kind[send_at] == TXN, 1, 0), 0, send_part, value, offset)
    if last:  # final poll invocations
        add(final_index - 1, 0, procs, 0, 1, final_time, final_time, 0, 1, -1, -1, -1)

    # what the next chunk needs
    keep = invoke_ns[send_at] >= invoke_ns[-1] - LATENCY_NS_MAX
    carried.recent_part, carried.recent_invoke_ns = send_part[keep], invoke_ns[send_at][keep]
    carried.unread = [readable[k][read_upto[k] - carried.read_upto[k]:] for k in range(PARTITIONS)]
    carried.sent, carried.read_upto = sent, read_upto

    data = {name: np.concatenate(parts) for name, parts in columns.items() if parts}
    order = np.lexsort((data["seq"], data["index"]))
    data = {name: column[order] for name, column in data.items()}
    part, n = data["partition"], len(data["index"])

    def nullable(column: np.ndarray, type_: pa.DataType) -> pa.Array:
        return pa.array(column, type_, mask=column < 0)

    def dictionary(codes: np.ndarray, names: list[str]) -> pa.Array:
        return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32(), mask=codes < 0),
                                              pa.array(names)).cast(pa.string())

    return pa.table({
        "index": pa.array(data["index"], pa.int64()), "seq": pa.array(data["seq"], pa.int32()),
        "process": pa.array(data["process"], pa.int64()),
        "type": dictionary(data["type"], ["invoke", "ok"]),
        "f": dictionary(data["f"], ["send", "poll", "txn", "assign"]),
        "time_ns": pa.array(data["time_ns"], pa.int64()),
        "invoke_time_ns": pa.array(data["invoke_time_ns"], pa.int64()),
        "mop_index": nullable(data["mop_index"], pa.int32()), "mop_f": dictionary(data["mop_f"], ["send", "poll"]),
        "topic": dictionary(np.where(part < 0, -1, 0), ["t"]), "partition": nullable(part, pa.int32()),
        "key": pa.nulls(n, pa.int64()), "value": nullable(data["value"], pa.int64()),
        "offset": nullable(data["offset"], pa.int64()), "rebalanced": pa.array(np.zeros(n, bool)),
        "extra": pa.nulls(n, pa.string()),
    }, schema=HISTORY_SCHEMA)


# -- the same per-partition checks in one process -----------------------------------------------
def baseline_checks(path: Path) -> dict[str, int]:
    """Counts of anomalies per check, computed with numpy and pyarrow in this process."""
    t = pq.read_table(path, columns=["index", "seq", "process", "type", "f", "time_ns", "invoke_time_ns", "mop_f",
                                     "topic", "partition", "value", "offset"])
    t = t.filter(pc.and_(pc.not_equal(t["type"], "invoke"), pc.is_valid(t["value"])))
    tp = pc.dictionary_encode(pc.binary_join_element_wise(t["topic"], pc.cast(t["partition"], pa.string()), "/"))
    col = {n: t[n].to_numpy(zero_copy_only=False) for n in ("index", "seq", "process", "time_ns", "invoke_time_ns",
                                                          "value")}
    col["tp"] = tp.combine_chunks().indices.to_numpy().astype(np.int64)
    col["offset"] = pc.fill_null(t["offset"], -1).to_numpy()
    ok = pc.equal(t["type"], "ok").to_numpy(zero_copy_only=False)
    info = pc.equal(t["type"], "info").to_numpy(zero_copy_only=False)
    fail = pc.equal(t["type"], "fail").to_numpy(zero_copy_only=False)
    is_send = pc.equal(t["mop_f"], "send").to_numpy(zero_copy_only=False)
    is_read = ~is_send
    key = col["tp"] << 40 | col["value"]  # (partition, value) as one int
    ok_read_keys = np.unique(key[is_read & ok])
    proven = np.unique(col["index"][is_send & info & np.isin(key, ok_read_keys)])
    committed = is_send & (ok | (info & np.isin(col["index"], proven)))
    in_log = (is_read | committed) & (col["offset"] >= 0)
    log = np.unique(np.stack([col["tp"][in_log], col["offset"][in_log], col["value"][in_log]]), axis=1)
    slot_key = log[0] << 40 | log[1]
    found: dict[str, int] = {}
    slots, slot_counts = np.unique(slot_key, return_counts=True)
    found["inconsistent-offsets"] = int((slot_counts > 1).sum())
    pair_key = log[0] << 40 | log[2]
    pairs, pair_counts = np.unique(pair_key, return_counts=True)
    found["duplicate"] = int((pair_counts > 1).sum())
    slot_tp = slots >> 40
    idx_of_slot = np.arange(len(slots)) - np.searchsorted(slot_tp, slot_tp)
    log_idx = idx_of_slot[np.searchsorted(slots, slot_key)]
    by_pair = np.lexsort((log_idx, pair_key))
    first_idx = np.minimum.reduceat(log_idx[by_pair], np.searchsorted(pair_key[by_pair], pairs))
    last_idx = np.maximum.reduceat(log_idx[by_pair], np.searchsorted(pair_key[by_pair], pairs))

    def idx_of(k: np.ndarray) -> np.ndarray:
        at = np.minimum(np.searchsorted(pairs, k), len(pairs) - 1)
        return np.where(pairs[at] == k, last_idx[at], -(1 << 40))

    read_pairs = np.isin(pairs, ok_read_keys)
    bound = np.full(int(col["tp"].max()) + 1, -1)
    np.maximum.at(bound, pairs[read_pairs] >> 40, first_idx[read_pairs])
    committed_keys = np.unique(key[committed])
    found["lost-write"] = int((~read_pairs & (last_idx <= bound[pairs >> 40]) & np.isin(pairs, committed_keys)).sum())
    acked_keys = np.unique(key[is_send & ok])
    found["unseen"] = len(np.unique(acked_keys[np.isin(acked_keys, ok_read_keys, invert=True)] >> 40))
    found["phantom-read"] = int(np.isin(np.unique(key[is_read]), key[is_send], invert=True).sum())
    found["G1a"] = int(np.isin(key[is_read & ok], key[is_send & fail]).sum())
    op_key = col["index"] << 40 | col["value"]
    found["precommitted-read"] = int(np.isin(op_key[is_read], op_key[is_send]).sum())

    for name, mask in (("internal-poll-order", is_read), ("internal-send-order", is_send)):
        o = np.flatnonzero(mask)
        o = o[np.lexsort((col["seq"][o], col["tp"][o], col["index"][o]))]
        same = (col["index"][o][1:] == col["index"][o][:-1]) & (col["tp"][o][1:] == col["tp"][o][:-1])
        delta = idx_of(key[o][1:]) - idx_of(key[o][:-1])
        delta = np.where((np.abs(delta) > 1 << 39), 1, delta)
        found[name] = int((same & (delta != 1)).sum())

    for name, mask, moves in (("poll-order", is_read, ok), ("send-order", is_send & (ok | info), ok | info)):
        o = np.flatnonzero(mask)
        o = o[np.lexsort((col["seq"][o], col["index"][o], col["tp"][o], col["process"][o]))]
        group = col["process"][o] << 32 | col["tp"][o]
        op_start = np.concatenate([[True], (col["index"][o][1:] != col["index"][o][:-1]) | (group[1:] != group[:-1])])
        op_end = np.concatenate([op_start[1:], [True]])
        firsts, lasts = o[op_start], o[op_end]
        moved = np.where(moves[lasts], np.arange(len(lasts)), -1)
        carried = np.maximum.accumulate(np.concatenate([[-1], moved[:-1]]))
        g = group[op_start]
        valid = (carried >= 0) & (g == g[np.maximum(carried, 0)])
        prev = lasts[np.maximum(carried, 0)]
        delta = idx_of(key[firsts]) - idx_of(key[prev])
        delta = np.where(np.abs(delta) > 1 << 39, 1, delta)
        if name == "poll-order":
            found[name] = int((valid & (delta != 1)).sum())
        else:  # a skip counts only when the process's own records from other ops are in the gap
            rank = np.empty(len(o), np.int64)
            by_rank = np.lexsort((idx_of(key[o]), col["tp"][o], col["process"][o]))
            g_sorted = group[by_rank]
            rank[by_rank] = np.arange(len(o)) - np.searchsorted(g_sorted, g_sorted)
            row_of = np.empty(len(col["index"]), np.int64)
            row_of[o] = np.arange(len(o))
            own_between = rank[row_of[firsts]] - rank[row_of[prev]] - 1
            found[name] = int((valid & ((delta < 1) | ((delta > 1) & (own_between > 0)))).sum())

    acked = np.flatnonzero(is_send & ok & (col["offset"] >= 0))
    times = np.concatenate([col["time_ns"][acked], col["invoke_time_ns"][acked]])
    kinds = np.concatenate([np.ones(len(acked), np.int64), np.zeros(len(acked), np.int64)])
    tps = np.concatenate([col["tp"][acked], col["tp"][acked]])
    offs = np.concatenate([col["offset"][acked], col["offset"][acked]])
    e = np.lexsort((kinds, times, tps))
    running = np.maximum.accumulate(np.where(kinds[e] == 1, tps[e] << 40 | offs[e], -1))
    found["realtime-order"] = int(((kinds[e] == 0) & (running > (tps[e] << 40 | offs[e]))).sum())

    sends_idx = np.flatnonzero(is_send)
    writer_key, first_send = np.unique(key[sends_idx], return_index=True)
    writer_inv = col["invoke_time_ns"][sends_idx[first_send]]
    log_writer = np.searchsorted(writer_key, pair_key)
    has_writer = (log_writer < len(writer_key)) & (writer_key[np.minimum(log_writer, len(writer_key) - 1)] == pair_key)
    a_tp, a_pos = log[0][has_writer], log[1][has_writer]
    a_inv = writer_inv[log_writer[has_writer]]
    reads = np.flatnonzero(is_read & (col["offset"] >= 0))
    r_key = col["index"][reads] << 20 | col["tp"][reads]
    r_ops, r_first = np.unique(r_key, return_index=True)
    r_max = np.maximum.reduceat(col["offset"][reads][np.argsort(r_key, kind="stable")],
                                np.searchsorted(np.sort(r_key), r_ops))
    r_tp, r_done = r_ops & ((1 << 20) - 1), col["time_ns"][reads][r_first]
    pos = np.concatenate([a_pos, r_max])
    tps = np.concatenate([a_tp, r_tp])
    kinds = np.concatenate([np.zeros(len(a_pos), np.int64), np.ones(len(r_max), np.int64)])
    e = np.lexsort((kinds, pos, tps))
    stamp = np.concatenate([a_inv, r_done])
    running = np.maximum.accumulate(np.where(kinds[e] == 0, tps[e] << 44 | stamp[e], -1))
    found["future-read"] = int(((kinds[e] == 1) & (running > (tps[e] << 44 | stamp[e]))).sum())
    return found


# -- measurements ---------------------------------------------------------------------------------
def _tree_memory_mb(field: str) -> tuple[float, float, float]:
    """A /proc/<pid>/status memory field (MB) summed over this process, its JVM (the Spark
    driver) and the JVM's descendants (the Python workers)."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    sizes: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            status = (stat.parent / "status").read_text()
            pid = int(stat.parent.name)
            children.setdefault(int(text.rsplit(")", 1)[1].split()[1]), []).append(pid)
            names[pid] = text.split("(", 1)[1].split(")")[0]
            sizes[pid] = int(next(line.split()[1] for line in status.splitlines() if line.startswith(field))) / 1024
        except (OSError, StopIteration, ValueError, IndexError):
            continue
    jvm = [pid for pid in children.get(os.getpid(), []) if "java" in names.get(pid, "")]
    workers, stack = [], [c for pid in jvm for c in children.get(pid, [])]
    while stack:
        pid = stack.pop()
        workers.append(pid)
        stack.extend(children.get(pid, []))
    return sizes.get(os.getpid(), 0), sum(sizes.get(p, 0) for p in jvm), sum(sizes.get(p, 0) for p in workers)


class MemorySampler(threading.Thread):
    """The peak of the whole tree's resident memory, sampled every SAMPLE_S."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak_mb = 0.0
        self.running = True

    def run(self) -> None:
        while self.running:
            self.peak_mb = max(self.peak_mb, sum(_tree_memory_mb("VmRSS")))
            time.sleep(SAMPLE_S)


def write_generated(n_ops: int, path: Path, txn_only: bool = False, chunk_ops: int = CHUNK_OPS) -> None:
    """The synthetic history written chunk by chunk (row groups of ROW_GROUP_ROWS, as write_history)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, HISTORY_SCHEMA, compression="zstd") as writer:
        for table in generate(n_ops, seed=2 if txn_only else 1, txn_only=txn_only, chunk_ops=chunk_ops):
            writer.write_table(table, row_group_size=ROW_GROUP_ROWS)


def generated(n_ops: int, work: Path, txn_only: bool = False) -> Path:
    """The synthetic history's Parquet file, written by a child process (its memory is not the checker's)."""
    path = work / f"{'txn' if txn_only else 'history'}-{n_ops}.parquet"
    if not path.exists():
        child = multiprocessing.get_context("spawn").Process(target=write_generated, args=(n_ops, path, txn_only))
        child.start()
        child.join()
        assert child.exitcode == 0, f"generating {n_ops} ops failed"
    return path


def check_in_fresh_session(path: str, checks: tuple[str, ...], report) -> None:
    """Run in a child process: Spark start-up, every check, and the peak memory of the whole tree."""
    sampler = MemorySampler()
    sampler.start()
    started = time.monotonic()
    spark = spark_session(MASTER, "kspec-bench")
    startup_s = time.monotonic() - started
    result = run_checks(spark, Path(path), RunOptions(), checks)
    total_s = time.monotonic() - started
    sampler.running = False
    report.put((startup_s, total_s, result.anomalies.num_rows, result.verdict, _tree_memory_mb("VmHWM"),
                sampler.peak_mb))
    spark.stop()


def spark_run(path: Path, checks: tuple[str, ...]) -> tuple:
    context = multiprocessing.get_context("spawn")
    report = context.Queue()
    child = context.Process(target=check_in_fresh_session, args=(str(path), checks, report))
    child.start()
    child.join()
    assert child.exitcode == 0, f"the Spark run on {path} failed (exit {child.exitcode})"
    return report.get(timeout=1)


def bench_all_checks(n_ops: int, work: Path) -> float:
    """All checks end to end on n_ops; returns the end-to-end seconds."""
    t0 = time.monotonic()
    path = generated(n_ops, work)
    rows = pq.ParquetFile(path).metadata.num_rows
    print(f"\n{n_ops:,} ops: {rows:,} rows, {path.stat().st_size / 1e6:.0f} MB Parquet "
          f"(generated in {time.monotonic() - t0:.1f} s)", flush=True)
    startup_s, total_s, anomalies, verdict, (own_mb, jvm_mb, workers_mb), total_mb = spark_run(path, CHECKS)
    seconds = verdict["seconds"]
    per_check = ", ".join(f"{c} {s:.1f}" for c, s in seconds.items()
                          if c not in ("total", "partition-pass", "linearizability", "cycles"))
    print(f"spark {MASTER}: {total_s:.1f} s end to end with {startup_s:.1f} s start-up; the per-partition pass "
          f"{seconds['partition-pass']:.1f} s, cycles {seconds['cycles']:.1f} s; {anomalies} anomalies (allowed "
          f"ones: {verdict['anomalies']}), valid={verdict['valid']}")
    print(f"  worker seconds per check (summed over partitions): {per_check}")
    print(f"  peak memory: {total_mb:.0f} MB in all (sampled every {SAMPLE_S} s); peaks of the parts: driver Python "
          f"{own_mb:.0f} MB, JVM {jvm_mb:.0f} MB, Python workers {workers_mb:.0f} MB", flush=True)
    t1 = time.monotonic()
    found = baseline_checks(path)
    baseline_s = time.monotonic() - t1
    assert not any(found.values()), found
    print(f"single-process numpy/pyarrow, the {len(BASELINE_CHECKS)} per-partition checks: {baseline_s:.1f} s "
          f"(peak Python {python_peak_rss_mb():.0f} MB; Spark's per-partition pass, which also reads the file "
          f"and builds the dependency edges: {seconds['partition-pass']:.1f} s)", flush=True)
    return total_s


def python_peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_cycles(n_ops: int, work: Path) -> None:
    path = generated(n_ops, work, txn_only=True)
    startup_s, total_s, anomalies, verdict, _, _ = spark_run(path, ("cycles",))
    print(f"\ncycle search on {n_ops:,} transactional ops: {total_s:.1f} s end to end with {startup_s:.1f} s "
          f"start-up ({verdict['seconds']['cycles']:.1f} s in the driver after the pass), {anomalies} cycle(s): "
          f"{verdict['anomalies']}", flush=True)


def random_concurrent_log(rng: random.Random, n: int) -> list[LogOp]:
    """n overlapping appends (offsets in invocation order, two swapped in half the histories)
    and n // 3 reads of prefixes."""
    offsets = list(range(n))
    if rng.random() < 0.5:
        i, j = rng.sample(range(n), 2)
        offsets[i], offsets[j] = offsets[j], offsets[i]
    ops, t = [], 0
    for i in range(n):
        t += rng.randint(0, 2)
        ops.append(LogOp(i, t, t + rng.randint(1, 2 * n), value=offsets[i] + 1, offset=offsets[i]))
    for j in range(n // 3):
        m = rng.randrange(n)
        start = rng.randint(0, t + 2)
        ops.append(LogOp(n + j, start, start + rng.randint(1, n), reads=tuple((o, o + 1) for o in range(m + 1))))
    return ops


def bench_wgl() -> None:
    rng = random.Random(5)
    print("\npartition-log linearizability, verification vs WGL search (mean per history):")
    for n in WGL_SIZES:
        histories = [random_concurrent_log(rng, n) for _ in range(WGL_HISTORIES)]
        t0 = time.perf_counter()
        verified = [verify(h) is None for h in histories]
        t1 = time.perf_counter()
        searched = [wgl_search(h) for h in histories]
        t2 = time.perf_counter()
        assert verified == searched
        print(f"  {n:3d} appends + {n // 3} reads: verify {1e6 * (t1 - t0) / WGL_HISTORIES:8.0f} us, "
              f"WGL {1e6 * (t2 - t1) / WGL_HISTORIES:10.0f} us, {sum(verified)}/{WGL_HISTORIES} linearizable")


# -- Jepsen-format history.edn ---------------------------------------------------------------
EDN_KEYS = 16              # Jepsen's abstract keys: topics t0..t7, two partitions each
EDN_PROCESSES = 10         # client processes at a time
EDN_POLL_RECORDS_MAX = 6   # records a poll returns per key
EDN_CRASH_EVERY = 5_000    # one crash (and a new process that assigns again) every this many ops
EDN_FINAL_POLL_RECORDS = 20


def write_jepsen_history(path: Path, n_ops: int, seed: int = 3, anomalies: bool = True) -> dict:
    """A Jepsen Kafka queue history of about n_ops op records (one map a line): processes assign
    every key, then send and poll in rounds (all invoke, then all complete, shuffled), a process
    now and then crashes and its successor assigns again, and final reads poll every key to its
    end. With anomalies, one acked send is never read (a lost write; consumers skip its offset)
    and one is stored twice (a duplicate at two offsets). Returns what was injected."""
    rng = random.Random(seed)
    logs: list[list[int]] = [[] for _ in range(EDN_KEYS)]  # values by offset, per key
    next_value = 1
    lost_at = duplicate_at = None
    injected: dict = {}
    index = 0
    time_ns = 0
    positions: dict[int, list[int]] = {}
    out = open(path, "w", buffering=1 << 20)

    def emit(process, kind, f, value: str, extra: str = "") -> None:
        nonlocal index, time_ns
        time_ns += rng.randint(100_000, 2_000_000)
        out.write(f"{{:index {index}, :time {time_ns}, :type :{kind}, :process {process}, :f :{f}, "
                  f":value {value}{extra}}}\n")
        index += 1

    def assign(process: int) -> None:
        keys = "[" + " ".join(map(str, range(EDN_KEYS))) + "]"
        emit(process, "invoke", "assign", keys)
        emit(process, "ok", "assign", keys)

    def poll_value(position: list[int], limits: list[int], records_max: int) -> str:
        polled = []
        for key in range(EDN_KEYS):
            start = position[key]
            end = min(limits[key], start + records_max)
            pairs = [f"[{o} {logs[key][o]}]" for o in range(start, end) if o != lost_at_key.get(key)]
            position[key] = max(start, end)
            if pairs:
                polled.append(f"{key} [{' '.join(pairs)}]")
        return "[[:poll {" + ", ".join(polled) + "}]]" if polled else "[[:poll]]"

    lost_at_key: dict[int, int] = {}
    processes = list(range(EDN_PROCESSES))
    for p in processes:
        positions[p] = [0] * EDN_KEYS
        assign(p)
    next_process = EDN_PROCESSES
    ops = 0
    while index < n_ops - 4 * EDN_PROCESSES:
        round_ops = []
        for slot, p in enumerate(processes):
            if rng.random() < 0.55:
                key, value = rng.randrange(EDN_KEYS), next_value
                next_value += 1
                emit(p, "invoke", "send", f"[[:send {key} {value}]]")
                round_ops.append((slot, p, "send", key, value))
            else:
                emit(p, "invoke", "poll", "[[:poll]]", ", :poll-ms 100")
                round_ops.append((slot, p, "poll", [len(log) for log in logs], None))
        rng.shuffle(round_ops)
        for slot, p, f, key, value in round_ops:
            ops += 1
            if f == "send":
                offset = len(logs[key])
                logs[key].append(value)
                if anomalies and lost_at is None and index > n_ops // 3:
                    lost_at = lost_at_key[key] = offset
                    injected["lost-write"] = {"key": key, "value": value, "offset": offset}
                elif anomalies and duplicate_at is None and index > n_ops // 2:
                    duplicate_at = offset
                    logs[key].append(value)
                    injected["duplicate"] = {"key": key, "value": value, "offsets": [offset, offset + 1]}
                emit(p, "ok", "send", f"[[:send {key} [{offset} {value}]]]")
            else:
                emit(p, "ok", "poll", poll_value(positions[p], key, EDN_POLL_RECORDS_MAX), ", :poll-ms 100")
            if ops % EDN_CRASH_EVERY == 0:
                emit(p, "invoke", "crash", "nil")
                emit(p, "info", "crash", "nil")
                successor = next_process
                next_process += 1
                positions[successor] = positions.pop(p)  # it resumes from the committed positions
                processes[slot] = successor
                assign(successor)
    for p in processes:  # final reads: every process polls every key to its end
        limits = [len(log) for log in logs]
        while positions[p] != limits:
            emit(p, "invoke", "poll", "[[:poll]]", ", :poll-ms 1000")
            emit(p, "ok", "poll", poll_value(positions[p], limits, EDN_FINAL_POLL_RECORDS), ", :poll-ms 1000")
    out.close()
    return {"ops": index, "bytes": path.stat().st_size, **injected}


class ProcessTree:
    """Samples a process and all its descendants (the JVM, the Python worker daemon and the workers
    it forks) from /proc: the peak of their summed resident memory, the peak of each kind of
    process, and the CPU seconds they used. A process's CPU is its own time and the larger of
    what its reaped children used (the kernel's count, which includes children never sampled:
    workers that lived less than SAMPLE_S) and what its children were last seen to use (the JVM
    is not reaped by the driver before it exits)."""

    KINDS = ("driver", "jvm", "python workers")

    def __init__(self, root: int):
        self.root = root
        self.peak_mb = 0.0
        self.peak_by_kind = dict.fromkeys(self.KINDS, 0.0)
        self.seen: dict[int, tuple[int, float, float, str]] = {}  # pid -> (ppid, own cpu s, reaped cpu s, kind)
        self.tick_s = os.sysconf("SC_CLK_TCK")

    def _kind(self, pid: int, command: str) -> str:
        return "driver" if pid == self.root else "jvm" if command == "java" else "python workers"

    def sample(self) -> None:
        from benchmarks.checker_cluster import process_table
        stats, children = process_table()
        total_mb, by_kind, stack = 0.0, dict.fromkeys(self.KINDS, 0.0), [self.root]
        while stack:
            pid = stack.pop()
            stack.extend(children.get(pid, []))
            if pid not in stats:
                continue
            ppid, command, fields = stats[pid]
            kind = self._kind(pid, command)
            # fields from state on: utime, stime, cutime, cstime are 11-14, rss (pages) 21
            own_s = (int(fields[11]) + int(fields[12])) / self.tick_s
            reaped_s = (int(fields[13]) + int(fields[14])) / self.tick_s
            self.seen[pid] = (ppid, own_s, reaped_s, kind)
            rss_mb = int(fields[21]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
            total_mb += rss_mb
            by_kind[kind] += rss_mb
        self.peak_mb = max(self.peak_mb, total_mb)
        for kind, mb in by_kind.items():
            self.peak_by_kind[kind] = max(self.peak_by_kind[kind], mb)

    def cpu_s(self, kind: str | None = None) -> float:
        """CPU seconds of the tree, or of the processes of one kind in it."""
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _, _) in self.seen.items():
            if ppid in self.seen:
                children.setdefault(ppid, []).append(pid)
        subtree: dict[int, float] = {}

        def cpu(pid: int) -> float:  # own time, and the larger of what it reaped and what its children were seen to use
            if pid not in subtree:
                _, own, reaped, _ = self.seen[pid]
                subtree[pid] = own + max(reaped, sum(cpu(c) for c in children.get(pid, [])))
            return subtree[pid]

        if kind is None:
            return cpu(self.root) if self.root in self.seen else 0.0
        return sum(cpu(pid) - sum(cpu(c) for c in children.get(pid, [])) for pid, (_, _, _, k) in self.seen.items()
                   if k == kind)

    def peaks(self) -> str:
        return ", ".join(f"{kind} {mb:.0f} MB / {self.cpu_s(kind):.0f} CPU s" for kind, mb in self.peak_by_kind.items())


HERE = Path(__file__).resolve().parent.parent  # the source tree benchmarked


def timed_command(command: list[str], tree_root: Path = HERE) -> tuple[float, ProcessTree, int, str]:
    """Run a command with tree_root's kspec; its wall seconds, its process tree's samples (peak RSS,
    CPU), exit code, stdout."""
    started = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             cwd=tree_root, env={**os.environ, "PYTHONPATH": str(tree_root)})
    tree = ProcessTree(child.pid)
    while child.poll() is None:
        tree.sample()
        time.sleep(SAMPLE_S)
    return time.monotonic() - started, tree, child.returncode, child.stdout.read()


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def bench_edn(n_ops: int, work: Path, repeats: int, before: Path | None, readers: bool) -> None:
    """`kspec check history.edn` end to end (import in Spark, then every check), then again (the
    import reused), repeats times; with before (a source tree of an earlier commit), that tree's
    check of the same file in turn with this one's, so both see the same machine."""
    work.mkdir(parents=True, exist_ok=True)
    edn, made = work / f"jepsen-{n_ops}.edn", work / f"jepsen-{n_ops}.json"
    t0 = time.monotonic()
    if made.exists() and edn.exists():  # --work kept it from an earlier run
        injected = json.loads(made.read_text())
    else:
        injected = write_jepsen_history(edn, n_ops)
        made.write_text(json.dumps(injected))
    print(f"\nJepsen history.edn, {injected['ops']:,} op records, {injected['bytes'] / 1e6:.0f} MB (generated in "
          f"{time.monotonic() - t0:.1f} s); injected: lost write {injected.get('lost-write')}, duplicate "
          f"{injected.get('duplicate')}", flush=True)
    trees = {"before": before, "now": HERE} if before else {"now": HERE}
    for turn in range(1, repeats + 1):
        for name, tree in trees.items():
            out = work / f"jepsen-{n_ops}-check-{name}"
            shutil.rmtree(out, ignore_errors=True)
            command = [sys.executable, "-m", "kspec.cli", "check", str(edn), "--master", MASTER, "--out", str(out)]
            for label in ("first check (import + checks)", "second check (import reused)"):
                load = load_average()
                seconds, tree_, code, _ = timed_command(command, tree)
                verdict = json.loads((out / "verdict.json").read_text())
                print(f"turn {turn}, {name}, {label}: {seconds:.1f} s end to end, {tree_.cpu_s():.0f} CPU s; peak RSS "
                      f"of the tree {tree_.peak_mb:.0f} MB ({tree_.peaks()}); exit {code}; checks "
                      f"{verdict['seconds']['total']:.1f} s; load average before {load}", flush=True)
            lost = [r for r in pq.read_table(out / "anomalies.parquet").to_pylist()
                    if r["anomaly"] in ("lost-write", "duplicate")]
            for r in lost:
                print(f"  {r['anomaly']}: {r['topic']}-{r['partition']} values {r['values']} offsets {r['offsets']}")
    if readers:
        bench_edn_readers(edn, work, injected)


def bench_edn_readers(edn: Path, work: Path, injected: dict) -> None:
    """The import alone, in a fresh Spark session, with each EDN reader; then each in one process."""
    import_s = {}
    for vectorised in (False, True):  # the import alone, each in a fresh Spark session: the general reader, then numpy
        label = "vectorised lines (numpy)" if vectorised else "every line through edn.py + HistoryRows (before)"
        command = [sys.executable, "-c", IMPORT_ONLY, str(edn), str(work / f"import-{vectorised}"), str(vectorised)]
        seconds, tree, code, stdout = timed_command(command)
        assert code == 0, f"the import failed (exit {code})"
        startup_s, import_s[vectorised] = json.loads(stdout)
        print(f"the import alone on {MASTER}, {label}: {import_s[vectorised]:.1f} s ({seconds:.1f} s with Spark "
              f"start-up {startup_s:.1f} s), peak RSS of the process tree {tree.peak_mb:.0f} MB", flush=True)
    print(f"  the import: {import_s[False] / import_s[True]:.1f}x faster vectorised", flush=True)
    if injected["bytes"] <= EDN_IN_PROCESS_BYTES_MAX:
        from spark_validation.jepsen import read_edn_rows
        cpu_s = {}
        for vectorised in (False, True):
            t1 = time.process_time()
            rows = read_edn_rows(edn, vectorised).num_rows
            cpu_s[vectorised] = time.process_time() - t1
        print(f"single-process read of the same file (spark_validation.jepsen.read_edn_rows, {rows:,} rows), CPU "
              f"seconds: {cpu_s[False]:.1f} s through edn.py + HistoryRows ({1e6 * cpu_s[False] / injected['ops']:.1f}"
              f" us a line), {cpu_s[True]:.1f} s vectorised ({1e6 * cpu_s[True] / injected['ops']:.1f} us a line), "
              f"{cpu_s[False] / cpu_s[True]:.1f}x; peak Python {python_peak_rss_mb():.0f} MB", flush=True)


EDN_IN_PROCESS_BYTES_MAX = 400 << 20  # the in-process read holds the whole table: not for 10M ops
IMPORT_ONLY = """
import sys, time
from pathlib import Path
from spark_validation.jepsen_import import import_edn
from spark_validation.session import spark_session
started = time.monotonic()
spark = spark_session("local[2]", "kspec-bench-import")
ready = time.monotonic()
import_edn(spark, Path(sys.argv[1]), Path(sys.argv[2]) / "history.parquet", vectorised=sys.argv[3] == "True")
print([ready - started, time.monotonic() - ready])
"""


# -- a broker with a systematic bug: many anomaly rows ---------------------------------------------
SKIPPED_OFFSET_EVERY = 2  # the buggy fetch leaves out records at offsets divisible by this


def write_skipping(n_ops: int, path: Path) -> None:
    """The synthetic history as a broker whose fetches leave out every record at an offset divisible by
    SKIPPED_OFFSET_EVERY, unless it is the first record a poll returns: most polls skip (int-poll-skip,
    poll-skip) and a tenth of the values are never read (lost-write), in every partition."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, HISTORY_SCHEMA, compression="zstd") as writer:
        for table in generate(n_ops):
            offset = table["offset"]
            remainder = pc.subtract(offset, pc.multiply(pc.divide(offset, SKIPPED_OFFSET_EVERY), SKIPPED_OFFSET_EVERY))
            skipped = pc.and_(pc.and_(pc.equal(table["mop_f"], "poll"), pc.greater(table["seq"], 0)),
                              pc.equal(remainder, 0))
            writer.write_table(table.filter(pc.invert(pc.fill_null(skipped, False))), row_group_size=ROW_GROUP_ROWS)


# the checks whose anomaly rows grow with the history: the per-partition ones, linearizability and the cycle
# search (the run-level checks read their ops into the driver themselves, a separate matter)
ANOMALOUS_CHECKS = (*PARTITION_CHECKS, "linearizability", "cycles")


def bench_anomalous(n_ops: int, work: Path) -> None:
    """ANOMALOUS_CHECKS on a history with a systematic bug (write_skipping), in a fresh process: time,
    anomaly rows found and listed, and the peak memory of the driver and the whole tree."""
    path = work / f"skipping-{n_ops}.parquet"
    if not path.exists():
        child = multiprocessing.get_context("spawn").Process(target=write_skipping, args=(n_ops, path))
        child.start()
        child.join()
        assert child.exitcode == 0, f"generating {n_ops} ops failed"
    load = load_average()
    startup_s, total_s, listed, verdict, (own_mb, jvm_mb, workers_mb), total_mb = spark_run(path, ANOMALOUS_CHECKS)
    found = sum(verdict["anomalies"].values())
    print(f"\n{n_ops:,} ops, fetches skipping every offset divisible by {SKIPPED_OFFSET_EVERY}: {total_s:.1f} s end "
          f"to end ({startup_s:.1f} s start-up), {found:,} anomaly rows found ({verdict['anomalies']}), {listed:,} "
          f"listed; peak memory {total_mb:.0f} MB in all (sampled every {SAMPLE_S} s); peaks of the parts: driver "
          f"Python {own_mb:.0f} MB, JVM {jvm_mb:.0f} MB, Python workers {workers_mb:.0f} MB; load average before "
          f"{load}", flush=True)


def bench_on_cluster(sizes: list[int], work: Path | None) -> None:
    """The histories are generated (or found in work) before the lock; each check holds it."""
    from benchmarks.checker_cluster import bench_cluster_check, report
    with tempfile.TemporaryDirectory(prefix="kspec-bench-cluster-") as temporary:
        work = work or Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        for n in sizes:
            history = generated(n, work)
            report(n, history, bench_cluster_check(history, work))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--cycle-ops", type=int, default=1_000_000)
    parser.add_argument("--wgl-only", action="store_true", help="only the verification vs WGL comparison")
    parser.add_argument("--edn-ops", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--edn-only", action="store_true", help="only `kspec check` on Jepsen history.edn files")
    parser.add_argument("--edn-repeats", type=int, default=2, help="turns of the Jepsen checks (the machine is shared)")
    parser.add_argument("--before", type=Path, help="a source tree of an earlier commit (git archive) to check the "
                        "same Jepsen files with, in turn with this one")
    parser.add_argument("--work", type=Path, help="keep the generated Jepsen files here (reused by the next run)")
    parser.add_argument("--edn-readers", action="store_true", help="also the import alone with each EDN reader")
    parser.add_argument("--anomalous-ops", type=int, nargs="+", help="only all checks on a history of this many "
                        "ops whose broker's fetches skip records (millions of anomaly rows), with the peak memory")
    parser.add_argument("--cluster-ops", type=int, nargs="+", help="only `kspec check --master spark://...` of "
                        "this many ops on a two-worker standalone cluster, with per-process peaks")
    args = parser.parse_args()
    if args.anomalous_ops:
        with tempfile.TemporaryDirectory(prefix="kspec-bench-anomalous-") as work:
            for n in args.anomalous_ops:
                bench_anomalous(n, args.work or Path(work))
        return
    if args.cluster_ops:
        bench_on_cluster(args.cluster_ops, args.work)
        return
    if args.wgl_only:
        bench_wgl()
        return
    if args.edn_only:
        with tempfile.TemporaryDirectory(prefix="kspec-bench-edn-") as work:
            for n in args.edn_ops:
                bench_edn(n, args.work or Path(work), args.edn_repeats, args.before, args.edn_readers)
        return
    with tempfile.TemporaryDirectory(prefix="kspec-bench-checker-") as work:
        end_to_end = {n: bench_all_checks(n, Path(work)) for n in args.ops}
        if len(end_to_end) > 1:
            (small, small_s), (large, large_s) = min(end_to_end.items()), max(end_to_end.items())
            print(f"\nscaling {small:,} -> {large:,} ops ({large / small:.0f}x): end to end {small_s:.1f} s -> "
                  f"{large_s:.1f} s ({large_s / small_s:.1f}x)", flush=True)
        bench_cycles(args.cycle_ops, Path(work))
        for n in args.edn_ops:
            bench_edn(n, Path(work), args.edn_repeats, args.before, args.edn_readers)
    bench_wgl()


if __name__ == "__main__":
    main()
