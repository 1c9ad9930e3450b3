"""The replica audit (faults/audit.py) on a live reference cluster: KIP-101's second scenario,
staged with real processes, leaves two replicas holding different records at one offset when
the follower truncates to its high watermark (kspec.bug.truncation=hw), and the audit names it
as REP-1 with both replicas' records; with leader-epoch truncation the replicas converge and
the audit finds nothing.

Where a broker refuses follower reads (a Fetch below v11 here), the audit reads the partition's
preferred replica after an ElectLeaders PREFERRED.

The scenario (tests/replication/test_replication_scenarios.py replays it against the replica
core): replicas X (leader) and Y of a partition hold m1 and m2, both with high watermark 2.
X dies; Y leads. Y dies too, and loses m2, which was in its page cache only (its segment file
is cut back after the kill -9, as a power cut drops pages never fsynced). Y comes back first,
leads, and takes m3 at m2's offset. X comes back as a follower: truncating to its high
watermark keeps m2 at offset 1, where Y holds m3.
"""
from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from faults import audit
from faults.recorder import Recorder
from reference.process import ClusterProcess
from reference.protocol.records import iter_batches
from spark_validation import replicas
from spark_validation.anomalies import ANOMALY_KINDS

TOPIC = "kip101"  # one partition, two replicas: the third node keeps the controller quorum's majority
WAIT_S = 30.0
QUICK = {"broker.heartbeat.interval.ms": "500", "broker.session.timeout.ms": "3000",
         "replica.high.watermark.checkpoint.interval.ms": "100"}


def wait_for(what: str, condition, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s:.0f} s: {what}")


def partition(cluster: ClusterProcess) -> audit.PartitionInfo | None:
    """The partition as a running node's Metadata shows it, once it has a leader."""
    for node_id in cluster.running_brokers():
        try:
            found = audit.metadata(audit.parse_address(cluster.addresses[node_id]), [TOPIC])
        except audit.WIRE_ERRORS:
            continue
        if found.partitions and found.partitions[0].leader >= 0:
            return found.partitions[0]
    return None


def leader(cluster: ClusterProcess) -> int | None:
    found = partition(cluster)
    return found.leader if found else None


def produce(cluster: ClusterProcess, value: int) -> int:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "log_level": 0})
    offsets = []
    producer.produce(TOPIC, key=struct.pack(">q", 0), value=struct.pack(">q", value), partition=0,
                     on_delivery=lambda err, msg: offsets.append(None if err else msg.offset()))
    producer.flush(WAIT_S)
    assert offsets and offsets[0] is not None, f"m{value} not acknowledged"
    return offsets[0]


def checkpointed_hw(cluster: ClusterProcess, node_id: int) -> int:
    return audit.checkpointed_high_watermarks(Path(cluster.nodes[node_id].data_dir)).get((TOPIC, 0), -1)


def replica_hw(cluster: ClusterProcess, node_id: int) -> int:
    info = audit.PartitionInfo(TOPIC, 0, -1, -1, (), ())
    return audit.fetch_replica(audit.parse_address(cluster.addresses[node_id]), info, node_id).high_watermark


def lose_unflushed_tail(data_dir: str) -> None:
    """Cut the partition's segment back to its first batch (m1): the pages of m2 never reached the disk."""
    (segment,) = sorted((Path(data_dir) / f"{TOPIC}-0").glob("*.log"))
    data = segment.read_bytes()
    first = next(iter_batches(data))
    with open(segment, "r+b") as f:
        f.truncate(first.size_bytes)


def kip101_scenario_2(tmp_path: Path, truncation: str | None) -> tuple[list[dict], int, int]:
    """Stage the scenario on a 3-node cluster, audit every replica: the audit's anomaly rows, X and Y."""
    from confluent_kafka.admin import AdminClient, NewTopic
    overrides = {**QUICK, **({"kspec.bug.truncation": truncation} if truncation else {})}
    with ClusterProcess(str(tmp_path / "cluster"), 3, overrides=overrides) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
        new_topic = NewTopic(TOPIC, 1, 2, config={"min.insync.replicas": "1"})
        wait_for(f"{TOPIC} created", lambda: admin.create_topics([new_topic])[TOPIC].exception() is None)
        found = wait_for(f"{TOPIC} has a leader", lambda: partition(cluster))
        X, Y = found.leader, next(r for r in found.replicas if r != found.leader)
        wait_for(f"node {X} leads", lambda: leader(cluster) == X)
        assert [produce(cluster, 1), produce(cluster, 2)] == [0, 1]
        wait_for("both replicas checkpointed high watermark 2",
                 lambda: checkpointed_hw(cluster, X) == checkpointed_hw(cluster, Y) == 2)
        cluster.kill(X)
        wait_for(f"node {Y} leads once {X} is fenced", lambda: leader(cluster) == Y)
        cluster.kill(Y)
        lose_unflushed_tail(cluster.nodes[Y].data_dir)
        cluster.start_node(Y)
        wait_for(f"node {Y} leads again", lambda: leader(cluster) == Y)
        assert produce(cluster, 3) == 1, "m3 takes m2's offset"
        cluster.start_node(X)
        wait_for(f"node {X} follows up to high watermark 2", lambda: replica_hw(cluster, X) == 2)
        recorder = Recorder(tmp_path / "audit")
        summary = audit.audit(cluster.bootstrap, [TOPIC], recorder,
                              {node_id: Path(cluster.nodes[node_id].data_dir) for node_id in (X, Y)})
        history = recorder.close()
    assert summary["reads"] == 4 and summary["unread"] == 0, summary
    rows, unchecked = replicas.check(history)
    assert "REP-1" not in unchecked and "REP-2" not in unchecked, unchecked
    return rows, X, Y


@pytest.mark.timeout(120)
@pytest.mark.guarantee("REP-1")
def test_truncating_to_the_high_watermark_leaves_replicas_diverged_and_the_audit_names_rep_1(tmp_path):
    rows, X, Y = kip101_scenario_2(tmp_path, "hw")
    divergence = [r for r in rows if r["anomaly"] == "replica-divergence"]
    assert divergence and ANOMALY_KINDS["replica-divergence"].guarantee_id == "REP-1", rows
    # both methods, on both replicas: follower fetches and segment files tell the same story
    assert len(divergence) == 2 and {r["offsets"][0] for r in divergence} == {1}, divergence
    fetched = [r for r in divergence if r["detail"].count("follower-fetch") == 2]
    assert fetched and sorted(fetched[0]["values"]) == [2, 3], fetched  # m2 on one replica, m3 on the other
    assert f"node {X} (follower-fetch)" in fetched[0]["detail"] and f"node {Y} (follower-fetch)" in fetched[0]["detail"]


@pytest.mark.timeout(120)
@pytest.mark.guarantee("REP-1")
def test_leader_epoch_truncation_converges_and_the_audit_finds_nothing(tmp_path):
    rows, _, _ = kip101_scenario_2(tmp_path, None)
    assert rows == []


@pytest.mark.timeout(120)
@pytest.mark.guarantee("REP-1")
def test_where_followers_refuse_reads_the_preferred_replica_is_read_after_a_preferred_election(tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic
    from spec.history import ops_from_table, read_history
    with ClusterProcess(str(tmp_path / "cluster"), 3, overrides=QUICK) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
        wait_for(f"{TOPIC} created", lambda: admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].exception() is None)
        preferred = wait_for("the preferred replica leads", lambda: (p := partition(cluster)) and
                             p.leader == p.replicas[0] and len(p.isr) == 3 and p.leader)
        assert [produce(cluster, value) for value in (1, 2, 3)] == [0, 1, 2]
        cluster.kill(preferred)
        wait_for("another replica leads", lambda: leader(cluster) not in (None, preferred))
        cluster.start_node(preferred)
        wait_for(f"node {preferred} back in the ISR as a follower",
                 lambda: (p := partition(cluster)) and preferred in p.isr and p.leader != preferred)
        recorder = Recorder(tmp_path / "audit")
        summary = audit.audit(cluster.bootstrap, [TOPIC], recorder, fetch_version=10)
        history = recorder.close()
        assert leader(cluster) == preferred
    assert summary["methods"] == ["follower-fetch", "preferred-election"], summary
    reads = [op for op in ops_from_table(read_history(history)) if op.type != "invoke"]
    elected = [op for op in reads if op.extra["method"] == "preferred-election"]
    assert len(elected) == 1 and elected[0].type == "ok" and elected[0].extra["node"] == preferred
    assert [r.value for r in elected[0].mops[0].records] == [1, 2, 3]
    refused = [op for op in reads if op.type == "fail"]
    assert {op.extra["node"] for op in refused} >= {preferred} and all(
        "NOT_LEADER_OR_FOLLOWER" in op.extra["error"] for op in refused), refused
    rows, unchecked = replicas.check(history)
    assert rows == [] and "REP-1" not in unchecked, (rows, unchecked)
