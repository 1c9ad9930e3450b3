"""KIP-507 on two workers with connect.protocol=sessioned: the leader writes a session key to
the config topic, the workers' internal requests (task configs sent to the leader) are signed
with it, and the leader answers an unsigned internal request 400 and a wrongly signed one 403."""
from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

from connect.signing import SessionKey, signature_headers
from connect_helpers import (ConnectProcess, append_lines, distributed_properties, read_topic, running_task_worker,
                             wait_for)


def post(url: str, body: bytes, headers: dict) -> tuple[int, dict | None]:
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, None
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def test_sessioned_workers_sign_internal_requests_and_the_leader_checks_them(broker, workers, tmp_path):
    cluster = "signed"
    for index in (1, 2):
        workers.append(ConnectProcess("distributed", distributed_properties(tmp_path, broker, index, cluster,
                                                                            connect_protocol="sessioned"),
                                      log_path=str(tmp_path / f"worker{index}.log")).start())
    for i in range(2):  # one lands on each worker: the follower's task configs reach the leader signed
        source = tmp_path / f"in{i}.txt"
        append_lines(source, ["x"])
        wait_for(lambda: (lambda r: r[0] != 409 and r)(workers[1].rest("PUT", f"/connectors/signed-{i}/config", {
            "connector.class": "FileStreamSource", "file": str(source), "topic": cluster})), what="created")
    owners = wait_for(lambda: (lambda o: all(o) and o)([running_task_worker(workers[0], f"signed-{i}")
                                                        for i in range(2)]), what="both tasks RUNNING")
    assert sorted(owners) == sorted(w.worker_id for w in workers)

    record = json.loads(dict(read_topic(broker, f"{cluster}-configs"))[b"session-key"])
    assert record["algorithm"] == "HmacSHA256" and len(base64.b64decode(record["key"])) == 32
    key = SessionKey.from_record(record)
    body = json.dumps([c["config"] for c in workers[0].rest("GET", "/connectors/signed-0/tasks")[1]]).encode()
    path = "/connectors/signed-0/tasks?forward=true"
    for worker in workers:
        assert post(worker.url + path, body, {}) == (400, {"error_code": 400,
                                                          "message": "Internal request missing required signature"})
        wrong = signature_headers(SessionKey(b"\0" * 32, "HmacSHA256", 0), "HmacSHA256", body)
        assert post(worker.url + path, body, wrong)[0] == 403
    # signed with the session key: the leader takes it, the follower sends it back to the leader (409)
    statuses = sorted(post(w.url + path, body, signature_headers(key, "HmacSHA256", body))[0] for w in workers)
    assert statuses == [204, 409]
