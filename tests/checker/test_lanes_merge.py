"""The merged verdict of a lanes run (spark_validation/lanes.py): a guarantee is violated when any
lane violated it, held when some lane checked it and none violated it, and not checked only when no
lane checked it, saying why."""
from __future__ import annotations

from spark_validation.lanes import FAULT_RUN_UNCHECKED, merge
from spec.catalogue import CATALOGUE


def verdict(held=(), violated=None, unchecked=None, ops=10, lag_s=0.5) -> dict:
    violated = violated or {}
    guarantees = {g: {"status": "held", "anomalies": {}} for g in held}
    guarantees.update({g: {"status": "violated", "anomalies": anomalies} for g, anomalies in violated.items()})
    counts = {a: n for anomalies in violated.values() for a, n in anomalies.items()}
    return {"valid": not violated, "ops": ops, "rows": ops * 2, "checks": ["lost-write", "replicas"],
            "anomalies": counts, "violations": counts, "guarantees": guarantees, "unchecked": unchecked or {},
            "seconds": {"total": 1.0}, "realtime-lag": {"worst": {"time_s": 1.0, "lag_s": lag_s}, "points": 3},
            "consume-counts": {"distribution": {"1": ops}, "dup-counts": {}}}


def test_a_violation_in_any_lane_violates_the_guarantee_and_names_the_lane():
    merged = merge({"main": verdict(held=["REP-1", "DUR-1"]),
                    "compact": verdict(violated={"REP-1": {"replica-divergence": 2}}, held=["DUR-1"])},
                   {"main": ["REP-1"], "compact": ["RET-1"]}, {})
    assert merged["guarantees"]["REP-1"] == {"status": "violated", "anomalies": {"replica-divergence": 2},
                                             "lanes": ["main", "compact"], "violated_in": ["compact"]}
    assert merged["guarantees"]["DUR-1"]["status"] == "held"
    assert merged["valid"] is False and merged["violations"] == {"replica-divergence": 2}
    assert merged["lanes"]["compact"]["violated"] == ["REP-1"]


def test_an_unchecked_lane_does_not_hide_another_lanes_finding():
    """The acks1 lane cannot check DUR-1 (acks=1); the main lane's DUR-1 stands."""
    merged = merge({"main": verdict(held=["DUR-1"], unchecked={"DUR-2": "the producers used acks=all"}),
                    "acks1": verdict(held=["DUR-2"], unchecked={"DUR-1": "the producers used acks=1"})},
                   {"main": ["DUR-1"], "acks1": ["DUR-2"]}, {})
    assert merged["guarantees"]["DUR-1"]["status"] == "held" and merged["guarantees"]["DUR-1"]["lanes"] == ["main"]
    assert merged["guarantees"]["DUR-2"]["lanes"] == ["acks1"]
    assert "DUR-1" not in merged["unchecked"] and "DUR-2" not in merged["unchecked"]
    assert merged["valid"] is True and merged["ops"] == 20


def test_what_no_lane_checked_is_unchecked_with_the_reason():
    merged = merge({"main": verdict(held=["ORD-1"], unchecked={"PRO-1": "the run had no malformed nemesis"})},
                   {"main": ["ORD-1", "PRO-1"], "streams": ["EOS-1", "EOS-2"], "mirror": ["MIR-1", "MIR-2", "MIR-3"]},
                   {"streams": "no Python with quixstreams", "mirror": "its clients connect PLAINTEXT"})
    assert merged["unchecked"]["EOS-1"] == "the streams lane was skipped: no Python with quixstreams"
    assert merged["unchecked"]["PRO-1"] == "main lane: the run had no malformed nemesis"
    assert merged["unchecked"]["AUTH-1"] == "no lane checks it"  # the auth lane planned for it is not in this run
    assert merged["unchecked"]["MIR-3"] == "the mirror lane was skipped: its clients connect PLAINTEXT"
    assert set(merged["guarantees"]) | set(merged["unchecked"]) == set(CATALOGUE), "every guarantee has a status"
    assert merged["lanes"]["streams"] == {"skipped": "no Python with quixstreams"}


def test_the_informational_outputs_are_merged_across_lanes():
    merged = merge({"main": verdict(lag_s=0.5), "groups": verdict(lag_s=2.0, ops=5)}, {}, {})
    assert merged["realtime-lag"]["worst"] == {"time_s": 1.0, "lag_s": 2.0, "lane": "groups"}
    assert merged["realtime-lag"]["points"] == 6
    assert merged["consume-counts"]["distribution"] == {"1": 15}


def test_rows_a_lane_counted_but_did_not_list_stay_counted_in_the_merged_verdict():
    capped = verdict(violated={"ORD-1": {"poll-skip": 12_000}}) | {"unlisted": {"poll-skip": 2_000}}
    merged = merge({"main": capped, "groups": verdict() | {"unlisted": {}}}, {}, {})
    assert merged["unlisted"] == {"poll-skip": 2_000} and merged["anomalies"] == {"poll-skip": 12_000}
    assert "unlisted" not in merge({"main": verdict()}, {}, {}), "nothing left out: no unlisted entry"
