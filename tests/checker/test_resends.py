"""IDM-1 and librdkafka's message timeouts (spark_validation/resends.py): a value stored twice
because the application sent it again after its client reported the first send timed out
(_MSG_TIMED_OUT, librdkafka issue 4953) is the client's duplicate, allowed with both sends as
evidence; a value stored twice that no timeout explains stays a violation."""
from __future__ import annotations

from spark_validation.checker import run_checks
from spark_validation.options import RunOptions
from spec.history import Poll, Record, Send
from tests.checker.test_run_checks import History

TOPIC = "t0"


def stored(pairs: list[tuple[int, int]]) -> Poll:
    """A poll of (offset, value) pairs of t0-0."""
    return Poll(tuple(Record(TOPIC, 0, 0, value, offset) for offset, value in pairs))


def send(h: History, process: int, start_ms: int, end_ms: int, value: int, offset: int | None, type: str = "ok",
         extra: dict | None = None) -> int:
    return h.op(process, "send", type, start_ms, end_ms, mops=[Send(Record(TOPIC, 0, 0, value, offset))], extra=extra)


def timed_out_then_resent(h: History) -> tuple[int, int]:
    """Value 2's first send reported timed out yet stored at offset 1, sent again and stored at 3."""
    send(h, 0, 0, 1, 1, 0)
    timed_out = send(h, 0, 2, 120_002, 2, None, type="info", extra={
        "error": "KafkaError{code=_MSG_TIMED_OUT,val=-192,str=\"Local: Message timed out\"}",
        "timed_out": [[TOPIC, 0, 2]]})
    send(h, 1, 3, 4, 3, 2)
    resent = send(h, 0, 120_010, 120_011, 2, 3)
    return timed_out, resent


def checked(spark, h: History, tmp_path):
    result = run_checks(spark, h.write(tmp_path), RunOptions())
    return result, [r for r in result.anomalies.to_pylist() if r["guarantee"] == "IDM-1"]


def test_a_value_resent_after_its_client_reported_a_timeout_is_an_allowed_duplicate_naming_both_sends(
        spark, tmp_path):
    h = History()
    timed_out, resent = timed_out_then_resent(h)
    h.op(5, "poll", "ok", 120_100, 120_101, mops=[stored([(0, 1), (1, 2), (2, 3), (3, 2)])])
    result, [row] = checked(spark, h, tmp_path)
    assert (row["anomaly"], row["violation"], row["values"], row["offsets"], row["ops"]) == \
        ("duplicate-after-timeout", False, [2], [1, 3], [timed_out, resent])
    assert "_MSG_TIMED_OUT" in row["detail"] and f"op {resent} sent it again" in row["detail"]
    assert result.verdict["guarantees"]["IDM-1"]["status"] == "held"
    assert "ORD-1" not in result.verdict["violations"] and result.valid, result.anomalies.to_pylist()


def test_a_duplicate_no_timeout_explains_stays_a_violation_beside_an_allowed_one(spark, tmp_path):
    h = History()
    timed_out_then_resent(h)
    sent_once = send(h, 1, 120_020, 120_021, 4, 4)
    h.op(5, "poll", "ok", 120_100, 120_101, mops=[stored([(0, 1), (1, 2), (2, 3), (3, 2), (4, 4), (5, 4)])])
    result, rows = checked(spark, h, tmp_path)
    by_value = {r["values"][0]: r for r in rows}
    assert (by_value[2]["anomaly"], by_value[2]["violation"]) == ("duplicate-after-timeout", False)
    assert (by_value[4]["anomaly"], by_value[4]["violation"], by_value[4]["offsets"]) == ("duplicate", True, [4, 5])
    assert sent_once in by_value[4]["ops"]
    assert result.verdict["guarantees"]["IDM-1"] == {"status": "violated", "anomalies": {"duplicate": 1}}


def test_a_resend_invoked_before_the_timeout_was_reported_explains_nothing(spark, tmp_path):
    h = History()
    send(h, 0, 0, 1, 1, 0)
    send(h, 0, 2, 120_002, 2, None, type="info", extra={"error": "timed out", "timed_out": [[TOPIC, 0, 2]]})
    send(h, 1, 100, 101, 2, 2)  # another process sent value 2 while the first send was still pending
    h.op(5, "poll", "ok", 120_100, 120_101, mops=[stored([(0, 1), (1, 2), (2, 2)])])
    _, [row] = checked(spark, h, tmp_path)
    assert (row["anomaly"], row["violation"]) == ("duplicate", True)
