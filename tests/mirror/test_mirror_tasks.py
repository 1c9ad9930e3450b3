"""tasks.max: MirrorSourceConnector deals the source partitions round-robin over that many tasks,
each with its own consumer and producer (and, exactly once, its own transactional.id); each
partition's progress is stored, so a mirror killed with -9 resumes every partition after it,
neither losing nor (exactly once) duplicating a record."""
from __future__ import annotations

import re

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from mirror_helpers import MirrorProcess, read_topic, topic_exists, wait_for, write_properties

PARTITIONS, TASKS = 5, 2
RECORDS = 2000


def produce(bootstrap: str, topic: str, values: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for value in values:
        producer.produce(topic, str(value).encode(), partition=value % PARTITIONS)
    assert producer.flush(30) == 0


def copies(target: str, remote: str) -> list[tuple[int, int]]:
    if not topic_exists(target, remote):
        return []
    return [(m.partition(), int(m.value())) for m in read_topic(target, remote, read_committed=True)]


@pytest.mark.guarantee("MIR-1", "MIR-2")
def test_tasks_split_the_partitions_and_a_killed_mirror_resumes_each_exactly_once(clusters, tmp_path):
    source, target = clusters
    topic, remote = "spread", "tk.spread"
    admin = AdminClient({"bootstrap.servers": source})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result()
    properties = write_properties(tmp_path / "mm2.properties", "tk", "tktarget", source, target, **{
        "topics": topic, "tasks.max": str(TASKS), "exactly.once.support": "enabled",
        "emit.checkpoints.enabled": "false", "refresh.topics.interval.seconds": "1"})
    produce(source, topic, range(RECORDS // 2))
    with MirrorProcess(properties) as mirror:
        wait_for(lambda: len(copies(target, remote)) >= RECORDS // 4, "copies before the kill", mirror=mirror)
        mirror.kill()
    dealt = {int(task): {int(p) for p in re.findall(r"spread-(\d+)", partitions)}
             for task, partitions in re.findall(r"task (\d+): copying (.*)", mirror.log())}
    assert dealt == {task: set(range(task, PARTITIONS, TASKS)) for task in range(TASKS)}, mirror.log()[-2000:]
    produce(source, topic, range(RECORDS // 2, RECORDS))
    with MirrorProcess(properties) as mirror:
        wait_for(lambda: len(copies(target, remote)) >= RECORDS, "every record copied after the restart",
                 mirror=mirror)
        assert mirror.stop() == 0
    records = copies(target, remote)
    for partition in range(PARTITIONS):
        assert [n for p, n in records if p == partition] == list(range(partition, RECORDS, PARTITIONS))
