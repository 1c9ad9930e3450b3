"""The Connect pipeline workload (faults/connect_workload.py) against a real broker: two
distributed workers, FileStreamSource -> topic -> FileStreamSink, lines appended while a worker
is killed with -9 and started again; its history checked with Spark (spark_validation/connect.py)
holds CON-1 and CON-3, and the checker names exactly what is then taken out of or added to it."""
from __future__ import annotations

import json
import shutil
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faults.connect_workload import SINK_FILE, TOPIC_FILE, ConnectPipeline, ConnectWorkloadOptions

RUN_S = 4.0


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    from spark_validation.session import spark_session
    running = SparkSession.getActiveSession()
    session = spark_session("local[2]", "kspec-connect-tests")
    yield session
    if running is None:
        session.stop()


@pytest.mark.soak  # worker kills for a minute and a Spark check; tests/connect/test_distributed.py kills workers in make test
@pytest.mark.guarantee("CON-1", "CON-3")
def test_a_pipeline_with_worker_kills_loses_no_line_and_the_checker_finds_tampering(broker, spark, tmp_path):
    from spark_validation.connect import check_connect

    options = ConnectWorkloadOptions(workers=2, lines_per_s=150, kill_interval_s=2.0, restart_after_s=1.0,
                                     topic="faulted-lines", replication_factor=1, session_timeout_ms=3000,
                                     rebalance_delay_ms=1000)
    pipeline = ConnectPipeline(broker.bootstrap, tmp_path / "run", options, seed=7)
    pipeline.start()
    try:
        time.sleep(RUN_S)  # the workload runs on its own threads; the test only lets it
    finally:
        pipeline.stop_invoking()
    history = pipeline.close(settle_timeout_s=60)

    run = json.loads((history / "connect.json").read_text())
    assert run["kills"] and run["lines"] > 0, run
    anomalies, verdict = check_connect(spark, history)
    assert verdict["valid"], anomalies.to_pylist()
    assert verdict["guarantees"]["CON-1"]["status"] == verdict["guarantees"]["CON-3"]["status"] == "held"

    tampered = tmp_path / "tampered"
    shutil.copytree(history, tampered)
    sink = pq.read_table(tampered / SINK_FILE).to_pylist()
    lost = sink[len(sink) // 2]["value"]
    pq.write_table(pa.Table.from_pylist([r for r in sink if r["value"] != lost], schema=pq.read_schema(
        tampered / SINK_FILE)), tampered / SINK_FILE)
    topic = pq.read_table(tampered / TOPIC_FILE).to_pylist()
    twice = topic[10]["value"]
    topic.append(dict(topic[10], offset=10**6))
    pq.write_table(pa.Table.from_pylist(topic, schema=pq.read_schema(tampered / TOPIC_FILE)), tampered / TOPIC_FILE)
    anomalies, verdict = check_connect(spark, tampered)
    found = {r["anomaly"]: (set(r["values"]), r["violation"]) for r in anomalies.to_pylist()}
    # at least once: a line in the topic twice is reported and allowed; the lost sink line violates CON-1
    assert found["connect-sink-lost"] == ({lost}, True), found
    assert twice in found["connect-duplicate"][0] and found["connect-duplicate"][1] is False, found
    assert {a for a, (_, violation) in found.items() if violation} == {"connect-sink-lost"}, found
    assert verdict["guarantees"]["CON-1"]["status"] == "violated"


def test_a_pipeline_whose_first_start_fails_starts_its_workers_anew(broker, tmp_path, monkeypatch, caplog):
    """As an operator would: a worker that does not start (here the first start of worker 1 is
    made to fail as a start does when its internal topics cannot be read) gets the pipeline's
    workers killed and started again, and the connectors are created then."""
    from faults import connect_workload

    failed = []
    start = connect_workload._Worker.start

    def first_start_of_worker_1_fails(worker):
        if worker.index == 1 and not failed:
            failed.append(worker.index)
            raise RuntimeError(f"connect worker {worker.index} did not start; see {worker.log_path}")
        start(worker)

    monkeypatch.setattr(connect_workload._Worker, "start", first_start_of_worker_1_fails)
    options = ConnectWorkloadOptions(workers=2, kill_interval_s=0, topic="restarted-lines", replication_factor=1,
                                     session_timeout_ms=3000, rebalance_delay_ms=1000)
    pipeline = ConnectPipeline(broker.bootstrap, tmp_path / "run", options, seed=3)
    try:
        pipeline.start()
        assert failed == [1]
        assert "its workers start anew (attempt 2 of 3)" in caplog.text
        assert all(worker.running for worker in pipeline.workers)
        for name in ("source", "sink"):
            assert pipeline.workers[0].rest("GET", f"/connectors/{name}") == 200
    finally:
        pipeline.stop_invoking()
        for worker in pipeline.workers:
            worker.kill()
