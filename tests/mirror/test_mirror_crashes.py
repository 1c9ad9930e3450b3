"""`kspec mirror` killed with -9 in the middle of a stream and started again: at least once it
loses nothing (MIR-1); with exactly.once.support=enabled it also duplicates nothing (MIR-2)."""
from __future__ import annotations

import json
import shutil
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mirror_helpers import DEADLINE_S, MirrorProcess, kspec, read_topic, topic_exists, wait_for, write_properties

RECORDS = 6000
PARTITIONS = 2
KILL_AFTER_RECORDS = 1000  # copies in the target before the kill
PACE_RECORDS, PACE_S = 50, 0.02


def produce_in_background(bootstrap: str, topic: str, killed: threading.Event, done: threading.Event):
    """An idempotent producer sending `RECORDS` numbered records a few at a time, so the mirror
    is copying while it is killed; the second half waits for the kill."""
    def run() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        for i in range(RECORDS):
            if i == RECORDS // 2:
                killed.wait(DEADLINE_S)
            producer.produce(topic, str(i).encode(), partition=i % PARTITIONS)
            if i % PACE_RECORDS == PACE_RECORDS - 1:
                producer.flush(30)
                time.sleep(PACE_S)
        assert producer.flush(30) == 0
        done.set()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def end_offsets(bootstrap: str, topic: str) -> int:
    """The sum of the topic's partitions' end offsets (0 before it exists)."""
    if not topic_exists(bootstrap, topic):
        return 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kspec-test-ends"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS))
    finally:
        consumer.close()


def copies(target: str, remote: str, read_committed: bool) -> list[tuple[int, int]]:
    if not topic_exists(target, remote):
        return []
    return [(m.partition(), int(m.value())) for m in read_topic(target, remote, read_committed)]


def run_with_a_kill(clusters, tmp_path, source_alias: str, target_alias: str, exactly_once: bool):
    source, target = clusters
    topic = f"stream-{source_alias}"
    admin = AdminClient({"bootstrap.servers": source})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result()
    settings = {"topics": topic, "offset.flush.interval.ms": "200", "emit.checkpoints.enabled": "false",
                "refresh.topics.interval.seconds": "1"}
    if exactly_once:  # long transactions: the kill lands in an open one
        settings.update({"exactly.once.support": "enabled", "transaction.boundary": "interval",
                         "transaction.boundary.interval.ms": "500"})
    properties = write_properties(tmp_path / "mm2.properties", source_alias, target_alias, source, target, **settings)
    remote = f"{source_alias}.{topic}"
    killed, produced = threading.Event(), threading.Event()
    with MirrorProcess(properties) as mirror:
        wait_for(lambda: topic_exists(target, remote), "the mirror to create its remote topic", mirror=mirror)
        producer = produce_in_background(source, topic, killed, produced)
        wait_for(lambda: end_offsets(target, remote) >= KILL_AFTER_RECORDS,
                 f"{KILL_AFTER_RECORDS} copies before the kill", mirror=mirror)
        mirror.kill()
    killed.set()
    with MirrorProcess(properties) as mirror:
        wait_for(produced.is_set, "the producer to finish")
        wait_for(lambda: len({n for _, n in copies(target, remote, exactly_once)}) == RECORDS,
                 "every record in the target after the restart", mirror=mirror)
        assert mirror.stop() == 0
    producer.join(10)
    return copies(target, remote, exactly_once)


def first_appearances_in_order(records: list[tuple[int, int]]) -> None:
    for partition in range(PARTITIONS):
        seen, order = set(), []
        for p, n in records:
            if p == partition and n not in seen:
                seen.add(n)
                order.append(n)
        assert order == list(range(partition, RECORDS, PARTITIONS)), f"partition {partition} out of source order"


@pytest.fixture(scope="module")
def at_least_once_run(clusters, tmp_path_factory):
    return run_with_a_kill(clusters, tmp_path_factory.mktemp("alo"), "alo", "alotarget", exactly_once=False)


@pytest.fixture(scope="module")
def exactly_once_run(clusters, tmp_path_factory):
    """The copies after a run with a kill, and the history `kspec mirror record` wrote of it."""
    folder = tmp_path_factory.mktemp("eos")
    records = run_with_a_kill(clusters, folder, "eos", "eostarget", exactly_once=True)
    recorded = kspec("mirror", "record", str(folder / "mm2.properties"), "--out", str(folder / "history"))
    assert recorded.returncode == 0, recorded.stderr
    return records, folder / "history"


@pytest.mark.guarantee("MIR-1")
def test_kill_9_mid_stream_loses_nothing_at_least_once(at_least_once_run):
    records = at_least_once_run
    assert {n for _, n in records} == set(range(RECORDS))
    first_appearances_in_order(records)


@pytest.mark.guarantee("MIR-1", "MIR-2")
def test_kill_9_mid_stream_neither_loses_nor_duplicates_exactly_once(exactly_once_run):
    records, _ = exactly_once_run
    for partition in range(PARTITIONS):
        assert [n for p, n in records if p == partition] == list(range(partition, RECORDS, PARTITIONS))


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    from spark_validation.session import spark_session
    running = SparkSession.getActiveSession()
    session = spark_session("local[2]", "kspec-mirror-tests")
    yield session
    if running is None:
        session.stop()


@pytest.mark.guarantee("MIR-1", "MIR-2")
def test_kspec_check_finds_exactly_what_was_tampered_in_the_recorded_history(spark, exactly_once_run, tmp_path):
    """The history of the exactly-once run with a kill, with one copy removed, one copied twice and
    two first copies swapped: `kspec check` (one Spark job) names those three and nothing else."""
    from click.testing import CliRunner

    from spark_validation.cli import check

    tampered = tmp_path / "tampered"
    shutil.copytree(exactly_once_run[1], tampered)
    target = pq.read_table(tampered / "mirror-target.parquet").to_pylist()
    assert len(target) == RECORDS
    partition_0 = [i for i, row in enumerate(target) if row["partition"] == 0]
    lost, twice, (first, second) = partition_0[10], partition_0[20], partition_0[30:32]
    target[first]["value"], target[second]["value"] = target[second]["value"], target[first]["value"]
    target.append(dict(target[twice], offset=10**6))
    del target[lost]
    pq.write_table(pa.Table.from_pylist(target), tampered / "mirror-target.parquet")

    out = tmp_path / "check"
    result = CliRunner().invoke(check, [str(tampered), "--master", "local[2]", "--out", str(out)])
    assert result.exit_code == 1 and "INVALID" in result.output, result.output
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["records"] == {"source": RECORDS, "target": RECORDS}
    assert verdict["guarantees"] == {"MIR-1": {"status": "violated"}, "MIR-2": {"status": "violated"},
                                     "MIR-3": {"status": "not checked"}}  # no group recorded
    found = {row["anomaly"]: row for row in pq.read_table(out / "anomalies.parquet").to_pylist()}
    assert set(found) == {"mirror-lost", "mirror-duplicate", "mirror-reorder"}
    assert found["mirror-lost"]["values"] == [20] and found["mirror-duplicate"]["values"] == [40]
    assert found["mirror-reorder"]["values"] == [62] and found["mirror-reorder"]["guarantee"] == "MIR-1"


@pytest.mark.guarantee("MIR-1", "MIR-2")
def test_the_faults_mirror_workload_kills_the_mirror_and_its_history_holds(spark, clusters, tmp_path):
    """faults/mirror_workload.py: records sent while an exactly-once mirror is killed with -9
    (about every 2 s once it copies) and started again; its recorded history holds MIR-1 and MIR-2."""
    from faults.mirror_workload import SENDS_FILE, MirrorWorkload, MirrorWorkloadOptions
    from spark_validation.mirror import check_mirror

    source, target = clusters
    options = MirrorWorkloadOptions(topic="faulted", records_per_s=300, kill_interval_s=2.0, restart_after_s=0.5,
                                    exactly_once=True, replication_factor=1)
    workload = MirrorWorkload(source, target, tmp_path / "run", options, seed=3)
    workload.start()
    try:  # the workload runs on its own threads; each kill lands once the mirror has copied since its start
        wait_for(lambda: len(workload.kills) >= 2 and "restarted_ms" in workload.kills[-1], "two kills of the mirror")
    finally:
        workload.stop_invoking()
    history = workload.close(settle_timeout_s=DEADLINE_S)

    sends = pq.read_table(history / SENDS_FILE).to_pylist()
    assert sends and all(s["error"] is None for s in sends)
    assert len(json.loads((history / "mirror-kills.json").read_text())) >= 2
    anomalies, verdict = check_mirror(spark, history)
    assert verdict["valid"], anomalies.to_pylist()
    assert verdict["records"]["source"] == verdict["records"]["target"] == len(sends)
    assert verdict["guarantees"]["MIR-2"]["status"] == "held"
