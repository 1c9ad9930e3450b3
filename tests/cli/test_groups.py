"""`kspec groups` and `kspec consume --group`: committed offsets, lag, resets with a dry run, deletion.

The offsets each command reports are checked against OffsetFetch through kafka-python. On a
broker that does not offer consumer groups the commands must say so in one line.
"""
from __future__ import annotations

import time

import pytest
from kafka import TopicPartition
from kafka.protocol.api_key import ApiKey

from .helpers import kspec, unique_topic

RECORDS = 10
CONSUMED = 4
ASSIGNMENT_TIMEOUT_S = 30.0
GROUPS_MISSING = "the broker does not offer consumer groups yet (no FindCoordinator in its ApiVersions)"


@pytest.fixture
def groups_target(target):
    if not target.offers(ApiKey.FindCoordinator):
        pytest.skip(GROUPS_MISSING)
    return target


def committed(target, group: str, topic: str) -> dict[int, int]:
    admin = target.admin()
    try:
        offsets = admin.list_group_offsets({group: None})[group]
    finally:
        admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}


def groups_plan(stdout: str) -> dict[int, tuple[str, str]]:
    """reset-offsets' plan table: partition -> (current offset, new offset)."""
    rows = [line.split() for line in stdout.splitlines()[2:] if line.strip()]
    return {int(row[1]): (row[2], row[3]) for row in rows}


def test_groups_commands_say_in_one_line_when_groups_are_not_offered(single_node):
    if single_node.offers(ApiKey.FindCoordinator):
        pytest.skip("this broker offers consumer groups; the commands are exercised below")
    run = kspec("groups", "list", "-b", single_node.bootstrap)
    assert run.returncode == 1
    assert "does not offer consumer groups" in run.error_line()


def test_consume_in_a_group_commits_and_reports_its_offsets(groups_target, topic):
    group = unique_topic("group")
    groups_target.produce(topic, [(None, f"r{i}".encode(), []) for i in range(RECORDS)], partition=0)
    run = kspec("consume", topic, "-b", groups_target.bootstrap, "--group", group, "--from-beginning",
                "--max-messages", str(CONSUMED))
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [f"r{i}" for i in range(CONSUMED)]
    assert f"{topic}-0={CONSUMED}" in run.stderr.splitlines()[-1]
    assert committed(groups_target, group, topic)[0] == CONSUMED  # GRP-2's precondition: the commit is stored

    listed = kspec("groups", "list", "-b", groups_target.bootstrap)
    assert listed.returncode == 0 and group in listed.stdout.split()

    described = kspec("groups", "describe", group, "-b", groups_target.bootstrap)
    assert described.returncode == 0, described.stderr
    row = next(line.split() for line in described.stdout.splitlines() if line.split()[:2] == [topic, "0"])
    assert row[2:5] == [str(CONSUMED), str(RECORDS), str(RECORDS - CONSUMED)]  # committed, high watermark, lag


def test_describe_shows_assigned_and_committed_partitions_without_joining_the_group(groups_target, topic):
    """Partitions come from the member's assignment and from OffsetFetch of every partition in the
    cluster (a topic the group committed for but no longer reads included); the offsets are read
    by a consumer that never joins, so the live member keeps its assignment alone."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as Partition

    group = unique_topic("described")
    earlier = unique_topic("earlier")
    assert kspec("topics", "create", earlier, "-b", groups_target.bootstrap, "--partitions", "1",
                 "--replication-factor", str(groups_target.node_count)).returncode == 0
    groups_target.produce(earlier, [(None, b"x", [])] * RECORDS, partition=0)
    assert kspec("consume", earlier, "-b", groups_target.bootstrap, "--group", group, "--from-beginning",
                 "--max-messages", str(CONSUMED)).returncode == 0
    groups_target.produce(topic, [(None, b"y", [])] * RECORDS, partition=0)
    member = Consumer({"bootstrap.servers": groups_target.bootstrap, "group.id": group, "enable.auto.commit": False,
                       "auto.offset.reset": "earliest"})
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + ASSIGNMENT_TIMEOUT_S
        while len(member.assignment()) < 3:
            assert time.monotonic() < deadline, "the member was not assigned the topic's partitions"
            member.poll(0.2)
        member.commit(offsets=[Partition(topic, 0, 1)], asynchronous=False)

        described = kspec("groups", "describe", group, "-b", groups_target.bootstrap)
        assert described.returncode == 0, described.stderr
        assert "Members: 1" in described.stdout
        rows = {(row[0], row[1]): row for row in map(str.split, described.stdout.splitlines()[3:])}
        assert rows[(earlier, "0")][2:6] == [str(CONSUMED), str(RECORDS), str(RECORDS - CONSUMED), "-"]
        assert rows[(topic, "0")][2:6] == ["1", str(RECORDS), str(RECORDS - 1), member.memberid()]
        assert rows[(topic, "1")][2:6] == ["-", "0", "-", member.memberid()]
        assert rows[(topic, "2")][5] == member.memberid()
        assert len(rows) == 4, described.stdout
        admin = groups_target.admin()
        try:
            members = admin.describe_groups([group])[group]["members"]
        finally:
            admin.close()
        assert [m["member_id"] for m in members] == [member.memberid()]
    finally:
        member.close()


def test_reset_offsets_dry_run_changes_nothing_and_execute_applies(groups_target, topic):
    group = unique_topic("reset")
    groups_target.produce(topic, [(None, b"x", [])] * RECORDS, partition=0)
    assert kspec("consume", topic, "-b", groups_target.bootstrap, "--group", group, "--from-beginning",
                 "--max-messages", str(CONSUMED)).returncode == 0
    common = ("groups", "reset-offsets", group, "-b", groups_target.bootstrap, "--topic", topic)

    dry = kspec(*common, "--to-earliest", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert groups_plan(dry.stdout)[0] == (str(CONSUMED), "0")
    assert committed(groups_target, group, topic)[0] == CONSUMED

    for flag, expected in ((("--to-earliest",), 0), (("--to-offset", "7"), 7), (("--to-latest",), RECORDS),
                           (("--to-offset", "999"), RECORDS), (("--to-timestamp", "0"), 0),
                           (("--to-timestamp", "2999-01-01T00:00:00"), RECORDS)):
        run = kspec(*common, *flag, "--execute")
        assert run.returncode == 0, run.stderr
        assert committed(groups_target, group, topic)[0] == expected, flag


def test_delete_removes_the_group(groups_target, topic):
    group = unique_topic("delete")
    groups_target.produce(topic, [(None, b"x", [])], partition=0)
    assert kspec("consume", topic, "-b", groups_target.bootstrap, "--group", group, "--from-beginning",
                 "--max-messages", "1").returncode == 0
    run = kspec("groups", "delete", group, "-b", groups_target.bootstrap)
    assert run.returncode == 0, run.stderr
    assert committed(groups_target, group, topic) == {}
    assert kspec("groups", "describe", group, "-b", groups_target.bootstrap).returncode == 1


def test_plan_reset_keeps_offsets_inside_the_log():
    from kspec.ops.groups import NO_OFFSET, ResetTarget, plan_reset

    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    log_start, high_watermark = {a: 5, b: 0}, {a: 20, b: 0}
    assert plan_reset(ResetTarget("earliest"), log_start, high_watermark, {}) == {a: 5, b: 0}
    assert plan_reset(ResetTarget("latest"), log_start, high_watermark, {}) == {a: 20, b: 0}
    assert plan_reset(ResetTarget("offset", 2), log_start, high_watermark, {}) == {a: 5, b: 0}
    assert plan_reset(ResetTarget("offset", 99), log_start, high_watermark, {}) == {a: 20, b: 0}
    assert plan_reset(ResetTarget("timestamp", 1), log_start, high_watermark, {a: 9, b: NO_OFFSET}) == {a: 9, b: 0}
