"""The per-partition core without Spark: rt edges equal the frontier sweep they replace, and the
checks do not depend on the order rows arrive in."""
from __future__ import annotations

import random

import numpy as np
import pyarrow as pa

from spark_validation.checker import PARTITION_CHECKS
from spark_validation.cycles import dependency_edges, realtime_edges
from spark_validation.frames import _by_partition, encode_mops
from spark_validation.options import RunOptions
from spark_validation.partition_log import PartitionLog
from spec.history import Poll
from spec.history import ops_table

from . import synth

HISTORIES = 200
OPS_MAX = 30


def frontier_sweep(ops: list[tuple[int, str, int, int]]) -> set[tuple[int, int]]:
    """rt edges by a sweep over invocations and ok completions in time order (invocations first
    at equal times), keeping the frontier of ok ops not yet followed by another."""
    events = sorted([(invoke, 0, index) for index, _, invoke, _ in ops]
                    + [(complete, 1, index) for index, type_, _, complete in ops if type_ == "ok"])
    frontier: set[int] = set()
    predecessors: dict[int, set[int]] = {}
    edges = set()
    for _, kind, index in events:
        if kind == 0:
            predecessors[index] = set(frontier)
            edges |= {(p, index) for p in frontier}
        else:
            frontier -= predecessors.pop(index)
            frontier.add(index)
    return edges


def test_realtime_edges_equal_the_frontier_sweep():
    rng = random.Random(3)
    sizes = []
    for _ in range(HISTORIES):
        ops = []
        for index in range(rng.randint(1, OPS_MAX)):
            invoke = rng.randint(0, 40)  # a small time grid: many equal times
            ops.append((2 * index + 1, rng.choice(["ok", "ok", "ok", "info", "fail"]), invoke,
                        invoke + rng.randint(1, 12)))
        table = pa.table({"index": [o[0] for o in ops], "type": [o[1] for o in ops],
                          "invoke_time_ns": [o[2] for o in ops], "time_ns": [o[3] for o in ops]})
        src, dst = realtime_edges(table)
        index = table.column("index").to_numpy()
        found = set(zip(index[src].tolist(), index[dst].tolist()))
        assert len(found) == len(src), "no edge twice"
        assert found == frontier_sweep(ops), ops
        sizes.append(len(found))
    assert max(sizes) > OPS_MAX  # histories with many edges are exercised


def _partitions(builder: synth.Builder):
    return list(_by_partition(encode_mops(ops_table(builder.ops))))


def test_checks_do_not_depend_on_row_order():
    rng = np.random.default_rng(5)
    compared = 0
    for topic, partition, mops in _partitions(synth.injected_history()):
        shuffled = mops.take(rng.permutation(mops.num_rows))
        in_order = PartitionLog(topic, partition, mops, np.zeros(0, np.int64))
        out_of_order = PartitionLog(topic, partition, shuffled, np.zeros(0, np.int64))
        for name, check in PARTITION_CHECKS.items():
            rows = check(in_order, RunOptions())
            assert rows == check(out_of_order, RunOptions()), (topic, name)
            compared += len(rows)
        assert dependency_edges(in_order).equals(dependency_edges(out_of_order))
    assert compared > 20


def test_a_partition_whose_log_is_empty_is_checked_without_findings():
    """A transaction whose send was aborted or left unknown, and nothing else: no offset is known,
    the log is empty, and no check finds (or trips over) anything there."""
    builder = synth.Builder()
    builder.assign(2, ["t9"])
    builder.op(0, "txn", [builder.sent("t9")], "fail")
    builder.op(1, "txn", [builder.sent("t9")], "info")
    builder.op(2, "poll", [Poll()])  # assigned, and read nothing
    [(topic, partition, mops)] = _partitions(builder)
    log = PartitionLog(topic, partition, mops, np.zeros(0, np.int64))
    assert len(log.log_offset) == 0
    for name, check in PARTITION_CHECKS.items():
        assert check(log, RunOptions()) == [], name
