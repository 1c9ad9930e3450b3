"""Dependency cycles: G0, G1c, G-single and G2, plain and closed by real-time order.

Spark builds the dependency edges between ops (research/jepsen.md section 4):
- ww: the writer of each value to the writer of the next value in the partition's version order
- wr: the writer of a value to each op that read it
- rw: a transaction that read a partition up to value v to the writer of the value after v
  (the read did not see that write; Jepsen leaves these out, so it finds no G-single/G2).
  Only transactions: a plain poll may stop anywhere, so its highest read says nothing
  about what it did not see.
The driver adds rt edges (op A completed ok before op B was invoked, as a transitive
reduction: a sweep that keeps a frontier of latest completions), finds strongly connected
components with scipy, and in each component searches for a short cycle of each kind:
one edge of the kind the anomaly needs, closed by a breadth-first path back through the
edge kinds it allows. A cycle is named by its edges: two or more rw is G2, one is
G-single, else any wr is G1c, else G0; an rt edge adds "-realtime". Each component
reports each name once, with every edge explained.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from spark_validation.frames import TP, HistoryFrames
from spark_validation.options import RunOptions

WW, WR, RW, RT = 0, 1, 2, 3
KIND_NAMES = ("ww", "wr", "rw", "rt")
# (the edge kind a cycle must use, the edge kinds the path back may use), most telling first:
# a pure write-read cycle is searched before one that leans on inferred write-write order.
SEARCHES = (
    (WW, (WW,)), (WR, (WR,)), (WR, (WW, WR)), (RW, (WW, WR)), (RW, (WW, WR, RW)),
    (WW, (WW, RT)), (WR, (WR, RT)), (WR, (WW, WR, RT)), (RW, (WW, WR, RT)), (RW, (WW, WR, RW, RT)),
)
EDGE_COLUMNS = ["src", "dst", "kind", *TP, "src_value", "dst_value"]


def dependency_edges(h: HistoryFrames) -> DataFrame:
    """ww, wr and rw edges between op indices, each with the values that justify it."""
    writer = h.writer_of
    slots = h.by_index.withColumn("prev", F.lag("value").over(Window.partitionBy(*TP).orderBy("idx")))
    ww = (slots.where(F.col("prev").isNotNull())
          .join(writer.withColumnRenamed("value", "prev").withColumnRenamed("writer", "src"), [*TP, "prev"])
          .join(writer.withColumnRenamed("writer", "dst"), [*TP, "value"])
          .select("src", "dst", F.lit(WW).alias("kind"), *TP, F.col("prev").alias("src_value"),
                  F.col("value").alias("dst_value")))
    wr = (h.reads.select(F.col("index").alias("dst"), *TP, "value")
          .join(writer.withColumnRenamed("writer", "src"), [*TP, "value"])
          .groupBy("src", "dst").agg(F.first("topic").alias("topic"), F.first("partition").alias("partition"),
                                     F.first("value").alias("value"))
          .select("src", "dst", F.lit(WR).alias("kind"), *TP, F.col("value").alias("src_value"),
                  F.col("value").alias("dst_value")))
    highest = (h.reads.where((F.col("f") == "txn") & F.col("idx").isNotNull())
               .groupBy("index", *TP).agg(F.max(F.struct("idx", "value")).alias("h")))
    following = h.by_index.select(*TP, (F.col("idx") - 1).alias("read_idx"), F.col("value").alias("next"))
    rw = (highest.join(following, (highest.topic == following.topic) & (highest.partition == following.partition)
                       & (F.col("h.idx") == F.col("read_idx")))
          .drop(following.topic).drop(following.partition)
          .join(writer.withColumnRenamed("value", "next").withColumnRenamed("writer", "dst"), [*TP, "next"])
          .select(F.col("index").alias("src"), "dst", F.lit(RW).alias("kind"), *TP,
                  F.col("h.value").alias("src_value"), F.col("next").alias("dst_value")))
    return ww.unionByName(wr).unionByName(rw).where(F.col("src") != F.col("dst")).select(*EDGE_COLUMNS)


def realtime_edges(ops: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """rt edges (src, dst) as op indices: a transitive reduction of ok-completion-before-invocation."""
    index = ops.column("index").to_numpy()
    invoke_ns = ops.column("invoke_time_ns").to_numpy(zero_copy_only=False)
    complete_ns = ops.column("time_ns").to_numpy()
    ok = np.asarray(ops.column("type").to_pylist(), dtype=object) == "ok"
    times = np.concatenate([invoke_ns, complete_ns[ok]])
    kinds = np.concatenate([np.zeros(len(index), np.int8), np.ones(int(ok.sum()), np.int8)])
    who = np.concatenate([index, index[ok]])
    order = np.lexsort((kinds, times))  # invocations first at equal times: "before" is strict
    frontier: set[int] = set()
    predecessors: dict[int, list[int]] = {}
    src: list[int] = []
    dst: list[int] = []
    for kind, op in zip(kinds[order].tolist(), who[order].tolist()):
        if kind == 0:
            predecessors[op] = list(frontier)
            src.extend(predecessors[op])
            dst.extend([op] * len(frontier))
        else:
            frontier.difference_update(predecessors.pop(op))
            frontier.add(op)
    return np.asarray(src, np.int64), np.asarray(dst, np.int64)


@dataclass(frozen=True)
class Cycle:
    name: str
    steps: tuple[dict, ...]  # edges in cycle order, each with src, dst, kind and evidence

    @property
    def ops(self) -> list[int]:
        return [step["src"] for step in self.steps]

    def kinds(self) -> set[int]:
        return {step["kind"] for step in self.steps}

    def explain(self) -> str:
        return "; ".join(_explain_step(step) for step in self.steps)


def _explain_step(s: dict) -> str:
    where = f"{s['topic']}-{s['partition']}"
    if s["kind"] == WW:
        return f"op {s['src']} -ww-> op {s['dst']}: on {where} value {s['dst_value']} follows {s['src_value']}"
    if s["kind"] == WR:
        return f"op {s['src']} -wr-> op {s['dst']}: op {s['dst']} read value {s['dst_value']} of {where}"
    if s["kind"] == RW:
        return (f"op {s['src']} -rw-> op {s['dst']}: op {s['src']} read {where} up to value {s['src_value']}, "
                f"missing the next value {s['dst_value']}")
    return f"op {s['src']} -rt-> op {s['dst']}: op {s['src']} completed before op {s['dst']} began"


def cycle_name(kinds: list[int]) -> str:
    rw = kinds.count(RW)
    base = "G2" if rw >= 2 else "G-single" if rw == 1 else "G1c" if WR in kinds else "G0"
    return base + ("-realtime" if RT in kinds else "")


def find_cycles(edges: pa.Table, ops: pa.Table) -> list[Cycle]:
    """One cycle per strongly connected component and anomaly name."""
    edges = edges.sort_by([("src", "ascending"), ("dst", "ascending"), ("kind", "ascending")])  # Spark's order varies
    rt_src, rt_dst = realtime_edges(ops.sort_by("index"))
    src = np.concatenate([edges.column("src").to_numpy(), rt_src])
    dst = np.concatenate([edges.column("dst").to_numpy(), rt_dst])
    kind = np.concatenate([edges.column("kind").to_numpy().astype(np.int8), np.full(len(rt_src), RT, np.int8)])
    evidence = {c: edges.column(c).to_pylist() for c in ("topic", "partition", "src_value", "dst_value")}
    vertices, endpoints = np.unique(np.concatenate([src, dst]), return_inverse=True)
    u, v = endpoints[:len(src)], endpoints[len(src):]
    n = len(vertices)
    component = _strong_components(n, u, v, np.ones(len(u), bool))
    cycles: list[Cycle] = []
    seen: set[tuple[int, str]] = set()
    for required, allowed in SEARCHES:
        mask = np.isin(kind, allowed)
        labels = _strong_components(n, u, v, mask)
        sizes = np.bincount(labels, minlength=n)
        candidates = np.flatnonzero((kind == required) & (labels[u] == labels[v]) & (sizes[labels[u]] > 1))
        if len(candidates) == 0:
            continue
        _, first = np.unique(labels[u[candidates]], return_index=True)
        adjacency = _adjacency(n, u, v, mask)
        for e in candidates[first].tolist():
            path = _shortest_path(adjacency, v, labels, int(v[e]), int(u[e]))
            steps = [e] + path
            name = cycle_name([int(kind[i]) for i in steps])
            plain = name.removesuffix("-realtime")
            if (component[u[e]], name) in seen or (component[u[e]], plain) in seen:
                continue  # a realtime variant only where the plain cycle was not found
            seen.add((component[u[e]], name))
            cycles.append(Cycle(name, tuple(_step(i, vertices, u, v, kind, evidence) for i in steps)))
    return cycles


def _step(i: int, vertices, u, v, kind, evidence) -> dict:
    step = {"src": int(vertices[u[i]]), "dst": int(vertices[v[i]]), "kind": int(kind[i])}
    for column, values in evidence.items():
        step[column] = values[i] if i < len(values) else None
    return step


def _strong_components(n: int, u: np.ndarray, v: np.ndarray, mask: np.ndarray) -> np.ndarray:
    graph = csr_matrix((np.ones(int(mask.sum()), np.int8), (u[mask], v[mask])), shape=(n, n))
    return connected_components(graph, directed=True, connection="strong")[1]


def _adjacency(n: int, u: np.ndarray, v: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR adjacency over the masked edges: (row pointers, edge ids sorted by source)."""
    ids = np.flatnonzero(mask)
    ids = ids[np.argsort(u[ids], kind="stable")]
    pointers = np.searchsorted(u[ids], np.arange(n + 1))
    return pointers, ids


def _shortest_path(adjacency, v: np.ndarray, labels: np.ndarray, start: int, goal: int) -> list[int]:
    """Edge ids of a shortest path start -> goal inside start's component (which holds one)."""
    pointers, ids = adjacency
    label = labels[start]
    via: dict[int, tuple[int, int]] = {start: (-1, -1)}  # vertex -> (previous vertex, edge id)
    queue = deque([start])
    while goal not in via:
        x = queue.popleft()
        for e in ids[pointers[x]:pointers[x + 1]].tolist():
            y = int(v[e])
            if y not in via and labels[y] == label:
                via[y] = (x, e)
                queue.append(y)
    path = []
    x = goal
    while x != start:
        x, e = via[x]
        path.append(e)
    return path[::-1]


def cycle_rows(cycles: list[Cycle], options: RunOptions) -> list[dict]:
    """Cycles as anomaly rows (without the guarantee column)."""
    rows = []
    for c in cycles:
        kinds = c.kinds()
        violation = c.name.startswith("G1c") and (WW not in kinds or not options.ww_deps)
        rows.append({"anomaly": c.name, "violation": violation, "topic": None, "partition": None, "process": None,
                     "ops": c.ops, "values": [s["dst_value"] for s in c.steps if s["dst_value"] is not None],
                     "offsets": None, "delta": None, "detail": c.explain()})
    return rows
