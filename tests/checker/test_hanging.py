"""A hanging transaction (TXN-1): the final reads stuck at a last stable offset that a write of an
aborted transaction holds for good. The committed records behind it are hidden, not lost: the
checker names the hanging transaction under TXN-1 and does not count them under DUR-1."""
from __future__ import annotations

from spark_validation import hanging
from spark_validation.checker import run_checks
from spark_validation.options import RunOptions
from spec.history import Poll, Record, Send, ops_table, write_history

from .test_run_checks import History

STUCK_AT, HIGH_WATERMARK = 2, 6


def hanging_history(stuck_at_record: int | None = STUCK_AT) -> tuple[History, int]:
    """t0-0: value 1 committed at offset 0 (marker at 1); value 2's transaction aborted by its client
    after the write timed out, the write landing late at offset 2, after the abort marker; value 3
    committed at offset 3 (marker 4) by another producer. The final reads read value 1 and stick at
    the LSO 2; the stuck-partitions op shows value 2 there (or, stuck_at_record None, no record).
    The op that sent value 2."""
    h = History()
    h.op(0, "txn", "ok", 10, 20, mops=[Send(Record("t0", 0, 0, 1, 0))])
    late = h.op(1, "txn", "fail", 30, 1_030, mops=[Send(Record("t0", 0, 0, 2, None))],
                extra={"error": "Local: Message timed out", "stage": "txn"})
    h.op(2, "txn", "ok", 2_000, 2_010, mops=[Send(Record("t0", 0, 0, 3, 3))])
    h.op(9, "assign", "ok", 3_000, 3_001, assignment=[("t0", 0)], extra={"seek-to-beginning": True})
    h.op(9, "poll", "ok", 3_010, 3_020, mops=[Poll((Record("t0", 0, 0, 1, 0),))])
    records = [[STUCK_AT, 2], [3, 3]] if stuck_at_record is not None else []
    h.op(9, "stuck-partitions", "ok", 33_000, 33_100,
         extra={"partitions": [["t0", 0, STUCK_AT, STUCK_AT, HIGH_WATERMARK, records]]})
    return h, late


def test_an_aborted_write_holding_the_last_stable_offset_is_a_hanging_transaction(tmp_path):
    h, late = hanging_history()
    [row] = hanging.check(h.write(tmp_path), RunOptions())
    assert (row["anomaly"], row["violation"], row["values"], row["offsets"], row["ops"][1]) == (
        "hanging-transaction", True, [2], [STUCK_AT, HIGH_WATERMARK], late)
    assert f"sent by op {late} (txn, aborted)" in row["detail"]


def test_final_reads_that_finished_leave_nothing_to_judge(tmp_path):
    h = History()
    h.op(0, "txn", "ok", 10, 20, mops=[Send(Record("t0", 0, 0, 1, 0))])
    assert hanging.check(h.write(tmp_path), RunOptions()) is None


def test_committed_records_behind_a_hanging_transaction_are_hidden_not_lost(spark, tmp_path):
    h, _ = hanging_history()
    path = write_history(ops_table(h.ops), tmp_path / "history.parquet")
    result = run_checks(spark, path, RunOptions(), checks=("lost-write", "unseen", "G1a", "hanging"))
    rows = {r["anomaly"]: r for r in result.anomalies.to_pylist()}
    assert rows["hanging-transaction"]["violation"] and rows["hanging-transaction"]["guarantee"] == "TXN-1"
    assert not rows["unseen"]["violation"] and rows["unseen"]["values"] == [3]
    assert rows["unseen"]["detail"].startswith("committed but hidden behind the hanging transaction at offset 2")
    assert result.verdict["guarantees"]["TXN-1"]["status"] == "violated"
    assert result.verdict["guarantees"]["DUR-1"]["status"] == "held"
