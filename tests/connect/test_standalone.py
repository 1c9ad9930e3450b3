"""`kspec connect standalone` against a real broker: FileStream source -> topic -> FileStream
sink, source offsets that survive a restart, and the REST API's lifecycle with Connect's
status codes and error bodies."""
from __future__ import annotations

import os

import pytest

from connect_helpers import ConnectProcess, append_lines, lines_of, wait_for, write_properties

PLUGINS_DIR = os.path.join(os.path.dirname(__file__), "plugins")


def worker_properties(tmp_path, broker) -> str:
    return write_properties(tmp_path / "worker.properties", {
        "bootstrap.servers": broker.bootstrap,
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "offset.storage.file.filename": tmp_path / "connect.offsets",
        "offset.flush.interval.ms": "500",
        "listeners": "http://127.0.0.1:0",
        "plugin.path": PLUGINS_DIR,
    })


def test_file_source_to_topic_to_file_sink_and_offsets_survive_a_restart(broker, workers, tmp_path):
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    append_lines(source_file, [f"first-{i}" for i in range(50)])
    source = write_properties(tmp_path / "source.properties", {
        "name": "local-file-source", "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
        "tasks.max": "1", "file": source_file, "topic": "standalone-lines", "batch.size": "7"})
    sink = write_properties(tmp_path / "sink.properties", {
        "name": "local-file-sink", "connector.class": "FileStreamSink", "tasks.max": "1",
        "file": sink_file, "topics": "standalone-lines"})
    worker = ConnectProcess("standalone", worker_properties(tmp_path, broker), source, sink,
                            log_path=str(tmp_path / "worker.log")).start()
    workers.append(worker)
    wait_for(lambda: len(lines_of(sink_file)) >= 50, what="the first 50 lines in the sink file")
    assert worker.stop() == 0  # a clean stop commits the offsets of everything acked

    append_lines(source_file, [f"second-{i}" for i in range(20)])
    worker = ConnectProcess("standalone", worker_properties(tmp_path, broker), source, sink,
                            log_path=str(tmp_path / "worker.log")).start()
    workers.append(worker)
    wait_for(lambda: len(lines_of(sink_file)) >= 70, what="70 lines in the sink file")
    # the restarted source resumed at its committed position: nothing read twice
    expected = [f"first-{i}" for i in range(50)] + [f"second-{i}" for i in range(20)]
    assert lines_of(sink_file) == expected


def test_rest_lifecycle_with_connects_status_codes(broker, workers, tmp_path):
    worker = ConnectProcess("standalone", worker_properties(tmp_path, broker),
                            log_path=str(tmp_path / "worker.log")).start()
    workers.append(worker)
    status, root = worker.rest("GET", "/")
    assert status == 200 and set(root) == {"version", "commit", "kafka_cluster_id"} and root["kafka_cluster_id"]
    status, plugins = worker.rest("GET", "/connector-plugins")
    assert status == 200
    assert {"class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "type": "sink",
            "version": "0.1.0"} in plugins
    assert any(p["class"].endswith("ExplodingSourceConnector") for p in plugins)  # found through plugin.path

    status, definitions = worker.rest("GET", "/connector-plugins/FileStreamSource/config")
    assert status == 200 and {"topic", "batch.size", "file", "tasks.max"} <= {d["name"] for d in definitions}
    assert worker.rest("GET", "/connector-plugins/NoSuchConnector/config")[0] == 404

    # validate names the offending field
    status, info = worker.rest("PUT", "/connector-plugins/FileStreamSinkConnector/config/validate",
                               {"connector.class": "FileStreamSinkConnector", "name": "x", "tasks.max": "two"})
    assert status == 200 and info["error_count"] == 2
    errors = {c["value"]["name"]: c["value"]["errors"] for c in info["configs"] if c["value"]["errors"]}
    assert set(errors) == {"tasks.max", "topics"}

    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    sink_config = {"connector.class": "FileStreamSink", "file": str(sink_file), "topics": "rest-lines"}
    status, body = worker.rest("POST", "/connectors", {"name": "sink", "config": {**sink_config, "tasks.max": "0"}})
    assert status == 400 and body["error_code"] == 400 and "tasks.max" in body["message"]
    status, created = worker.rest("POST", "/connectors", {"name": "sink", "config": sink_config})
    assert status == 201 and created["name"] == "sink" and created["type"] == "sink"
    assert worker.rest("POST", "/connectors", {"name": "sink", "config": sink_config})[0] == 409
    status, created = worker.rest("PUT", "/connectors/source/config", {
        "connector.class": "FileStreamSource", "file": str(source_file), "topic": "rest-lines"})
    assert status == 201 and created["tasks"] == [{"connector": "source", "task": 0}]
    assert worker.rest("GET", "/connectors")[1] == ["sink", "source"]

    def states(name):
        body = worker.rest("GET", f"/connectors/{name}/status")[1]
        return body["connector"]["state"], [t["state"] for t in body["tasks"]]

    wait_for(lambda: states("sink") == ("RUNNING", ["RUNNING"]) and states("source") == ("RUNNING", ["RUNNING"]),
             what="both connectors RUNNING")
    append_lines(source_file, ["a", "b"])
    wait_for(lambda: lines_of(sink_file) == ["a", "b"], what="two lines through")
    status, task = worker.rest("GET", "/connectors/source/tasks/0/status")
    assert status == 200 and task == {"id": 0, "state": "RUNNING", "worker_id": worker.worker_id}
    assert worker.rest("GET", "/connectors/source/tasks/9/status")[0] == 404
    status, info = worker.rest("GET", "/connectors/source")
    assert status == 200 and info["type"] == "source" and info["config"]["file"] == str(source_file)

    assert worker.rest("PUT", "/connectors/sink/pause")[0] == 202
    wait_for(lambda: states("sink") == ("PAUSED", ["PAUSED"]), what="the sink PAUSED")
    append_lines(source_file, ["c"])
    status, tasks = worker.rest("GET", "/connectors/source/tasks")
    assert status == 200 and tasks[0]["id"] == {"connector": "source", "task": 0}
    assert tasks[0]["config"]["topic"] == "rest-lines"
    assert worker.rest("PUT", "/connectors/sink/resume")[0] == 202
    wait_for(lambda: lines_of(sink_file) == ["a", "b", "c"], what="the line sent while paused, after resume")

    assert worker.rest("POST", "/connectors/source/restart")[0] == 204
    status, body = worker.rest("POST", "/connectors/source/restart?includeTasks=true")
    assert status == 202 and body["name"] == "source"
    wait_for(lambda: states("source") == ("RUNNING", ["RUNNING"]), what="the source RUNNING after restarts")
    status, info = worker.rest("PUT", "/connectors/sink/config", {**sink_config, "tasks.max": "1"})
    assert status == 200 and info["config"]["tasks.max"] == "1"
    assert worker.rest("PUT", "/connectors/sink/config", {**sink_config, "name": "other"})[0] == 400
    status, info = worker.rest("PATCH", "/connectors/sink/config", {"tasks.max": None, "batch.note": "x"})
    assert status == 200 and "tasks.max" not in info["config"] and info["config"]["batch.note"] == "x"

    assert worker.rest("DELETE", "/connectors/sink")[0] == 204
    status, body = worker.rest("GET", "/connectors/sink/status")
    assert status == 404 and body == {"error_code": 404, "message": "Connector sink not found"}
    assert worker.rest("DELETE", "/connectors/sink")[0] == 404


def test_a_plugin_that_raises_is_failed_with_its_trace_and_the_others_keep_running(broker, workers, tmp_path):
    worker = ConnectProcess("standalone", worker_properties(tmp_path, broker),
                            log_path=str(tmp_path / "worker.log")).start()
    workers.append(worker)
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    assert worker.rest("POST", "/connectors", {"name": "exploding", "config": {
        "connector.class": "failing_connectors.ExplodingSourceConnector"}})[0] == 201
    assert worker.rest("POST", "/connectors", {"name": "source", "config": {
        "connector.class": "FileStreamSource", "file": str(source_file), "topic": "failing-lines"}})[0] == 201
    assert worker.rest("POST", "/connectors", {"name": "sink", "config": {
        "connector.class": "FileStreamSink", "file": str(sink_file), "topics": "failing-lines"}})[0] == 201

    def failed_task():
        tasks = worker.rest("GET", "/connectors/exploding/status")[1]["tasks"]
        return tasks and tasks[0]["state"] == "FAILED" and tasks[0]
    task = wait_for(failed_task, what="the exploding task FAILED")
    assert "the source system is on fire" in task["trace"] and task["worker_id"] == worker.worker_id
    append_lines(source_file, ["still", "flowing"])
    wait_for(lambda: lines_of(sink_file) == ["still", "flowing"], what="the other connectors' lines")
    status, body = worker.rest("POST", "/connectors/exploding/restart?includeTasks=true&onlyFailed=true")
    assert status == 202 and body["connector"]["state"] == "RUNNING"


@pytest.mark.parametrize("properties, message", [
    ({}, "missing required worker config"),
    ({"offset.flush.interval.ms": "soon"}, "offset.flush.interval.ms"),
    ({"inter.worker.signature.algorithm": "HmacMD5"}, "inter.worker.signature.algorithm='HmacMD5': use one of"),
    ({"connect.protocol": "fancy"}, "connect.protocol='fancy': use eager, compatible or sessioned"),
])
def test_a_bad_worker_config_is_one_line_and_exit_2(tmp_path, properties, message):
    import subprocess
    import sys
    path = write_properties(tmp_path / "w.properties", {
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "offset.storage.file.filename": tmp_path / "o", **properties} if properties else {})
    result = subprocess.run([sys.executable, "-m", "kspec.cli", "connect", "standalone", path],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_an_invalid_connector_file_is_one_line_and_exit_2(broker, tmp_path):
    import subprocess
    import sys
    connector = write_properties(tmp_path / "sink.properties", {
        "name": "sink", "connector.class": "FileStreamSink", "file": tmp_path / "out.txt"})
    result = subprocess.run([sys.executable, "-m", "kspec.cli", "connect", "standalone",
                             worker_properties(tmp_path, broker), connector], capture_output=True, text=True,
                            timeout=60)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2 and last == ("kspec connect: connector sink: topics: Must configure one of "
                                               "topics or topics.regex")
