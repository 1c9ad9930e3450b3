"""kcat (-G) and kafkajs in groups with the Python clients, and the two delivery stories.

Each mixed group forms first, then records are produced, so every partition is read by the
member that owns it; a member then leaves after committing and the others take its
partitions over from the committed offsets: nothing is lost and nothing is read twice.

kafkajs names its only built-in assignor "RoundRobinAssigner" where the Java-style clients say
"roundrobin", and a group needs one protocol every member supports (INCONSISTENT_GROUP_PROTOCOL
otherwise), so its kafka-python partner offers an assignor under kafkajs' name.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from conformance.clients import kafkajs, kcat
from reference.process import BrokerProcess

from .clients import kafka_python_subscriber

PARTITIONS = 4
RECORDS_PER_PARTITION = 25
SESSION_TIMEOUT_MS = 6000
# Long enough that a join usually completes within one poll (see clients.kafka_python_subscriber).
POLL_TIMEOUT_MS = 500
BROKER_SETTINGS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(str(tmp_path_factory.mktemp("more-clients") / "data"), overrides=BROKER_SETTINGS) as process:
        yield process


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)


def produce(bootstrap: str, topic: str, per_partition: int, partitions: int = PARTITIONS) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=b"%d-%d" % (partition, i), partition=partition)
    assert producer.flush(10) == 0


class PythonMember(threading.Thread):
    """A kafka-python or aiokafka member that commits after every poll, in a thread."""

    def __init__(self, library: str, bootstrap: str, topic: str, group: str, assignors=None) -> None:
        super().__init__(daemon=True)
        self.library, self.bootstrap, self.topic, self.group, self.assignors = library, bootstrap, topic, group, assignors
        self.seen: list[tuple[int, int]] = []
        self.assignment: set[int] = set()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.failed_commits = 0

    def run(self) -> None:
        try:
            self._kafka_python() if self.library == "kafka-python" else __import__("asyncio").run(self._aiokafka())
        except BaseException as e:  # reported by the test
            self.error = e

    def _settings(self) -> dict:
        settings = {"bootstrap_servers": self.bootstrap, "group_id": self.group, "auto_offset_reset": "earliest",
                    "enable_auto_commit": False, "session_timeout_ms": SESSION_TIMEOUT_MS, "heartbeat_interval_ms": 500}
        if self.assignors:
            settings["partition_assignment_strategy"] = self.assignors
        return settings

    def _kafka_python(self) -> None:
        from kafka.errors import CommitFailedError, RebalanceInProgressError

        consumer = kafka_python_subscriber(self.topic, **self._settings())
        try:
            while not self.stop.is_set():
                for records in consumer.poll(timeout_ms=POLL_TIMEOUT_MS).values():
                    self.seen.extend((r.partition, r.offset) for r in records)
                self.assignment = {tp.partition for tp in consumer.assignment()}
                if self.assignment:
                    try:
                        consumer.commit()
                    except (CommitFailedError, RebalanceInProgressError):  # a rebalance began: records since
                        # the last commit may come again
                        self.failed_commits += 1
        finally:
            consumer.close()

    async def _aiokafka(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.errors import CommitFailedError as AIOCommitFailedError
        from aiokafka.errors import RebalanceInProgressError

        consumer = AIOKafkaConsumer(self.topic, **self._settings())
        await consumer.start()
        try:
            while not self.stop.is_set():
                for records in (await consumer.getmany(timeout_ms=POLL_TIMEOUT_MS)).values():
                    self.seen.extend((r.partition, r.offset) for r in records)
                self.assignment = {tp.partition for tp in consumer.assignment()}
                if self.assignment:
                    try:
                        await consumer.commit()
                    except (AIOCommitFailedError, RebalanceInProgressError):
                        self.failed_commits += 1
        finally:
            await consumer.stop()


# Group steps take a second or two here; the bound is for a machine loaded with other work.
WAIT_S = 60


def wait_until(condition, timeout_s: float, what: str, describe=lambda: "") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s}s: {what}{describe()}"
        time.sleep(0.1)


def assert_each_record_once(seen: list[tuple[int, int]]) -> None:
    assert len(seen) == len(set(seen)), f"read twice: {sorted(p for p in seen if seen.count(p) > 1)[:10]}"
    assert sorted(seen) == [(p, o) for p in range(PARTITIONS) for o in range(RECORDS_PER_PARTITION)], "records lost"


@pytest.mark.guarantee("GRP-1")
@pytest.mark.skipif(kcat.unavailable_reason() is not None, reason=str(kcat.unavailable_reason()))
def test_kcat_balanced_consumer_and_aiokafka_share_a_group(broker):
    topic, group = "kcat-group", "kcat-and-aiokafka"
    create_topic(broker.bootstrap, topic)
    partner = PythonMember("aiokafka", broker.bootstrap, topic, group)
    partner.start()
    wait_until(lambda: partner.assignment == set(range(PARTITIONS)), WAIT_S, "aiokafka joins")
    command = ["kcat", "-b", broker.bootstrap, "-G", group, topic, "-J", "-q", "-u",
               "-X", "auto.offset.reset=earliest", "-X", f"session.timeout.ms={SESSION_TIMEOUT_MS}"]
    member = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    kcat_seen: list[tuple[int, int]] = []
    reader = threading.Thread(target=lambda: kcat_seen.extend(
        (doc["partition"], doc["offset"]) for doc in map(json.loads, member.stdout)), daemon=True)
    reader.start()
    try:
        wait_until(lambda: 0 < len(partner.assignment) < PARTITIONS, WAIT_S, "kcat takes a share")
        produce(broker.bootstrap, topic, RECORDS_PER_PARTITION)
        total = PARTITIONS * RECORDS_PER_PARTITION
        wait_until(lambda: len(partner.seen) + len(kcat_seen) >= total, WAIT_S, "the group reads every record")
        assert kcat_seen and partner.seen, "both members read"
        member.send_signal(signal.SIGTERM)  # kcat commits what it consumed as it leaves
        member.wait(10)
        reader.join(5)
        wait_until(lambda: partner.assignment == set(range(PARTITIONS)), WAIT_S, "aiokafka takes kcat's partitions")
        time.sleep(1.0)  # room for a re-read, were the commits wrong
    finally:
        member.kill()
        partner.stop.set()
        partner.join(10)
    assert partner.error is None, partner.error
    assert_each_record_once(partner.seen + kcat_seen)


class KafkajsRoundRobin(RoundRobinPartitionAssignor):
    name = "RoundRobinAssigner"  # kafkajs' name for round robin: the protocol both sides support


@pytest.mark.guarantee("GRP-1")
@pytest.mark.skipif(kafkajs.unavailable_reason() is not None, reason=str(kafkajs.unavailable_reason()))
def test_kafkajs_and_kafka_python_share_a_group(broker):
    topic, group = "kafkajs-group", "kafkajs-and-kafka-python"
    create_topic(broker.bootstrap, topic)
    partner = PythonMember("kafka-python", broker.bootstrap, topic, group, assignors=(KafkajsRoundRobin,))
    partner.start()
    wait_until(lambda: partner.assignment == set(range(PARTITIONS)), WAIT_S, "kafka-python joins")
    kafkajs_seen: list[tuple[int, int]] = []
    share = PARTITIONS // 2 * RECORDS_PER_PARTITION  # round robin over two members: half the partitions
    runner = threading.Thread(target=lambda: kafkajs_seen.extend(
        (m.partition, m.offset) for m in kafkajs.consume_group(broker.bootstrap, topic, group, share, timeout_s=120)))
    runner.start()
    try:
        wait_until(lambda: len(partner.assignment) == PARTITIONS // 2, WAIT_S, "kafkajs takes its share")
        produce(broker.bootstrap, topic, RECORDS_PER_PARTITION)
        runner.join(120)  # kafkajs commits as it reads and leaves after its share
        assert kafkajs_seen, "kafkajs read its share"
        wait_until(lambda: partner.assignment == set(range(PARTITIONS)), WAIT_S, "kafka-python takes kafkajs' partitions",
                   lambda: f" (assignment {partner.assignment}, error {partner.error!r})")
        time.sleep(1.0)
    finally:
        partner.stop.set()
        partner.join(10)
    assert partner.error is None, partner.error
    assert_each_record_once(partner.seen + kafkajs_seen)


# ------------------------------------------------------------------ where the commit goes

STORY_CONSUMER = textwrap.dedent("""
    # A consumer that reads batches of 5, commits before or after processing them as told,
    # and is killed (SIGKILL, no clean-up) halfway through processing its second batch.
    import os, signal, sys
    from confluent_kafka import Consumer
    bootstrap, topic, group, commit, crash, last_offset = sys.argv[1:7]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 2000, "heartbeat.interval.ms": 300})
    consumer.subscribe([topic])
    processed = 0
    done = False
    while not done:
        batch = [m for m in consumer.consume(5, 1) if not m.error()]
        if not batch:
            continue
        if commit == "before":
            consumer.commit(asynchronous=False)
        for message in batch:
            if crash == "crash" and processed == 7:
                os.kill(os.getpid(), signal.SIGKILL)
            print(message.offset(), flush=True)  # "processing" the record
            processed += 1
            done = message.offset() == int(last_offset)
        if commit == "after":
            consumer.commit(asynchronous=False)
    consumer.close()
""")


def run_story_consumer(bootstrap: str, topic: str, group: str, commit: str, crash: bool) -> list[int]:
    done = subprocess.run([sys.executable, "-c", STORY_CONSUMER, bootstrap, topic, group, commit,
                           "crash" if crash else "finish", "19"], capture_output=True, text=True, timeout=60)
    assert done.returncode == (-signal.SIGKILL if crash else 0), done.stderr[-2000:]
    return [int(line) for line in done.stdout.split()]


@pytest.mark.parametrize("commit", ["before", "after"])
def test_where_the_consumer_commits_decides_between_at_most_and_at_least_once(broker, commit):
    """Commit before processing and a crash loses the records of the batch in hand (at most
    once); commit after processing and the crash makes them processed twice (at least once)."""
    topic, group = f"story-{commit}", f"story-{commit}"
    create_topic(broker.bootstrap, topic, partitions=1)
    produce(broker.bootstrap, topic, 20, partitions=1)
    first_life = run_story_consumer(broker.bootstrap, topic, group, commit, crash=True)
    assert first_life == list(range(7)), "the first run processed 0..6 and died in the batch 5..9"
    second_life = run_story_consumer(broker.bootstrap, topic, group, commit, crash=False)
    processed = first_life + second_life
    if commit == "before":
        assert second_life == list(range(10, 20)), "it resumes after the batch it had committed"
        assert set(range(20)) - set(processed) == {7, 8, 9}, "at most once: 7, 8 and 9 were never processed"
    else:
        assert second_life == list(range(5, 20)), "it resumes at the start of the uncommitted batch"
        assert [o for o in processed if processed.count(o) > 1] == [5, 6, 5, 6], "at least once: 5 and 6 twice"
        assert set(processed) == set(range(20))
