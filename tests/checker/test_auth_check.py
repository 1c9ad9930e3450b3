"""The auth lane's check (spark_validation/auth.py) on histories written with the run's recorder:
which probe outcomes and final reads make AUTH-1..3 held, violated or not checked, and the ops
each finding names. The lane against a live cluster is tests/faults/test_lane_auth.py."""
from __future__ import annotations

import json

from faults.lane_auth import AUTH_F, AUTH_FILE, FINAL_F
from faults.recorder import Recorder
from spark_validation.auth import check_auth, is_auth_history
from spec.history import Poll, Record, Send

A, B, C = "t24", "t25", "t24-created-by-intruder"
CLEAN = {"topics_exist": {A: True, B: True, C: False}, "log_start_offsets": {f"{A}-0": 0, f"{B}-0": 0},
         "control_batches": {f"{A}-0": [], f"{B}-0": []}, "high_watermarks": {f"{A}-0": 1, f"{B}-0": 0}}


class Lane:
    """A lane folder written as faults/lane_auth.py writes it."""

    def __init__(self, path) -> None:
        self.path = path
        self.recorder = Recorder(path)
        (path / AUTH_FILE).write_text(json.dumps({"listener": "SASL_PLAINTEXT"}))

    def probe(self, guarantee_id: str, probe: str, type_: str, answer: str, value: int | None = None,
              topic: str = A) -> int:
        extra = {"guarantee": guarantee_id, "probe": probe, "node": 0, "topic": topic, "partition": 0}
        mops = (Send(Record(topic, 0, None, value)),) if value is not None else ()
        invocation = self.recorder.invoke(0, AUTH_F, mops=mops, extra=extra)
        outcome = {"fail": "refused", "ok": "served", "info": "unknown"}[type_]
        return self.recorder.complete(invocation, type_, extra={**extra, "outcome": outcome, "answer": answer}).index

    def every_guarantee_refused(self) -> None:
        self.probe("AUTH-1", "request-before-handshake", "fail", "connection closed unanswered")
        self.probe("AUTH-2", "produce-denied", "fail", "TOPIC_AUTHORIZATION_FAILED (29)", value=7)
        self.probe("AUTH-2", "create-topic-denied", "fail", "TOPIC_AUTHORIZATION_FAILED (29)", topic=C)
        self.probe("AUTH-3", "write-txn-markers", "fail", "CLUSTER_AUTHORIZATION_FAILED (31)", topic=B)

    def final(self, read: tuple[Record, ...] = (), state: dict = CLEAN) -> None:
        self.recorder.complete(self.recorder.invoke(1, "poll"), "ok", mops=(Poll(read),))
        self.recorder.complete(self.recorder.invoke(1, FINAL_F), "ok", extra=state)

    def check(self):
        self.recorder.close()
        assert is_auth_history(self.path)
        anomalies, verdict = check_auth(self.path)
        return anomalies.to_pylist(), verdict


def statuses(verdict: dict) -> dict:
    return {g: e["status"] for g, e in verdict["guarantees"].items()}


def test_refusals_and_an_unchanged_cluster_hold_auth_1_to_3(tmp_path):
    lane = Lane(tmp_path)
    lane.every_guarantee_refused()
    lane.probe("AUTH-2", "produce-denied", "info", "ConnectionRefusedError")  # a node down proves nothing
    lane.final((Record(A, 0, None, 1, 0),))
    rows, verdict = lane.check()
    assert rows == [] and verdict["valid"]
    assert statuses(verdict) == {"AUTH-1": "held", "AUTH-2": "held", "AUTH-3": "held"}
    assert verdict["auth"]["probes"]["AUTH-2"] == {"refused": 2, "served": 0, "unknown": 1}


def test_a_request_served_before_authentication_violates_auth_1(tmp_path):
    lane = Lane(tmp_path)
    lane.every_guarantee_refused()
    served = lane.probe("AUTH-1", "request-before-handshake", "ok", "answered with a 120-byte response")
    lane.final()
    rows, verdict = lane.check()
    assert statuses(verdict)["AUTH-1"] == "violated" and not verdict["valid"]
    assert [(r["anomaly"], r["ops"]) for r in rows] == [("auth-served-unauthenticated", [served])]


def test_a_refused_produce_found_in_the_final_reads_violates_auth_2(tmp_path):
    lane = Lane(tmp_path)
    lane.every_guarantee_refused()
    refused = lane.probe("AUTH-2", "produce-denied", "fail", "TOPIC_AUTHORIZATION_FAILED (29)", value=99, topic=B)
    lane.final((Record(B, 0, None, 99, 0),))
    rows, verdict = lane.check()
    assert statuses(verdict) == {"AUTH-1": "held", "AUTH-2": "violated", "AUTH-3": "held"}
    assert [(r["anomaly"], r["ops"], r["values"], r["offsets"]) for r in rows] == \
        [("auth-denied-stored", [refused], [99], [0])]


def test_a_topic_made_by_a_refused_create_and_a_marker_nobody_wrote_are_found(tmp_path):
    lane = Lane(tmp_path)
    lane.every_guarantee_refused()
    lane.final(state={**CLEAN, "topics_exist": {A: True, B: True, C: True},
                      "control_batches": {f"{A}-0": [], f"{B}-0": [0]}})
    rows, verdict = lane.check()
    assert statuses(verdict) == {"AUTH-1": "held", "AUTH-2": "violated", "AUTH-3": "violated"}
    assert {r["anomaly"]: r["detail"].split(": ", 1)[1] for r in rows} == {
        "auth-denied-stored": f"topic {C}, whose creation was refused, exists",
        "auth-marker-stored": f"control batches in {B}-0, e.g. at {B}-0 offsets [0]"}


def test_without_final_reads_nothing_is_held(tmp_path):
    lane = Lane(tmp_path)
    lane.every_guarantee_refused()
    rows, verdict = lane.check()
    assert verdict["guarantees"] == {} and set(verdict["unchecked"]) == {"AUTH-1", "AUTH-2", "AUTH-3"}
    assert verdict["unchecked"]["AUTH-1"] == "the final reads did not complete"
