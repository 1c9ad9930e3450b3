"""The checker finds exactly the anomalies injected into a synthetic history, with their evidence,
and nothing on a clean one."""
from __future__ import annotations

from collections import Counter

import pytest

from spark_validation.anomalies import ANOMALY_KINDS

from . import synth

SCENARIOS = synth.injected_history().expected


def _identity(row) -> tuple:
    """What tells one anomaly row from another: its name, its topic or (for cycles) its ops."""
    cycle = row["topic"] is None
    return row["anomaly"], row["topic"], bool(row["violation"]), frozenset(row["ops"]) if cycle else None


def _expected_identity(e: synth.Expected) -> tuple:
    return e.anomaly, e.topic, e.violation, frozenset(e.ops) if e.topic is None else None


def test_clean_history_has_no_anomalies(clean):
    _, result = clean
    assert result.anomalies.num_rows == 0, result.anomalies.to_pylist()[:5]
    assert result.valid
    assert result.verdict["ops"] > 200
    assert {e["status"] for e in result.verdict["guarantees"].values()} == {"held"}


def test_injected_history_has_exactly_the_injected_anomalies(injected):
    b, result = injected
    found = Counter(_identity(r) for r in result.anomalies.to_pylist())
    assert found == Counter(_expected_identity(e) for e in b.expected)


@pytest.mark.parametrize("expected", SCENARIOS, ids=[f"{e.anomaly}:{e.topic or 'cycle'}" for e in SCENARIOS])
def test_each_anomaly_carries_its_evidence(injected, expected):
    _, result = injected
    rows = [r for r in result.anomalies.to_pylist() if _identity(r) == _expected_identity(expected)]
    assert rows, f"{expected.anomaly} on {expected.topic} not reported"
    assert any(_evidence_matches(r, expected) for r in rows), rows
    kind = ANOMALY_KINDS[expected.anomaly]
    assert all(r["guarantee"] == kind.guarantee_id and r["detail"] for r in rows)


def _evidence_matches(row, e: synth.Expected) -> bool:
    if e.topic is None:  # a cycle: its ops in cycle order, each edge explained
        return set(row["ops"]) == set(e.ops) and row["detail"].count("->") == len(row["ops"])
    return ((e.ops is None or tuple(row["ops"]) == e.ops)
            and (e.values is None or tuple(row["values"]) == e.values)
            and (e.offsets is None or tuple(row["offsets"]) == e.offsets))


def test_verdict_names_the_violated_guarantees(injected):
    b, result = injected
    verdict = result.verdict
    assert not result.valid
    violated = {g for g, entry in verdict["guarantees"].items() if entry["status"] == "violated"}
    assert violated == {ANOMALY_KINDS[e.anomaly].guarantee_id for e in b.expected if e.violation}
    assert set(verdict["violations"]) == {e.anomaly for e in b.expected if e.violation}
    allowed = {e.anomaly for e in b.expected if not e.violation}
    assert allowed == {"int-send-skip", "G0", "G0-realtime", "G1c", "G-single", "G2"}
    assert "ORD-3" not in violated or "poll-skip" in verdict["violations"]
