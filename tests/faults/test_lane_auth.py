"""The auth lane of a lanes run (faults/lane_auth.py) against a 3-node reference cluster with the
SASL listener and authorizer a lanes run gives it, and its check (spark_validation/auth.py):
every probe refused as Kafka refuses it, so AUTH-1..3 held; with an authorization bug switched
on, the guarantee it breaks violated, with the probes as evidence. The full lanes run with the
auth lane among the others is tests/faults/test_faults_lanes.py (soak)."""
from __future__ import annotations

import json
import time

import pyarrow.parquet as pq
import pytest

from faults.lane_auth import AUTH_F, AuthWorkload, add_sasl_listener
from faults.recorder import Recorder
from faults.security import secure_reference_target
from faults.targets import reference_target
from faults.workload import WorkloadOptions
from spark_validation.auth import check_auth, is_auth_history

ROUNDS_MIN = 1          # every probe answered once (a round of probes visits one node)
ROUNDS_TIMEOUT_S = 40.0


def run_lane(network, tmp_path, overrides: dict[str, str], secure: bool = False) -> tuple[object, dict]:
    if secure:  # `kspec faults run --secure`: the nodes' own SASL_SSL listener, a SASL_SSL controller listener
        target = secure_reference_target(3, tmp_path, "netns", network, overrides=overrides)
    else:
        target = reference_target(3, tmp_path, "netns", network=network, overrides=overrides)
    add_sasl_listener(target)  # a secured run's nodes are left as they are
    try:
        target.start()
        target.wait_until_serving()
        lane_dir = tmp_path / "lane"
        lane_dir.mkdir()
        recorder = Recorder(lane_dir)
        workload = AuthWorkload(target, recorder, WorkloadOptions(key_base=48, key_count=4, rate_hz=40.0,
                                                                  replication_factor=3,
                                                                  client_properties=target.client_properties), seed=1)
        workload.create_topics()
        workload.start()
        deadline = time.monotonic() + ROUNDS_TIMEOUT_S
        while recorder.completions["fail"] + recorder.completions["ok"] < ROUNDS_MIN * len(workload.probes):
            assert time.monotonic() < deadline, dict(recorder.completions)
            time.sleep(0.2)
        workload.stop()
        assert not workload.failures, workload.failures
        assert workload.final_reads(20.0)
        recorder.close()
    finally:
        target.stop()
    assert is_auth_history(lane_dir)
    return check_auth(lane_dir)


def test_every_probe_is_refused_so_auth_1_to_3_hold(network, tmp_path):
    anomalies, verdict = run_lane(network, tmp_path, {})
    assert anomalies.num_rows == 0, anomalies.to_pylist()
    assert {g: e["status"] for g, e in verdict["guarantees"].items()} == \
        {"AUTH-1": "held", "AUTH-2": "held", "AUTH-3": "held"}
    probes = verdict["auth"]["probes"]
    assert all(probes[g]["refused"] > 0 and probes[g]["served"] == 0 for g in probes), probes
    final = verdict["auth"]["final"]
    assert final["topics_exist"] == {"t24": True, "t25": True, "t24-created-by-intruder": False}
    assert not any(final["control_batches"].values()) and not any(final["log_start_offsets"].values())


@pytest.mark.parametrize("switch, guarantee_id, anomaly", [
    ("kspec.bug.acl.skip.produce", "AUTH-2", "auth-denied-stored"),
    ("kspec.bug.follower.fetch.without.cluster.action", "AUTH-3", "auth-cluster-action-served"),
])
def test_an_authorization_bug_switch_is_caught(network, tmp_path, switch, guarantee_id, anomaly):
    anomalies, verdict = run_lane(network, tmp_path, {switch: "true"})
    assert verdict["guarantees"][guarantee_id]["status"] == "violated", verdict["guarantees"]
    assert anomaly in verdict["guarantees"][guarantee_id]["anomalies"]
    rows = [r for r in anomalies.to_pylist() if r["anomaly"] == anomaly]
    history = (tmp_path / "lane" / "history.parquet")
    assert rows and rows[0]["ops"] and history.exists()  # the probes that show it, by op index
    others = {g: e["status"] for g, e in verdict["guarantees"].items() if g != guarantee_id}
    assert set(others.values()) == {"held"}, others
    assert json.loads((tmp_path / "lane" / "auth.json").read_text())["listener"] == "SASL_PLAINTEXT"


def test_a_secure_run_is_probed_on_its_own_listeners(network, tmp_path):
    anomalies, verdict = run_lane(network, tmp_path, {}, secure=True)
    assert anomalies.num_rows == 0, anomalies.to_pylist()
    assert set(e["status"] for e in verdict["guarantees"].values()) == {"held"} and len(verdict["guarantees"]) == 3
    assert verdict["auth"]["listener"] == "SASL_SSL"
    history = pq.read_table(tmp_path / "lane" / "history.parquet").to_pylist()
    listeners = {json.loads(r["extra"])["listener"] for r in history
                 if r["f"] == AUTH_F and r["type"] == "fail" and "controller" in r["extra"]}
    assert listeners == {"CONTROLLER"}, "a client's controller RPCs go to the controller listener, and are refused"
