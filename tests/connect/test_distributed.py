"""`kspec connect distributed`: two workers in one Connect group against a real broker.

Connectors are created through the follower's REST API (forwarded to the leader), lines
appended to a file reach the sink file, the worker running the sink task is killed with -9,
its work moves to the survivor, and no line is lost (CON-1). The internal topics hold
Connect's record formats."""
from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, TopicPartition

from connect_helpers import (ConnectProcess, append_lines, committed_values, distributed_properties, lines_of,
                             read_topic, running_task_worker, wait_for)


@pytest.mark.guarantee("CON-1")
def test_two_workers_lose_no_line_when_the_sink_worker_is_killed(broker, workers, tmp_path):
    for index in (1, 2):
        workers.append(ConnectProcess("distributed", distributed_properties(tmp_path, broker, index, "killed"),
                                      log_path=str(tmp_path / f"worker{index}.log")).start())
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    append_lines(source_file, [f"before-{i}" for i in range(100)])

    def post(name, config):
        # a follower forwards to the leader; until the group has formed there is no leader: 409
        status, body = wait_for(lambda: (lambda r: r[0] != 409 and r)(workers[0].rest(
            "POST", "/connectors", {"name": name, "config": config})), what=f"{name} created")
        assert status == 201, body
    post("lines-source", {"connector.class": "FileStreamSource", "file": str(source_file), "topic": "lines"})
    post("lines-sink", {"connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
                        "file": str(sink_file), "topics": "lines"})
    wait_for(lambda: len(set(lines_of(sink_file))) >= 100, what="the first 100 lines in the sink file")

    # kill the worker that runs the sink task (the source task may run there too)
    sink_worker = wait_for(lambda: running_task_worker(workers[1], "lines-sink"), what="the sink RUNNING")
    victim = next(w for w in workers if w.worker_id == sink_worker)
    survivor = next(w for w in workers if w is not victim)
    victim.kill()
    append_lines(source_file, [f"after-{i}" for i in range(100)])

    for connector in ("lines-sink", "lines-source"):
        wait_for(lambda: running_task_worker(survivor, connector) == survivor.worker_id,
                 what=f"the {connector} task RUNNING on the survivor")
    # at least once: lines the killed sink had put but not committed may come twice, none is missing
    expected = {f"before-{i}" for i in range(100)} | {f"after-{i}" for i in range(100)}
    wait_for(lambda: set(lines_of(sink_file)) >= expected, what="every line in the sink file")

    # the internal topics, as Connect writes them
    config_keys = [key.decode() for key, _ in read_topic(broker, "killed-configs")]
    for key in ("connector-lines-source", "target-state-lines-source", "task-lines-source-0", "commit-lines-source"):
        assert key in config_keys
    commit = dict(read_topic(broker, "killed-configs"))[b"commit-lines-source"]
    assert json.loads(commit) == {"tasks": 1}
    key = json.dumps(["lines-source", {"filename": str(source_file)}], separators=(",", ":")).encode()
    wait_for(lambda: dict(read_topic(broker, "killed-offsets")).get(key)
             == json.dumps({"position": source_file.stat().st_size}, separators=(",", ":")).encode(),
             what="the source offset of the whole file in the offsets topic")
    status_keys = {key.decode() for key, _ in read_topic(broker, "killed-status")}
    assert {"status-connector-lines-sink", "status-task-lines-sink-0"} <= status_keys


def test_rest_writes_on_a_follower_are_forwarded_and_a_new_worker_takes_its_share(broker, workers, tmp_path):
    cluster = "sharing"
    first = ConnectProcess("distributed", distributed_properties(tmp_path, broker, 1, cluster),
                           log_path=str(tmp_path / "worker1.log")).start()
    workers.append(first)
    files = [tmp_path / f"in{i}.txt" for i in range(4)]

    def create(i):
        return first.rest("PUT", f"/connectors/share-{i}/config", {
            "connector.class": "FileStreamSource", "file": str(files[i]), "topic": cluster})
    for i in range(4):
        assert wait_for(lambda: (lambda r: r[0] != 409 and r)(create(i)), what="connector created")[0] == 201
    second = ConnectProcess("distributed", distributed_properties(tmp_path, broker, 2, cluster),
                            log_path=str(tmp_path / "worker2.log")).start()
    workers.append(second)

    def owners():
        statuses = [second.rest("GET", f"/connectors/share-{i}/status")[1] for i in range(4)]
        return [s["tasks"][0]["worker_id"] for s in statuses if s["tasks"] and s["tasks"][0]["state"] == "RUNNING"]
    wait_for(lambda: sorted(owners()) == sorted([first.worker_id] * 2 + [second.worker_id] * 2),
             what="the four tasks split two and two")
    for i in range(4):  # a task restart goes to the worker that runs the task, wherever it is asked
        assert second.rest("POST", f"/connectors/share-{i}/tasks/0/restart")[0] == 204
    assert second.rest("POST", "/connectors/share-0/tasks/7/restart")[0] == 404
    wait_for(lambda: len(owners()) == 4, what="the four tasks RUNNING after their restarts")
    status, body = second.rest("PUT", "/connectors/share-0/pause")  # whichever is the leader, it is done
    assert status == 202
    wait_for(lambda: second.rest("GET", "/connectors/share-0/status")[1]["tasks"][0]["state"] == "PAUSED",
             what="share-0 PAUSED")
    assert first.rest("PUT", "/connectors/share-0/resume")[0] == 202
    wait_for(lambda: running_task_worker(second, "share-0"), what="share-0 RUNNING again")
    status, body = first.rest("POST", "/connectors/share-1/restart?includeTasks=true")
    assert status == 202 and body["name"] == "share-1"
    assert second.rest("POST", "/connectors/share-1/restart")[0] == 204
    wait_for(lambda: running_task_worker(first, "share-1"), what="share-1 RUNNING after its restarts")
    assert second.rest("DELETE", "/connectors/share-3")[0] == 204
    # each worker answers from the config topic as far as it has read it
    wait_for(lambda: all(w.rest("GET", "/connectors")[1] == ["share-0", "share-1", "share-2"] for w in workers),
             what="share-3 gone on both workers")
    assert all(w.rest("GET", "/connectors/share-3")[0] == 404 for w in workers)


@pytest.mark.guarantee("CON-2")
def test_exactly_once_source_writes_no_line_twice_when_its_worker_is_killed(broker, workers, tmp_path):
    line_count = 2000
    source_file = tmp_path / "in.txt"
    append_lines(source_file, [f"line-{i:05d}" for i in range(line_count)])
    for index in (1, 2):  # with the eager protocol: this is its test with a live group
        path = distributed_properties(tmp_path, broker, index, "exactly-once", connect_protocol="eager")
        with open(path, "a") as f:
            f.write("exactly.once.source.support=enabled\noffset.flush.interval.ms=60000\n")
        workers.append(ConnectProcess("distributed", path, log_path=str(tmp_path / f"worker{index}.log")).start())
    config = {"connector.class": "FileStreamSource", "file": str(source_file), "topic": "eos-lines",
              "batch.size": "20"}
    status, body = wait_for(lambda: (lambda r: r[0] != 409 and r)(workers[0].rest(
        "PUT", "/connectors/eos-source/config", config)), what="eos-source created")
    assert status == 201, body

    source_worker = wait_for(lambda: running_task_worker(workers[1], "eos-source"), what="the source RUNNING")
    victim = next(w for w in workers if w.worker_id == source_worker)
    survivor = next(w for w in workers if w is not victim)
    # kill the worker in the middle of the file: some transactions committed, one perhaps open
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "connect-test-reader"})
    wait_for(lambda: consumer.get_watermark_offsets(TopicPartition("eos-lines", 0), timeout=5)[1] > line_count // 10,
             what="a tenth of the file written", interval_s=0.05)
    consumer.close()
    victim.kill()

    wait_for(lambda: running_task_worker(survivor, "eos-source") == survivor.worker_id,
             what="the source task moved to the survivor")
    wait_for(lambda: len(committed_values(broker, "eos-lines")) >= line_count, timeout_s=90,
             what="every line committed in the topic")
    # the survivor resumed after the last committed transaction: each line once, none lost
    # (with exactly.once.source.support=disabled and offsets flushed once a minute, the lines
    # the killed worker had written come again)
    assert sorted(committed_values(broker, "eos-lines")) == [f"line-{i:05d}".encode() for i in range(line_count)]
