"""Dependency cycles: G0, G1c (TXN-2), G-single and G2, plain and closed by real-time order.

Each topic-partition contributes its dependency edges between ops (research/jepsen.md
section 4), computed beside the other per-partition checks:
- ww: the writer of each value to the writer of the next value in the partition's version order
- wr: the writer of a value to each op that read it
- rw: a transaction that read a partition up to value v to the writer of the value after v
  (the read did not see that write; Jepsen leaves these out, so it finds no G-single/G2).
  Only transactions: a plain poll may stop anywhere, so its highest read says nothing
  about what it did not see.
Each piece of the history that no cycle crosses (cycle_search.py) adds rt edges (op A
completed ok before op B was invoked, as a transitive
reduction: B's predecessors are the ok ops completed before B began and not followed by
another op that did), keeps only the edges inside strongly connected components (scipy),
and in each component searches for a short cycle of each kind: one edge of the kind the
anomaly needs, closed by a breadth-first path back through the edge kinds it allows. A
cycle is named by its edges: two or more rw is G2, one is G-single, else any wr is G1c,
else G0; an rt edge adds "-realtime". Each component reports each name once, with every
edge explained.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from spark_validation.options import RunOptions
from spark_validation.partition_log import NO_IDX, TXN, PartitionLog, distinct_rows, group_ends, group_starts

WW, WR, RW, RT = 0, 1, 2, 3
KIND_NAMES = ("ww", "wr", "rw", "rt")
# (the edge kind a cycle must use, the edge kinds the path back may use), most telling first:
# a pure write-read cycle is searched before one that leans on inferred write-write order.
SEARCHES = (
    (WW, (WW,)), (WR, (WR,)), (WR, (WW, WR)), (RW, (WW, WR)), (RW, (WW, WR, RW)),
    (WW, (WW, RT)), (WR, (WR, RT)), (WR, (WW, WR, RT)), (RW, (WW, WR, RT)), (RW, (WW, WR, RW, RT)),
)
EDGE_SCHEMA = pa.schema([("src", pa.int64()), ("dst", pa.int64()), ("kind", pa.int8()),
                         ("topic", pa.dictionary(pa.int32(), pa.string())),
                         ("partition", pa.int32()), ("src_value", pa.int64()), ("dst_value", pa.int64()),
                         ("src_ns", pa.int64()), ("dst_ns", pa.int64())])  # the ends' completion times


def dependency_edges(p: PartitionLog) -> pa.Table:
    """ww, wr and rw edges of one partition between op indices, with the values that justify them
    and the completion times of both ends."""
    src, dst, kind, src_value, dst_value, src_ns, dst_ns = [], [], [], [], [], [], []

    def add(k: int, s_row: np.ndarray, d_row: np.ndarray, sv: np.ndarray, dv: np.ndarray) -> None:
        s, d = p.index[s_row], p.index[d_row]
        keep = s != d
        for out, column in ((src, s), (dst, d), (src_value, sv), (dst_value, dv), (src_ns, p.time_ns[s_row]),
                            (dst_ns, p.time_ns[d_row])):
            out.append(column[keep])
        kind.append(np.full(int(keep.sum()), k, np.int8))

    prev_row, prev_found = p.writer_of(p.bi_value[:-1])
    next_row, next_found = p.writer_of(p.bi_value[1:])
    ww = prev_found & next_found
    add(WW, prev_row[ww], next_row[ww], p.bi_value[:-1][ww], p.bi_value[1:][ww])

    reads = np.flatnonzero(p.is_read)
    row, found = p.writer_of(p.value[reads])
    reads, row = reads[found], row[found]
    first = distinct_rows(p.index[row], p.index[reads], p.value[reads])  # the lowest value per (src, dst)
    first = first[group_starts(p.index[row][first], p.index[reads][first])]
    add(WR, row[first], reads[first], p.value[reads[first]], p.value[reads[first]])

    txn_reads = np.flatnonzero(p.is_read & (p.f == TXN) & (p.idx != NO_IDX))
    order = txn_reads[np.lexsort((p.value[txn_reads], p.idx[txn_reads], p.index[txn_reads]))]
    highest = order[group_ends(group_starts(p.index[order]), len(order)) - 1]
    highest = highest[p.idx[highest] + 1 < len(p.bi_value)]
    following = p.bi_value[p.idx[highest] + 1]
    row, found = p.writer_of(following)
    add(RW, highest[found], row[found], p.value[highest[found]], following[found])

    n = sum(map(len, src))
    return pa.table({"src": np.concatenate(src), "dst": np.concatenate(dst), "kind": np.concatenate(kind),
                     "topic": pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), [p.topic]), "partition": np.full(n, p.partition, np.int32),
                     "src_value": np.concatenate(src_value), "dst_value": np.concatenate(dst_value),
                     "src_ns": np.concatenate(src_ns), "dst_ns": np.concatenate(dst_ns)},
                    schema=EDGE_SCHEMA)


def realtime_edges(ops: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """rt edges (src, dst) as positions in ops: a transitive reduction of ok-completion-before-invocation.

    X precedes B when X completed ok before B was invoked, and no ok op Y was invoked after
    X completed and completed before B was invoked (then X -> Y -> B). So X precedes every
    B invoked in (complete(X), expiry(X)], where expiry(X) is the earliest completion of an
    ok op invoked after X completed. Both ends grow with complete(X), so each B's
    predecessors are one run of the ok ops sorted by completion.
    """
    assert ops.column("invoke_time_ns").null_count == 0, "every op needs its invocation time"
    assert ops.num_rows < np.iinfo(np.int32).max
    invoke_ns, complete_ns = ops.column("invoke_time_ns").to_numpy(), ops.column("time_ns").to_numpy()
    ok = np.flatnonzero(pc.equal(ops.column("type"), "ok").to_numpy(zero_copy_only=False)).astype(np.int32)
    ok = ok[np.argsort(complete_ns[ok], kind="stable")]  # by completion
    ok_complete = complete_ns[ok]
    # the earliest completion among ok ops invoked strictly after each time, by suffix minimum
    by_invoke = np.argsort(invoke_ns[ok], kind="stable")
    ok_invoke = invoke_ns[ok][by_invoke]
    suffix_min = np.append(ok_complete[by_invoke], np.iinfo(np.int64).max)
    del by_invoke
    np.minimum.accumulate(suffix_min[::-1], out=suffix_min[::-1])
    expiry = suffix_min[np.searchsorted(ok_invoke, ok_complete, "right")]
    del suffix_min, ok_invoke
    hi = np.searchsorted(ok_complete, invoke_ns, "left").astype(np.int32)  # completed before B's invocation
    lo = np.searchsorted(expiry, invoke_ns, "left").astype(np.int32)       # not expired: expiry >= B's invocation
    del expiry, ok_complete
    counts = np.maximum(hi - lo, 0)
    del hi
    dst = np.repeat(np.arange(len(invoke_ns), dtype=np.int32), counts)
    at = np.repeat(lo - (np.cumsum(counts, dtype=np.int64) - counts).astype(np.int32), counts)  # B's run, in place
    at += np.arange(len(at), dtype=np.int32)
    return ok[at], dst


@dataclass(frozen=True)
class Cycle:
    name: str
    steps: tuple[dict, ...]  # edges in cycle order, each with src, dst, kind and evidence
    order: tuple = ()  # where a search of the whole graph reports it: (search, then its first edge's place)

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
    """One cycle per strongly connected component and anomaly name.

    edges are dependency edges (EDGE_SCHEMA) between the ops; ops is each client op's completion
    (index, type, invoke_time_ns, time_ns) in index order, every op between the edges' ends
    included (the rt edges are built from them). A cycle's order places it in the list a search
    of a larger graph holding this one reports (cycle_search.py searches a history in pieces):
    by search, then by its first edge, dependency edges (in _in_order's order) before rt edges
    (by their destination, then by the source's completion).
    """
    op_index = ops.column("index").to_numpy()
    complete_ns = ops.column("time_ns").to_numpy()
    assert (op_index[1:] > op_index[:-1]).all(), "ops in index order"
    edges = edges.set_column(3, "topic", pc.cast(edges["topic"], pa.string()))
    dep_u, dep_v = (_vertices(op_index, edges[c].to_numpy()) for c in ("src", "dst"))
    rt_u, rt_v = realtime_edges(ops)
    del ops  # op_index and complete_ns keep the columns still needed
    component = _strong_components(len(op_index), np.concatenate([dep_u, rt_u]), np.concatenate([dep_v, rt_v]))
    # every cycle lies inside one component: the edges between components are never needed
    dependency = _in_order(edges.filter(pa.array(component[dep_u] == component[dep_v])))
    del dep_u, dep_v, edges
    rt = component[rt_u] == component[rt_v]
    src = np.concatenate([dependency.column("src").to_numpy(), op_index[rt_u[rt]]])
    dst = np.concatenate([dependency.column("dst").to_numpy(), op_index[rt_v[rt]]])
    rt_src_ns = complete_ns[rt_u[rt]]
    kind = np.concatenate([dependency.column("kind").to_numpy().astype(np.int8), np.full(int(rt.sum()), RT, np.int8)])
    vertices, endpoints = np.unique(np.concatenate([src, dst]), return_inverse=True)
    u, v = endpoints[:len(src)], endpoints[len(src):]
    n = len(vertices)
    component = component[_vertices(op_index, vertices)]
    evidence = {c: dependency.column(c).to_pylist() for c in ("topic", "partition", "src_value", "dst_value")}
    cycles: list[Cycle] = []
    seen: set[tuple[int, str]] = set()
    for search, (required, allowed) in enumerate(SEARCHES):
        mask = np.isin(kind, allowed)
        labels = _strong_components(n, u[mask], v[mask])
        sizes = np.bincount(labels, minlength=n)
        candidates = np.flatnonzero((kind == required) & (labels[u] == labels[v]) & (sizes[labels[u]] > 1))
        if len(candidates) == 0:
            continue
        _, first = np.unique(labels[u[candidates]], return_index=True)
        adjacency = _adjacency(n, u, v, mask)
        for e in np.sort(candidates[first]).tolist():  # in edge order: independent of component numbering
            path = _shortest_path(adjacency, v, labels, int(v[e]), int(u[e]))
            steps = [e] + path
            name = cycle_name([int(kind[i]) for i in steps])
            plain = name.removesuffix("-realtime")
            if (component[u[e]], name) in seen or (component[u[e]], plain) in seen:
                continue  # a realtime variant only where the plain cycle was not found
            seen.add((component[u[e]], name))
            if kind[e] == RT:
                place = (True, int(dst[e]), int(rt_src_ns[e - len(dependency)]), int(src[e]), "", 0, 0, 0)
            else:
                place = (False, int(src[e]), int(dst[e]), int(kind[e]), evidence["topic"][e], evidence["partition"][e],
                         evidence["src_value"][e], evidence["dst_value"][e])
            cycles.append(Cycle(name, tuple(_step(i, vertices[u[i]], vertices[v[i]], int(kind[i]), evidence)
                                            for i in steps), (search, *place)))
    return cycles


def _vertices(op_index: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Positions in op_index (sorted) of op indices that must all be there."""
    at = np.searchsorted(op_index, indices).astype(np.int32)
    assert (at < len(op_index)).all() and (op_index[np.minimum(at, len(op_index) - 1)] == indices).all(), \
        "an edge names an op the history lacks"
    return at


def _in_order(edges: pa.Table) -> pa.Table:
    """Edges in a fixed order, so the cycles reported do not depend on the order partitions
    arrive in, with one wr edge per (writer, reader) pair: the one of the lowest partition."""
    edges = edges.sort_by([(c, "ascending") for c in ("src", "dst", "kind", "topic", "partition", "src_value",
                                                      "dst_value")])
    src, dst, kind = (edges.column(c).to_numpy() for c in ("src", "dst", "kind"))
    repeat = np.zeros(len(src), bool)
    repeat[1:] = (src[1:] == src[:-1]) & (dst[1:] == dst[:-1]) & (kind[1:] == kind[:-1]) & (kind[1:] == WR)
    return edges.filter(pa.array(~repeat)).combine_chunks()


def _step(i: int, src: int, dst: int, kind: int, evidence: dict[str, list]) -> dict:
    step = {"src": int(src), "dst": int(dst), "kind": kind}
    for column, values in evidence.items():
        step[column] = values[i] if i < len(values) else None
    return step


def _strong_components(n: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    graph = csr_matrix((np.ones(len(u), np.int8), (u, v)), shape=(n, n))
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
