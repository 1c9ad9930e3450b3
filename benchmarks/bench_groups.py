"""Consumer groups and compaction, measured.

1. Through a real `kspec broker` with confluent-kafka, for the classic protocol (range) and
   KIP-848 (group.protocol=consumer): time from kill -9 of one of three members to the other
   two owning all six partitions, and from a new member's subscribe to its first assignment.
2. In-process, the classic coordinator core (no sockets: 50 real clients are too heavy for two
   cores): a stable group of 50 members on 200 partitions, group.initial.rebalance.delay.ms=0,
   one member leaves, the other 49 rejoin and sync; the time the core spends on that rebalance.
3. Offset commits/s: the core alone, and end to end through the broker (synchronous commits
   from one confluent-kafka consumer, each written to __consumer_offsets before the reply).
4. Compaction throughput: a 64 MB log of 1 KB records over 10,000 keys cleaned in one pass.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from reference.coordinator.classic import ClassicGroupConfig
from reference.coordinator.coordinator import GroupCoordinator, GroupCoordinatorConfig, OffsetCommit
from reference.process import BrokerProcess
from reference.protocol.records import Record, build_batch
from reference.storage import Log, LogConfig
from reference.storage.cleaner import clean

PARTITIONS = 6
SESSION_TIMEOUT_MS = 3000
MEMBERS_LARGE, PARTITIONS_LARGE = 50, 200
COMMITS = 20_000
COMMITS_THROUGH_BROKER = 500
COMPACTION_LOG_BYTES = 64 << 20
RECORD_VALUE_BYTES = 1000
COMPACTION_KEYS = 10_000

VICTIM = textwrap.dedent("""
    import sys, json
    from confluent_kafka import Consumer
    consumer = Consumer(json.loads(sys.argv[1]))
    consumer.subscribe([sys.argv[2]])
    while True:
        consumer.poll(0.1)
        if consumer.assignment():
            print("assigned", flush=True)
""")


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result arrives
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)


def consumer_config(bootstrap: str, group: str, protocol: str) -> dict:
    config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    if protocol == "consumer":
        return config | {"group.protocol": "consumer"}
    return config | {"partition.assignment.strategy": protocol, "session.timeout.ms": SESSION_TIMEOUT_MS,
                     "heartbeat.interval.ms": 300}


def poll_until(consumers, done, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        for consumer in consumers:
            consumer.poll(0.02)


def owned(consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def member_death_and_join(bootstrap: str, protocol: str) -> tuple[float, float]:
    topic = f"bench-{protocol}"
    create_topic(bootstrap, topic, PARTITIONS)
    config = consumer_config(bootstrap, f"bench-{protocol}", protocol)
    survivors = [Consumer(config) for _ in range(2)]
    victim = subprocess.Popen([sys.executable, "-c", VICTIM, json.dumps(config), topic], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        for consumer in survivors:
            consumer.subscribe([topic])
        victim_lines: list[str] = []
        threading.Thread(target=lambda: victim_lines.append(victim.stdout.readline()), daemon=True).start()
        poll_until(survivors, lambda: victim_lines and all(owned(c) for c in survivors)
                   and len(owned(survivors[0]) | owned(survivors[1])) < PARTITIONS)
        victim.kill()
        victim.wait()
        killed_at = time.monotonic()
        poll_until(survivors, lambda: owned(survivors[0]) | owned(survivors[1]) == set(range(PARTITIONS)))
        death_to_stable_s = time.monotonic() - killed_at
        newcomer = Consumer(config)
        joined_at = time.monotonic()
        newcomer.subscribe([topic])
        poll_until(survivors + [newcomer], lambda: bool(owned(newcomer)))
        join_to_assignment_s = time.monotonic() - joined_at
        newcomer.close()
        return death_to_stable_s, join_to_assignment_s
    finally:
        victim.kill()
        for consumer in survivors:
            consumer.close()


def large_group_rebalance_ms() -> float:
    """A stable classic group of 50 on 200 partitions; one leaves; the core's time until the
    other 49 have rejoined and received their new assignments."""
    coordinator = GroupCoordinator(GroupCoordinatorConfig(classic=ClassicGroupConfig(initial_rebalance_delay_ms=0)),
                                   random.Random(1), now_ms=0)

    def join(token, member_id, now_ms):
        return dict(coordinator.join_group(
            token, group_id="large", member_id=member_id, group_instance_id=None, client_id="bench",
            client_host="/127.0.0.1", session_timeout_ms=30_000, rebalance_timeout_ms=60_000,
            protocol_type="consumer", protocols=[("range", b"")], require_known_member_id=True, now_ms=now_ms).replies)

    def rebalance(member_ids: list[str], now_ms: int) -> dict[str, bytes]:
        replies = {}
        for member_id in member_ids:
            replies.update(join(member_id, member_id, now_ms))
        replies.update(dict(coordinator.tick(now_ms).replies))
        assert set(replies) == set(member_ids), "every member's JoinGroup is answered"
        generation = replies[member_ids[0]]["generation_id"]
        leader = replies[member_ids[0]]["leader"]
        share = {m: [p for p in range(PARTITIONS_LARGE) if p % len(member_ids) == i] for i, m in enumerate(member_ids)}
        assignments = {m: json.dumps(ps).encode() for m, ps in share.items()}
        synced = {}
        for member_id in member_ids:
            effects = coordinator.sync_group(member_id, group_id="large", member_id=member_id, group_instance_id=None,
                                             generation_id=generation, protocol_type=None, protocol_name=None,
                                             assignments=assignments if member_id == leader else {}, now_ms=now_ms)
            synced.update(dict(effects.replies))
        assert set(synced) == set(member_ids), "every member has its assignment"
        return {m: r["assignment"] for m, r in synced.items()}

    member_ids = [join(f"new-{i}", "", 0)[f"new-{i}"]["member_id"] for i in range(MEMBERS_LARGE)]
    rebalance(member_ids, 0)
    started = time.perf_counter()
    leaver = member_ids.pop()
    _, errors, _ = coordinator.leave_group(group_id="large", members=[(leaver, None)], now_ms=1)
    assignments = rebalance(member_ids, 1)
    elapsed_ms = (time.perf_counter() - started) * 1000
    assert sorted(p for a in assignments.values() for p in json.loads(a)) == list(range(PARTITIONS_LARGE))
    return elapsed_ms


def core_commits_per_s() -> float:
    coordinator = GroupCoordinator(GroupCoordinatorConfig(), random.Random(1), now_ms=0)
    started = time.perf_counter()
    for i in range(COMMITS):
        errors, effects = coordinator.commit_offsets(group_id="simple", member_id="", group_instance_id=None,
                                                     generation_id=-1, offsets=[OffsetCommit("t", i % 8, i, -1, None)],
                                                     now_ms=i)
        assert effects.records
    return COMMITS / (time.perf_counter() - started)


def broker_commits_per_s(bootstrap: str) -> float:
    topic = "bench-commits"
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=b"k", value=b"v")
    producer.flush(10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-commits", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    started = time.perf_counter()
    for i in range(COMMITS_THROUGH_BROKER):
        consumer.commit(offsets=[TopicPartition(topic, 0, i)], asynchronous=False)
    rate = COMMITS_THROUGH_BROKER / (time.perf_counter() - started)
    consumer.close()
    return rate


def compaction_mb_per_s() -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as directory:
        log = Log(f"{directory}/compacted-0", LogConfig(cleanup_policy="compact", segment_bytes=8 << 20), now_ms=0)
        value = b"v" * RECORD_VALUE_BYTES
        offset = 0
        while log.size_bytes < COMPACTION_LOG_BYTES:
            records = [Record(0, 1000, b"key-%d" % ((offset + i) % COMPACTION_KEYS), value) for i in range(100)]
            log.append_as_leader(build_batch(records), 0, 1000)
            offset += 100
        log.roll(1000)
        started = time.perf_counter()
        stats = clean(log, 2000, force=True)
        elapsed_s = time.perf_counter() - started
        for segment in log.segments:
            segment.close()
        return stats.bytes_read / elapsed_s / 1e6, stats.bytes_written / stats.bytes_read


def main() -> None:
    settings = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000",
                "group.consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                "group.consumer.heartbeat.interval.ms": "300"}
    with tempfile.TemporaryDirectory() as directory, BrokerProcess(f"{directory}/data", overrides=settings) as broker:
        for protocol in sys.argv[1:] or ("range", "consumer"):
            death_s, join_s = member_death_and_join(broker.bootstrap, protocol)
            name = "classic (range)" if protocol == "range" else "KIP-848 (consumer)"
            print(f"{name:20s} member death -> stable: {death_s:5.2f} s (session.timeout.ms={SESSION_TIMEOUT_MS}); "
                  f"subscribe -> first assignment: {join_s:5.2f} s")
        print(f"offset commits through the broker (one consumer, synchronous): {broker_commits_per_s(broker.bootstrap):,.0f}/s")
    print(f"classic core, {MEMBERS_LARGE} members on {PARTITIONS_LARGE} partitions, one leaves: "
          f"rebalance handled in {large_group_rebalance_ms():.1f} ms (in-process)")
    print(f"offset commits in the coordinator core: {core_commits_per_s():,.0f}/s")
    mb_per_s, kept = compaction_mb_per_s()
    print(f"compaction of a {COMPACTION_LOG_BYTES >> 20} MB log ({COMPACTION_KEYS} keys): {mb_per_s:.1f} MB/s read, "
          f"{kept:.1%} of the bytes kept")


if __name__ == "__main__":
    main()
