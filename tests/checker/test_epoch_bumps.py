"""IDM-1 and producer epoch bumps (spark_validation/epoch_bumps.py): a value stored twice by one
idempotent producer in two producer epochs is the client's resend after an epoch bump
(librdkafka issue 4953), allowed with each copy's producer id, epoch and sequence as evidence;
two copies under one epoch and sequence, or copies no segment file shows, stay a violation."""
from __future__ import annotations

import struct
from pathlib import Path

from spark_validation import epoch_bumps
from spark_validation.checker import run_checks
from spark_validation.options import RunOptions
from spec.history import Record, Send
from tests.checker.test_resends import TOPIC, stored
from tests.checker.test_run_checks import History

RECORDS_BYTES = 7  # stands for the records; the header reader never looks at them


def batch(base_offset: int, records: int, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    """One v2 record batch: its 61-byte header and a body of RECORDS_BYTES."""
    header_after_length_bytes = epoch_bumps.BATCH_HEADER.size - epoch_bumps.LOG_OVERHEAD_BYTES
    return struct.pack(">qiibIhiqqqhii", base_offset, header_after_length_bytes + RECORDS_BYTES, 0, 2, 0, 0,
                       records - 1, 0, 0, producer_id, producer_epoch, base_sequence, records) + bytes(RECORDS_BYTES)


def segments(run: Path, *batches: bytes, tail: bytes = b"") -> None:
    """The partition t0-0's only segment on each of two reference nodes."""
    for node in ("node-0", "node-1"):
        folder = run / node / f"{TOPIC}-0"
        folder.mkdir(parents=True)
        (folder / "00000000000000000000.log").write_bytes(b"".join(batches) + tail)


def judged(run: Path) -> dict:
    """Value 2 of t0-0 seen at offsets 1 and 3, as offsets.py reports it, judged with the history in run."""
    row = {"anomaly": "duplicate", "violation": True, "topic": TOPIC, "partition": 0, "values": [2],
           "offsets": [1, 3], "detail": "value 2 at offsets 1 and 3"}
    epoch_bumps.explain([row], run / "history.parquet")
    return row


def test_the_header_reader_finds_each_batch_and_stops_at_a_truncated_tail(tmp_path):
    segments(tmp_path, batch(0, 3, 8, 0, 0), batch(3, 1, 8, 1, 0), tail=batch(4, 1, 8, 1, 1)[:30])
    assert epoch_bumps.read_batches(tmp_path / "node-0" / f"{TOPIC}-0" / "00000000000000000000.log") == \
        [(0, 2, 8, 0, 0), (3, 3, 8, 1, 0)]
    assert epoch_bumps.writers(tmp_path / "history.parquet", TOPIC, 0, [1, 3]) == \
        [epoch_bumps.Writer(1, 8, 0, 1), epoch_bumps.Writer(3, 8, 1, 0)]


def test_two_copies_in_two_producer_epochs_are_an_allowed_duplicate_naming_each_writer(tmp_path):
    segments(tmp_path, batch(0, 3, 8, 0, 0), batch(3, 1, 8, 1, 0))
    row = judged(tmp_path)
    assert (row["anomaly"], row["violation"]) == ("duplicate-after-epoch-bump", False)
    assert "offset 1: producer id 8, epoch 0, sequence 1" in row["detail"]
    assert "offset 3: producer id 8, epoch 1, sequence 0" in row["detail"]
    assert "librdkafka issue 4953" in row["detail"]


def test_two_copies_under_one_epoch_and_sequence_are_the_brokers_duplicate(tmp_path):
    segments(tmp_path, batch(0, 3, 8, 0, 0), batch(3, 1, 8, 0, 1))
    row = judged(tmp_path)
    assert (row["anomaly"], row["violation"]) == ("duplicate", True)


def test_copies_from_two_producers_or_without_a_producer_id_stay_a_violation(tmp_path):
    segments(tmp_path / "two", batch(0, 3, 8, 0, 0), batch(3, 1, 9, 1, 0))
    segments(tmp_path / "none", batch(0, 3, -1, -1, -1), batch(3, 1, -1, -1, -1))
    for run in (tmp_path / "two", tmp_path / "none"):
        assert (judged(run)["anomaly"], judged(run)["violation"]) == ("duplicate", True)


def test_without_segment_files_a_foreign_brokers_duplicate_stays_a_violation(tmp_path):
    row = judged(tmp_path)
    assert (row["anomaly"], row["violation"], row["detail"]) == ("duplicate", True, "value 2 at offsets 1 and 3")


def test_a_lanes_run_finds_the_nodes_two_folders_above_its_history(tmp_path):
    segments(tmp_path, batch(0, 3, 8, 0, 0), batch(3, 1, 8, 1, 0))
    lane = tmp_path / "lanes" / "streams"
    lane.mkdir(parents=True)
    assert judged(lane)["anomaly"] == "duplicate-after-epoch-bump"


def test_run_checks_allows_the_epoch_bump_duplicate_and_the_order_rows_it_causes(spark, tmp_path):
    h = History()
    for value, offset in ((1, 0), (2, 1), (3, 2)):  # one send of each value; value 2 is stored again at 3
        h.op(0, "send", "ok", value * 10, value * 10 + 1, mops=[Send(Record(TOPIC, 0, 0, value, offset))])
    h.op(1, "poll", "ok", 100, 101, mops=[stored([(0, 1), (1, 2), (2, 3), (3, 2)])])
    segments(tmp_path, batch(0, 3, 8, 0, 0), batch(3, 1, 8, 1, 0))
    result = run_checks(spark, h.write(tmp_path), RunOptions())
    rows = result.anomalies.to_pylist()
    [row] = [r for r in rows if r["guarantee"] == "IDM-1"]
    # value 2's second copy sits after value 3: the order checks see it, and it follows from the resend
    assert {r["anomaly"] for r in rows if r["detail"].startswith("follows from a client's resend after a producer "
                                                                 "epoch bump")} == \
        {"int-poll-skip", "int-nonmonotonic-poll", "send-skip", "nonmonotonic-send"}
    assert "nonlinearizable" not in {r["anomaly"] for r in rows}
    assert (row["anomaly"], row["violation"], row["offsets"]) == ("duplicate-after-epoch-bump", False, [1, 3])
    assert result.verdict["guarantees"]["IDM-1"]["status"] == "held"
    assert result.valid, [r for r in result.anomalies.to_pylist() if r["violation"]]
