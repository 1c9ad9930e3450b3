"""A history with more anomalies than are listed: the verdict counts every one, anomalies.parquet
lists the first rows_per_kind_max of each kind (by topic, partition, then the check's order) and
the verdict says how many it left out; nothing else changes (judgement.py). Consume counts keep
their distribution exact while a partition gives at most DUP_COUNTS_MAX duplicates."""
from __future__ import annotations

import numpy as np

from spark_validation import consume_counts
from spark_validation.checker import run_checks
from spark_validation.frames import _by_partition, encode_mops
from spark_validation.options import RunOptions
from spark_validation.partition_log import PartitionLog
from spec.history import ops_table, write_history

from . import synth

ROWS_PER_KIND = 3
TOPICS, VALUES = 3, 40
CHECKS = ("duplicate", "lost-write", "unseen", "send-order", "linearizability")


def test_a_capped_listing_counts_every_anomaly_and_lists_the_first_of_each_kind(spark, tmp_path):
    b = synth.systematic_history(TOPICS, VALUES)
    path = write_history(ops_table(b.ops), tmp_path / "history.parquet")
    whole = run_checks(spark, path, RunOptions(), CHECKS)
    capped = run_checks(spark, path, RunOptions(), CHECKS, rows_per_kind_max=ROWS_PER_KIND)

    stored_twice = sum(len(log) - len(set(log)) for log in b.logs.values())
    assert whole.verdict["anomalies"]["duplicate"] == capped.verdict["anomalies"]["duplicate"] == stored_twice
    assert capped.verdict["anomalies"]["nonlinearizable"] == TOPICS
    for key in ("valid", "anomalies", "violations", "guarantees"):
        assert capped.verdict[key] == whole.verdict[key], key
    assert "unlisted" not in whole.verdict

    rows = whole.anomalies.to_pylist()
    kinds = {r["anomaly"] for r in rows}
    first = [r for r in rows if sum(s["anomaly"] == r["anomaly"] for s in rows[:rows.index(r) + 1]) <= ROWS_PER_KIND]
    assert capped.anomalies.to_pylist() == first  # the first rows of each kind, in the same order
    assert capped.verdict["unlisted"] == {k: whole.verdict["anomalies"][k] - ROWS_PER_KIND for k in sorted(kinds)
                                          if whole.verdict["anomalies"][k] > ROWS_PER_KIND}
    assert {"duplicate", "lost-write"} <= set(capped.verdict["unlisted"])
    assert [r["topic"] for r in first if r["anomaly"] == "duplicate"] == ["sys-0"] * ROWS_PER_KIND


def test_consume_counts_list_the_lowest_duplicates_of_a_partition_and_count_them_all(monkeypatch):
    b = synth.Builder()
    b.op(0, "send", [b.append("dup") for _ in range(6)])
    for _ in range(3):  # process 1 reads every value three times
        b.op(1, "poll", [b.read("dup")])
    [(topic, partition, mops)] = list(_by_partition(encode_mops(ops_table(b.ops))))
    p = PartitionLog(topic, partition, mops, np.zeros(0, np.int64), subscribed=(np.array([1]), np.array([-1])))
    monkeypatch.setattr(consume_counts, "DUP_COUNTS_MAX", 2)
    rows = consume_counts.consume_counts(p).to_pylist()
    assert [(r["count"], r["triples"]) for r in rows if r["value"] is None] == [(3, 6)]
    assert [(r["value"], r["count"]) for r in rows if r["value"] is not None] == [(1, 3), (2, 3)]
