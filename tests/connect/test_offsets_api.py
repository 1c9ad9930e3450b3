"""KIP-875 on a distributed worker: PUT /connectors/{name}/stop, and a connector's offsets read
(GET), altered (PATCH) and reset (DELETE) through REST, only while it is STOPPED; a source then
resumes from the offset it was given, a sink from its group's altered offset. (A sink's DELETE,
which deletes its consumer group with the admin client, is not exercised here.)"""
from __future__ import annotations

from connect_helpers import (ConnectProcess, append_lines, committed_values, distributed_properties, lines_of,
                             wait_for)

LINES = 50


def connector_state(worker, name: str) -> tuple[str, int]:
    status, body = worker.rest("GET", f"/connectors/{name}/status")
    return (body["connector"]["state"], len(body["tasks"])) if status == 200 else ("", -1)


def test_offsets_are_read_altered_and_reset_while_the_connector_is_stopped(broker, workers, tmp_path):
    worker = ConnectProcess("distributed", distributed_properties(tmp_path, broker, 1, "offsets-api"),
                            log_path=str(tmp_path / "worker1.log")).start()
    workers.append(worker)
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    append_lines(source_file, [f"line-{i}" for i in range(LINES)])
    for name, config in (("src", {"connector.class": "FileStreamSource", "file": str(source_file),
                                  "topic": "offsets-api-lines"}),
                         ("snk", {"connector.class": "FileStreamSink", "file": str(sink_file),
                                  "topics": "offsets-api-lines"})):
        assert wait_for(lambda: (lambda r: r[0] != 409 and r)(worker.rest(
            "PUT", f"/connectors/{name}/config", config)), what=f"{name} created")[0] == 201
    wait_for(lambda: len(lines_of(sink_file)) == LINES, what="every line in the sink file")
    whole_file = [{"partition": {"filename": str(source_file)}, "offset": {"position": source_file.stat().st_size}}]
    wait_for(lambda: worker.rest("GET", "/connectors/src/offsets") == (200, {"offsets": whole_file}),
             what="the source's offset at the end of the file")

    status, body = worker.rest("PATCH", "/connectors/src/offsets", {"offsets": [
        {"partition": {"filename": str(source_file)}, "offset": {"position": 0}}]})
    assert status == 400 and "STOPPED" in body["message"] and body["error_code"] == 400
    assert worker.rest("PUT", "/connectors/src/stop")[0] == 204
    wait_for(lambda: connector_state(worker, "src") == ("STOPPED", 0), what="src STOPPED without tasks")
    assert worker.rest("GET", "/connectors/src")[1]["tasks"] == []
    status, body = worker.rest("PATCH", "/connectors/src/offsets", {"offsets": [
        {"partition": {"filename": str(source_file)}, "offset": {"position": 0}}]})
    assert (status, body) == (200, {"message": "The offsets for this connector have been altered successfully"})
    assert worker.rest("GET", "/connectors/src/offsets")[1]["offsets"][0]["offset"] == {"position": 0}
    assert worker.rest("PUT", "/connectors/src/resume")[0] == 202
    # the source reads the file again from position 0: every line twice in the topic, and in the sink
    wait_for(lambda: len(committed_values(broker, "offsets-api-lines")) == 2 * LINES, what="the file read again")
    wait_for(lambda: len(lines_of(sink_file)) == 2 * LINES, what="the sink file with every line twice")

    assert worker.rest("DELETE", "/connectors/src/offsets")[0] == 400  # running again
    assert worker.rest("PUT", "/connectors/src/stop")[0] == 204
    wait_for(lambda: connector_state(worker, "src") == ("STOPPED", 0), what="src STOPPED again")
    status, body = worker.rest("DELETE", "/connectors/src/offsets")
    assert (status, body) == (200, {"message": "The offsets for this connector have been reset successfully"})
    assert worker.rest("GET", "/connectors/src/offsets") == (200, {"offsets": []})

    assert worker.rest("PATCH", "/connectors/snk/offsets", {"offsets": []})[0] == 400  # running
    assert worker.rest("PUT", "/connectors/snk/stop")[0] == 204
    wait_for(lambda: connector_state(worker, "snk") == ("STOPPED", 0), what="snk STOPPED without tasks")
    sink_offsets = [{"partition": {"kafka_topic": "offsets-api-lines", "kafka_partition": 0},
                     "offset": {"kafka_offset": 2 * LINES}}]
    assert worker.rest("GET", "/connectors/snk/offsets") == (200, {"offsets": sink_offsets})
    rewound = [{"partition": {"kafka_topic": "offsets-api-lines", "kafka_partition": 0},
                "offset": {"kafka_offset": 2 * LINES - 10}}]
    assert worker.rest("PATCH", "/connectors/snk/offsets", {"offsets": rewound})[0] == 200
    assert worker.rest("GET", "/connectors/snk/offsets") == (200, {"offsets": rewound})
    assert worker.rest("PUT", "/connectors/snk/resume")[0] == 202
    wait_for(lambda: len(lines_of(sink_file)) == 2 * LINES + 10, what="the last ten records delivered again")
    assert lines_of(sink_file)[-10:] == [f"line-{i}" for i in range(LINES - 10, LINES)]
