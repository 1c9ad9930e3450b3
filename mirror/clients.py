"""The mirror's clients of the two clusters (confluent-kafka), and what the flow and the status
view both do with them: wait for a cluster with backoff, create topics, read a topic to its end.

Every client is built from the flow's `<alias>.*` keys in mm2.properties; librdkafka's own log
lines stay quiet and connection failures are logged once per episode by ConnectionLog.
"""
from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kspec.ops import rdkafka
from kspec.ops.common import CONNECTION_FAILURES, HINTS, quiet_logger
from kspec.ops.rdkafka import close_within

log = logging.getLogger("mirror")

REQUEST_TIMEOUT_S = 30.0
READ_TO_END_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 10.0  # the longest a reader's close is waited for (see close_within)
BACKOFF_S_MIN = 0.5
BACKOFF_S_MAX = 30.0
METADATA_ATTEMPT_S = 2.0
READ_FETCH_WAIT_MS = 20  # reading to the end: an empty fetch should not wait long for data


class MirrorError(Exception):
    """A problem the mirror cannot mend by retrying (bad config, a cluster refusing a topic): one
    line for the operator, exit 2."""


class ConnectionLog:
    """librdkafka's error callback: a cluster that cannot be reached is logged, not raised
    (librdkafka keeps reconnecting by itself), once until it answers again."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.down = False
        self.lock = threading.Lock()

    def __call__(self, error: KafkaError) -> None:
        if error.code() in CONNECTION_FAILURES:
            with self.lock:
                if not self.down:
                    log.warning("cluster %s cannot be reached: %s; librdkafka keeps retrying", self.alias, error.str())
                self.down = True

    def answered(self) -> None:
        with self.lock:
            if self.down:
                log.info("cluster %s answers again", self.alias)
            self.down = False


CLIENT_CLASSES = {"producer": Producer, "consumer": Consumer, "admin": AdminClient}


def build(kind: str, configs: dict[str, dict[str, str]], connection: ConnectionLog, **settings):
    """A producer, consumer or admin client of one cluster; a key librdkafka refuses is a MirrorError."""
    try:
        return CLIENT_CLASSES[kind](client_config(kind, configs, connection, **settings))
    except KafkaException as error:
        key = _refused_key(kind, configs[kind])
        raise MirrorError(f"cluster {connection.alias}: {error.args[0].str()}"
                          + (f"; fix or remove `{connection.alias}.{key}` in mm2.properties" if key else "")) from None


def client_config(kind: str, configs: dict[str, dict[str, str]], connection: ConnectionLog, **settings) -> dict:
    """The confluent-kafka config of a client of one cluster: the file's keys, quiet logging."""
    return {**configs[kind], "error_cb": connection, "logger": quiet_logger(), **settings}


def _refused_key(kind: str, config: dict[str, str]) -> str | None:
    """The first of the file's keys librdkafka refuses on its own (librdkafka's message may not name it)."""
    for key, value in config.items():
        try:
            CLIENT_CLASSES[kind]({key: value, "group.id": "probe", "logger": quiet_logger()})
        except KafkaException:
            return key
    return None


def wait_reachable(admin: AdminClient, connection: ConnectionLog, stopping: threading.Event):
    """The cluster's metadata, retrying with exponential backoff (logged) until it answers."""
    backoff_s = BACKOFF_S_MIN
    while not stopping.is_set():
        try:
            metadata = admin.list_topics(timeout=METADATA_ATTEMPT_S)
            connection.answered()
            return metadata
        except KafkaException as error:
            log.warning("cluster %s cannot be reached (%s); retrying in %.1f s",
                        connection.alias, error.args[0].str(), backoff_s)
        stopping.wait(backoff_s)
        backoff_s = min(backoff_s * 2, BACKOFF_S_MAX)
    return None


def init_transactions(producer: Producer, what: str, stopping: threading.Event,
                      attempt_timeout_s: float = REQUEST_TIMEOUT_S) -> bool:
    """The transactional producer's init_transactions, called again with exponential backoff
    (logged) while it fails with a retriable error (a coordinator not available, a timeout):
    librdkafka's call resumes where the last one stopped, and Kafka's initTransactions may be
    retried after a TimeoutException, so a slow coordinator is waited for, not a reason to exit.
    False if asked to stop meanwhile; a fatal error (fenced, not authorized) is raised."""
    backoff_s = BACKOFF_S_MIN
    while not stopping.is_set():
        try:
            producer.init_transactions(attempt_timeout_s)
            return True
        except KafkaException as error:
            if not error.args[0].retriable():
                raise
            log.warning("%s: init_transactions: %s; retrying in %.1f s", what, error.args[0].str(), backoff_s)
        stopping.wait(backoff_s)
        backoff_s = min(backoff_s * 2, BACKOFF_S_MAX)
    return False


def create_topics(admin: AdminClient, alias: str, topics: list[NewTopic]) -> None:
    """Create the topics, waiting for the answer; one that exists already is fine, any other
    refusal is a MirrorError naming the topic, the reason and the key that mends it."""
    if not topics:
        return
    for name, future in admin.create_topics(topics, request_timeout=REQUEST_TIMEOUT_S).items():
        try:
            future.result()
            log.info("created topic %s in cluster %s", name, alias)
        except KafkaException as exception:
            error = exception.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            hint = HINTS.get(error.code(), "check the cluster's logs and its ACLs")
            if error.code() == KafkaError.INVALID_REPLICATION_FACTOR:
                hint = ("set replication.factor (remote topics) or <internal>.replication.factor "
                        "in mm2.properties to at most the number of brokers, or -1 for the broker default")
            raise MirrorError(f"cluster {alias} refused to create topic {name}: {error.str()}; {hint}") from None


def read_to_end(configs: dict[str, dict[str, str]], connection: ConnectionLog, topic: str, partitions: int,
                read_committed: bool = False, timeout_s: float = READ_TO_END_TIMEOUT_S):
    """Every record of the topic from its start to its end as of now (read_committed: to its
    last stable offset), partition by partition in offset order."""
    consumer = build("consumer", configs, connection, **{
        "group.id": "kspec-mirror-reader", "enable.auto.commit": False, "enable.partition.eof": True,
        "fetch.wait.max.ms": READ_FETCH_WAIT_MS,
        "isolation.level": "read_committed" if read_committed else "read_uncommitted"})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        remaining = set(range(partitions))
        deadline = time.monotonic() + timeout_s
        while remaining:
            if time.monotonic() > deadline:
                raise MirrorError(f"cluster {connection.alias}: topic {topic} could not be read to its end "
                                  f"within {timeout_s:.0f} s; check the cluster")
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is None:
                yield message
            elif message.error().code() == KafkaError._PARTITION_EOF:
                remaining.discard(message.partition())
            else:
                log.warning("reading %s in cluster %s: %s", topic, connection.alias, message.error().str())
    finally:
        close_within({"reader": consumer}, CLOSE_TIMEOUT_S)


def committed_offsets(configs: dict[str, dict[str, str]], connection: ConnectionLog, group: str,
                      partitions: list[tuple[str, int]], timeout_s: float = REQUEST_TIMEOUT_S) -> list[TopicPartition]:
    """The group's committed offsets of these partitions (offset < 0 where it has none), by an
    OffsetFetch from a consumer that does not join the group (kspec/ops/rdkafka.py says why not
    the admin client's). KafkaException when not answered within timeout_s."""
    return rdkafka.committed_offsets(client_config("consumer", configs, connection, **{"group.id": group}),
                                     partitions, timeout_s)


def partition_count(admin: AdminClient, topic: str) -> int:
    """Partitions of an existing topic (0 if unknown)."""
    metadata = admin.list_topics(topic, timeout=REQUEST_TIMEOUT_S)
    found = metadata.topics.get(topic)
    return len(found.partitions) if found is not None and found.error is None else 0
