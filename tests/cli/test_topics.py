"""`kspec topics`: each verb's output, and its effect as kafka-python sees it."""
from __future__ import annotations

from kafka.admin import ConfigResource, ConfigResourceType

from .helpers import kspec, unique_topic


def table_rows(text: str, first_column: str) -> list[list[str]]:
    """The data rows of the table whose header starts with `first_column`, split on whitespace."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [first_column])
    rows = []
    for line in lines[start + 2:]:  # header, rule
        if not line.strip() or line.startswith("Topic:"):
            break
        rows.append(line.split())
    return rows


def topic_config(target, topic: str, name: str) -> str | None:
    """A topic config's value as DescribeConfigs reports it to kafka-python."""
    admin = target.admin()
    try:
        entries = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
    finally:
        admin.close()
    return entries[name]["value"] if name in entries else None


def described_partitions(target, topic: str) -> dict[int, dict]:
    """Metadata for the topic's partitions as kafka-python reads it, by partition index."""
    admin = target.admin()
    try:
        [described] = admin.describe_topics([topic])
    finally:
        admin.close()
    assert described["error_code"] == 0
    return {p["partition_index"]: p for p in described["partitions"]}


def test_create_makes_the_topic_with_its_partitions_and_configs(target):
    name = unique_topic("create")
    run = kspec("topics", "create", name, "-b", target.bootstrap, "--partitions", "4",
                "--replication-factor", str(target.node_count), "--config", "retention.ms=123456")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"Created topic {name}."
    partitions = described_partitions(target, name)
    assert sorted(partitions) == [0, 1, 2, 3]
    assert all(len(p["replica_nodes"]) == target.node_count for p in partitions.values())
    assert topic_config(target, name, "retention.ms") == "123456"


def test_list_prints_every_topic_name_one_a_line(target, topic):
    run = kspec("topics", "list", "-b", target.bootstrap)
    assert run.returncode == 0, run.stderr
    assert topic in run.stdout.splitlines()


def test_describe_shows_leaders_replicas_epochs_and_offsets_per_partition(target, topic):
    target.produce(topic, [(None, b"a", [])] * 5, partition=1)
    target.produce(topic, [(None, b"b", [])] * 2, partition=2)
    run = kspec("topics", "describe", topic, "-b", target.bootstrap)
    assert run.returncode == 0, run.stderr
    header = run.stdout.splitlines()[0]
    assert header.startswith(f"Topic: {topic}  TopicId: ") and "PartitionCount: 3" in header
    assert f"ReplicationFactor: {target.node_count}" in header
    rows = table_rows(run.stdout, "PARTITION")
    assert [row[0] for row in rows] == ["0", "1", "2"]
    partitions = described_partitions(target, topic)
    high_watermarks = {0: 0, 1: 5, 2: 2}
    for partition, leader, replicas, isr, epoch, log_start, log_end, high_watermark, last_stable in rows:
        metadata = partitions[int(partition)]
        assert int(leader) == metadata["leader_id"]
        assert replicas == ",".join(map(str, metadata["replica_nodes"]))
        assert isr == ",".join(map(str, metadata["isr_nodes"]))
        if int(high_watermark) > 0:  # ListOffsets names the leader epoch of the latest record
            assert int(epoch) == metadata["leader_epoch"]
        assert int(log_start) == 0
        assert int(log_end) == int(high_watermark) == int(last_stable) == high_watermarks[int(partition)]


def test_describe_lists_config_overrides(target):
    name = unique_topic("configs")
    assert kspec("topics", "create", name, "-b", target.bootstrap, "--config", "retention.ms=777000").returncode == 0
    run = kspec("topics", "describe", name, "-b", target.bootstrap)
    assert "Configs: retention.ms=777000" in run.stdout.splitlines()[0]


def test_alter_adds_partitions_and_changes_configs(target, topic):
    run = kspec("topics", "alter", topic, "-b", target.bootstrap, "--partitions", "5",
                "--config", "retention.ms=999000")
    assert run.returncode == 0, run.stderr
    assert f"Topic {topic} now has 5 partitions." in run.stdout
    assert sorted(described_partitions(target, topic)) == [0, 1, 2, 3, 4]
    assert topic_config(target, topic, "retention.ms") == "999000"
    run = kspec("topics", "alter", topic, "-b", target.bootstrap, "--delete-config", "retention.ms")
    assert run.returncode == 0, run.stderr
    assert topic_config(target, topic, "retention.ms") is None


def test_delete_removes_the_topic(target, topic):
    run = kspec("topics", "delete", topic, "-b", target.bootstrap)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"Deleted topic {topic}."
    admin = target.admin()
    try:
        assert topic not in admin.list_topics()
    finally:
        admin.close()
