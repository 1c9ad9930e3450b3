"""The cycle search in bounded memory (spark_validation/cycle_search.py): the dependency graph
stays in Spark, cut at free cuts into chunks that executors search one at a time, and the
cycles found are the ones a search of the whole graph finds, in the same order."""
from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from spark_validation import cycle_search, cycles
from spark_validation.checker import EDGES
from spark_validation.cycle_search import chunk_ends, chunk_ends_of, op_blobs, window_diffs
from spark_validation.frames import HistoryFrames
from spark_validation.options import RunOptions
from spec.history import ops_table, write_history
from . import synth

CHUNK_OPS_SMALL = 2000  # several chunks in a history of a few thousand ops
ROWS_PER_SMALL_GROUP = 1000  # row groups of about 120 ops, far fewer than half a chunk


def test_a_backward_edge_covers_the_bins_it_spans_and_the_chunk_ends_in_the_first_free_one():
    # windows from 100 and 10_000 in bins of 10 ns: an edge from an op completed at 165 to one completed
    # at 95 spans the cuts 95..164, the bins 0..6 of the first window (100..169); a forward edge spans none
    src_ns, dst_ns = np.array([165, 10_050]), np.array([95, 10_100])
    starts = np.array([100, 10_000])
    diff = window_diffs(src_ns, dst_ns, starts, 10)
    assert np.cumsum(diff, axis=1)[0, :8].tolist() == [1] * 7 + [0]
    assert not diff[1].any()
    assert chunk_ends(diff, starts, 10).tolist() == [170, 10_000]


def test_the_driver_gets_chunk_ends_and_each_chunk_finds_the_cycles_of_the_whole_graph(spark, tmp_path):
    b = synth.Builder()
    synth.clean_workload(b, ops=4000)
    synth.scenarios(b)
    b.final_polls()
    path = write_history(ops_table(b.ops), tmp_path / "history.parquet")
    ends, chunked, counted, whole, whole_counted = _chunked_and_whole(spark, path, len(b.ops))
    assert len(ends) > 1
    # the injected cycles come after the clean workload: found by a chunk other than the first
    assert sorted(r["anomaly"] for r in chunked) == sorted(e.anomaly for e in b.expected if e.topic is None)
    completed_ns = {op.index: op.time_ns for op in b.ops}
    assert min(completed_ns[i] for r in chunked for i in r["ops"]) > ends[0]
    assert chunked == whole and counted == whole_counted


def test_row_groups_smaller_than_a_chunk_still_give_cuts_and_the_same_cycles(spark, tmp_path):
    # a Jepsen import writes parts of about 50,000 ops, a tenth of a chunk: their samples add up to
    # candidate cuts over the whole history, where cuts taken inside each row group found none
    b = synth.Builder()
    synth.clean_workload(b, ops=4000)
    synth.scenarios(b)
    b.final_polls()
    path = tmp_path / "history.parquet"
    pq.write_table(ops_table(b.ops), path, row_group_size=ROWS_PER_SMALL_GROUP)
    assert pq.ParquetFile(path).num_row_groups > 4
    ends, chunked, counted, whole, whole_counted = _chunked_and_whole(spark, path, len(b.ops))
    assert len(ends) > 1
    assert chunked == whole and counted == whole_counted


def _chunked_and_whole(spark, path, op_count: int):
    """The history's chunk ends, and its cycles searched in small chunks and as one whole graph."""
    h = HistoryFrames(spark, str(path), 4)
    results = h.per_partition({EDGES: cycles.dependency_edges}, h.proven_ops())
    edges = results.where(results.check == EDGES)  # a DataFrame: the edges are never collected
    ops = op_blobs(spark, path, CHUNK_OPS_SMALL)
    ends = chunk_ends_of(edges, ops)
    ops.unpersist()
    chunked, counted = cycle_search.search(spark, edges, path, RunOptions(), CHUNK_OPS_SMALL)
    whole, whole_counted = cycle_search.search(spark, edges, path, RunOptions(), op_count * 4)
    h.unpersist()
    results.unpersist()
    return ends, chunked, counted, whole, whole_counted
