"""The cycle search in bounded memory (spark_validation/cycle_search.py): the dependency graph
stays in Spark, cut at free cuts into chunks that executors search one at a time, and the
cycles found are the ones a search of the whole graph finds, in the same order."""
from __future__ import annotations

import numpy as np

from spark_validation import cycle_search, cycles
from spark_validation.checker import EDGES
from spark_validation.cycle_search import WINDOW_CUTS, chunk_starts, chunk_starts_of, op_blobs, window_diffs
from spark_validation.frames import HistoryFrames
from spark_validation.options import RunOptions
from spec.history import ops_table, write_history
from . import synth

CHUNK_POSITIONS_SMALL = WINDOW_CUTS + 1024  # several chunks in a history of a few thousand ops


def test_a_backward_edge_covers_the_cuts_it_spans_and_the_chunk_starts_past_it():
    # positions 0..3 * P: windows start at cuts P and 2P; edge 5 -> 3 spans cuts 3, 4 (no window),
    # edge P + 7 -> P - 2 spans cuts P - 2 .. P + 6: the first window's first free cut is P + 7
    p = CHUNK_POSITIONS_SMALL
    src, dst = np.array([5, p + 7, 2 * p + 1]), np.array([3, p - 2, 2 * p + 3])  # the last one goes forward
    diff = window_diffs(src, dst, 2, p)
    assert np.cumsum(diff, axis=1)[0, :8].tolist() == [1] * 7 + [0]
    assert not diff[1].any()
    assert chunk_starts(diff, p).tolist() == [0, p + 8, 2 * p + 1]


def test_the_driver_gets_chunk_starts_and_each_chunk_finds_the_cycles_of_the_whole_graph(spark, tmp_path):
    b = synth.Builder()
    synth.clean_workload(b, ops=4000)
    synth.scenarios(b)
    b.final_polls()
    path = write_history(ops_table(b.ops), tmp_path / "history.parquet")
    h = HistoryFrames(spark, str(path), 4)
    results = h.per_partition({EDGES: cycles.dependency_edges}, h.proven_ops())
    edges = results.where(results.check == EDGES)  # a DataFrame: the edges are never collected
    starts = chunk_starts_of(edges, op_blobs(spark, path), CHUNK_POSITIONS_SMALL)
    chunked, counted = cycle_search.search(spark, edges, path, RunOptions(), CHUNK_POSITIONS_SMALL)
    whole, whole_counted = cycle_search.search(spark, edges, path, RunOptions(), len(b.ops) * 4)
    h.unpersist()
    results.unpersist()
    assert len(starts) > 1
    # the injected cycles come after the clean workload: found by a chunk other than the first
    assert sorted(r["anomaly"] for r in chunked) == sorted(e.anomaly for e in b.expected if e.topic is None)
    assert min(min(r["ops"]) for r in chunked) >= starts[1]
    assert chunked == whole and counted == whole_counted
