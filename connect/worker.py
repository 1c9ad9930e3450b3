"""The worker: runs connectors and tasks, each task on its own thread.

A source task is polled, its records transformed, converted and produced; its source
offsets are written only after the producer has acked every record sent before them
(flush, then write), every `offset.flush.interval.ms` and when the task stops.
A sink task consumes its topics in group `connect-<connector>`, converts and transforms
the records, hands them to `put`, and commits the consumer offsets only after
`pre_commit` (by default `flush`) returned: at least once (CON-1).

The worker reports every state change (RUNNING, PAUSED, FAILED with its trace,
UNASSIGNED when stopped) to the herder's status store.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from connect.api import (ConnectError, ConnectorContext, OffsetStorageReader, SinkConnector, SinkRecord,
                         SinkTaskContext, SourceTaskContext)
from connect.config import WorkerConfig, converter, transformation_chain
from connect.plugins import Plugins

log = logging.getLogger("connect.worker")

TASK_STOP_TIMEOUT_S = 10.0
SINK_POLL_TIMEOUT_S = 0.5
SINK_BATCH_RECORDS_MAX = 500
PAUSED_WAIT_S = 0.2
TRANSACTION_TIMEOUT_S = 30.0  # added to offset.flush.timeout.ms for init and commit of a transaction
TRANSACTION_RETRY_BACKOFF_S = 0.5  # between attempts of a transactional call that failed retriably


@dataclass(frozen=True, order=True)
class TaskId:
    connector: str
    task: int

    def __str__(self) -> str:
        return f"{self.connector}-{self.task}"


def offset_key(connector: str, partition: dict) -> bytes:
    """The offset topic's key for a source partition, as Connect writes it: ["<connector>",{partition}]."""
    return json.dumps([connector, partition], separators=(",", ":")).encode()


class StatusListener:
    """Where a worker reports states: the herder's status store."""

    def on_status(self, connector: str, task: int | None, state: str, trace: str | None = None) -> None:
        raise NotImplementedError


class OffsetStore:
    """Source offsets by key bytes (offset_key) -> value bytes (the offset map as JSON)."""

    def get(self, key: bytes) -> bytes | None:
        raise NotImplementedError

    def put_all(self, offsets: dict[bytes, bytes | None]) -> None:
        """Write durably (None removes a key); returns once the offsets are stored."""
        raise NotImplementedError

    def entries(self) -> dict[bytes, bytes]:
        """Every stored key and offset, up to date."""
        raise NotImplementedError


class _TaskThread:
    """What source and sink task runners share: the thread, the target state, the status."""

    def __init__(self, worker: Worker, task_id: TaskId, connector_props: dict, task_props: dict,
                 target_state: str) -> None:
        self.worker, self.id = worker, task_id
        self.connector_props, self.task_props = connector_props, task_props
        self.paused = target_state == "PAUSED"
        self.stopping = threading.Event()
        self.task = None
        self.thread = threading.Thread(target=self._run, name=f"task-{task_id}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.wake()
        self.thread.join(TASK_STOP_TIMEOUT_S)

    def wake(self) -> None:
        """Called from the stopping thread: unblock the task thread."""

    def stop_task(self) -> None:
        if self.task is not None:
            try:
                self.task.stop()
            except Exception:
                log.exception("task %s: stop raised", self.id)

    def set_target_state(self, state: str) -> None:
        self.paused = state == "PAUSED"
        self._report("PAUSED" if self.paused else "RUNNING")

    def _report(self, state: str, trace: str | None = None) -> None:
        self.worker.status.on_status(self.id.connector, self.id.task, state, trace)

    def _run(self) -> None:
        try:
            self.execute()
        except Exception:
            log.exception("task %s failed", self.id)
            self._report("FAILED", traceback.format_exc())
        else:
            self._report("UNASSIGNED")

    def execute(self) -> None:
        raise NotImplementedError


class WorkerSourceTask(_TaskThread):
    def wake(self) -> None:
        self.stop_task()  # as Connect does: a source task blocked in poll() returns when stopped

    def execute(self) -> None:
        worker, props = self.worker, self.connector_props
        self.chain = transformation_chain(props, worker.plugins)
        self.key_converter = converter(props, worker.config, "key.converter", worker.plugins)
        self.value_converter = converter(props, worker.config, "value.converter", worker.plugins)
        self.producer = self.open_producer()
        self.pending_offsets: dict[bytes, bytes] = {}
        self.send_error: KafkaError | None = None
        cls = worker.plugins.connector_class(props["connector.class"])().task_class()
        self.task = cls()
        self.task.initialize(SourceTaskContext(OffsetStorageReader(self._read_offset)))
        self.task.start(self.task_props)
        self._report("PAUSED" if self.paused else "RUNNING")
        flush_interval_s = worker.config.int("offset.flush.interval.ms") / 1000
        next_commit = time.monotonic() + flush_interval_s
        try:
            while not self.stopping.is_set():
                if self.paused:
                    self.stopping.wait(PAUSED_WAIT_S)
                    continue
                self.send_batch(self.task.poll() or [])
                self.producer.poll(0)
                if time.monotonic() >= next_commit:
                    self.commit_offsets()
                    next_commit = time.monotonic() + flush_interval_s
            self.commit_offsets()
        finally:
            if not self.stopping.is_set():
                self.stop_task()
            self.producer.flush(worker.config.int("offset.flush.timeout.ms") / 1000)

    def open_producer(self) -> Producer:
        return self.worker.make_producer(self.id)

    def send_batch(self, records) -> None:
        for record in records:
            self._send(record)

    def _read_offset(self, partition: dict) -> dict | None:
        value = self.worker.offsets.get(offset_key(self.id.connector, partition))
        return None if value is None else json.loads(value)

    def _send(self, record) -> None:
        record = self.chain.apply(record)
        if record is None:
            return
        key = self.key_converter.from_connect_data(record.topic, record.key_schema, record.key)
        value = self.value_converter.from_connect_data(record.topic, record.value_schema, record.value)
        kwargs = {} if record.kafka_partition is None else {"partition": record.kafka_partition}
        if record.timestamp_ms is not None:
            kwargs["timestamp"] = record.timestamp_ms

        def on_delivery(error, message, record=record):
            if error is not None:
                self.send_error = error
            else:
                self.task.commit_record(record, (message.topic(), message.partition(), message.offset()))
        while True:
            try:
                self.producer.produce(record.topic, value=value, key=key, headers=record.headers or None,
                                      on_delivery=on_delivery, **kwargs)
                break
            except BufferError:  # the producer's queue is full: let deliveries drain it
                self.producer.poll(0.1)
        if record.source_partition is not None:
            self.pending_offsets[offset_key(self.id.connector, record.source_partition)] = \
                json.dumps(record.source_offset, separators=(",", ":")).encode()

    def commit_offsets(self) -> None:
        """Write the source offsets of every record sent so far, once all of them are acked."""
        unacked = self.producer.flush(self.worker.config.int("offset.flush.timeout.ms") / 1000)
        if self.send_error is not None:
            raise ConnectError(f"Unrecoverable exception from producer send callback: {self.send_error}")
        if unacked:
            log.warning("task %s: %d records not acked within offset.flush.timeout.ms; offsets not committed",
                        self.id, unacked)
            return
        if self.pending_offsets:
            offsets, self.pending_offsets = self.pending_offsets, {}
            self.worker.offsets.put_all(offsets)
        self.task.commit()


def task_transactional_id(group_id: str, connector: str, task: int) -> str:
    """KIP-618: the transactional.id of a source task's producer with exactly-once support."""
    return f"{group_id}-{connector}-{task}"


class ExactlyOnceWorkerSourceTask(WorkerSourceTask):
    """KIP-618 (exactly.once.source.support=enabled), transaction.boundary=poll: each poll's
    records and the source offsets they reach are written in one transaction, by a producer
    whose transactional.id is <group.id>-<connector>-<task>. A task restarted elsewhere
    initialises the same transactional id, which aborts whatever its killed predecessor left
    open, and resumes from the offsets committed with the last committed records (CON-2).

    Before its producer exists the task asks the cluster's leader to fence the producers of
    the connector's earlier task generations (Worker.before_exactly_once_producer): a zombie
    task id that the new generation no longer has would otherwise keep committing records
    that a new task also writes."""

    def open_producer(self) -> Producer:
        config = self.worker.config
        self.worker.before_exactly_once_producer(self.id, self.stopping)
        producer = self.worker.make_producer(
            self.id, transactional_id=task_transactional_id(config["group.id"], self.id.connector, self.id.task))
        self._retrying(producer.init_transactions)
        return producer

    def _retrying(self, call) -> None:
        """call(timeout_s) with the time left, and again while it fails with a retriable error
        before that time is up (a transport failure while brokers are killed or cut off), until
        TRANSACTION_TIMEOUT_S past offset.flush.timeout.ms, as Kafka's producer retries
        InitProducerId and EndTxn within max.block.ms. librdkafka returns such errors to the
        caller, marked retriable, for it to call again. An error at the deadline fails the task,
        as in Kafka; the Connect pipeline of a fault run restarts FAILED tasks as an operator would."""
        deadline = time.monotonic() + self.worker.config.int("offset.flush.timeout.ms") / 1000 + TRANSACTION_TIMEOUT_S
        while True:
            try:
                call(max(deadline - time.monotonic(), TRANSACTION_RETRY_BACKOFF_S))
                return
            except KafkaException as e:
                error = e.args[0]
                if not error.retriable() or time.monotonic() >= deadline or self.stopping.is_set():
                    raise
                log.info("task %s: %s failed retriably (%s); trying again", self.id, call.__name__, error.str())
                self.stopping.wait(TRANSACTION_RETRY_BACKOFF_S)

    def send_batch(self, records) -> None:
        if not records:
            return
        timeout_s = self.worker.config.int("offset.flush.timeout.ms") / 1000 + TRANSACTION_TIMEOUT_S
        self.producer.begin_transaction()
        try:
            for record in records:
                self._send(record)
            for key, value in self.pending_offsets.items():
                self.producer.produce(self.worker.config["offset.storage.topic"], key=key, value=value)
            self._retrying(self.producer.commit_transaction)
        except Exception:
            self.producer.abort_transaction(timeout_s)
            raise
        if self.send_error is not None:
            raise ConnectError(f"Unrecoverable exception from producer send callback: {self.send_error}")
        self.pending_offsets = {}
        self.task.commit()

    def commit_offsets(self) -> None:
        """Nothing to do: every batch's offsets were committed with its records."""


ERROR_HEADER_PREFIX = "__connect.errors."  # Connect's DeadLetterQueueReporter header names


class DeadLetterQueue:
    """errors.deadletterqueue.topic.name: a sink record that failed conversion or transformation
    is produced there as it was consumed (key, value, headers), with, when
    errors.deadletterqueue.context.headers.enable=true, __connect.errors.* headers naming its
    origin, the stage and class that failed, and the exception."""

    def __init__(self, worker: Worker, task_id: TaskId, props: dict[str, str]) -> None:
        self.topic, self.task_id = props["errors.deadletterqueue.topic.name"], task_id
        self.context_headers = props.get("errors.deadletterqueue.context.headers.enable", "false").lower() == "true"
        self.send_error: KafkaError | None = None
        worker.ensure_topic(self.topic, int(props.get("errors.deadletterqueue.topic.replication.factor", 3)))
        self.producer = Producer({**worker.config.client_configs("producer"), "acks": "all",
                                  "client.id": f"connector-dlq-producer-{task_id}"})

    def report(self, message, stage: str, failed_class: str, error: Exception) -> None:
        headers = list(message.headers() or [])
        if self.context_headers:
            context = {"topic": message.topic(), "partition": str(message.partition()),
                       "offset": str(message.offset()), "connector.name": self.task_id.connector,
                       "task.id": str(self.task_id.task), "stage": stage, "class.name": failed_class,
                       "exception.class.name": f"{type(error).__module__}.{type(error).__qualname__}",
                       "exception.message": str(error),
                       "exception.stacktrace": "".join(traceback.format_exception(error))}
            headers += [(ERROR_HEADER_PREFIX + name, value.encode()) for name, value in context.items()]
        self.producer.produce(self.topic, key=message.key(), value=message.value(), headers=headers,
                              on_delivery=self._on_delivery)
        self.producer.poll(0)

    def _on_delivery(self, error, _message) -> None:
        if error is not None:
            self.send_error = error

    def flush(self, timeout_s: float) -> None:
        """Before the offsets of the records reported are committed."""
        if self.producer.flush(timeout_s) or self.send_error is not None:
            raise ConnectError(f"the dead letter queue {self.topic} did not take a failed record: "
                               f"{self.send_error or 'not acked in time'}")


class WorkerSinkTask(_TaskThread):
    def execute(self) -> None:
        worker, props = self.worker, self.connector_props
        self.chain = transformation_chain(props, worker.plugins)
        self.key_converter = converter(props, worker.config, "key.converter", worker.plugins)
        self.value_converter = converter(props, worker.config, "value.converter", worker.plugins)
        self.current: dict[tuple[str, int], int] = {}    # next offset to read, per partition, once put
        self.committed: dict[tuple[str, int], int] = {}
        self.commit_requested = False
        self.healthy = False  # commits only while put and flush succeed
        self.tolerate_all = props.get("errors.tolerance", "none") == "all"
        self.dead_letters = DeadLetterQueue(worker, self.id, props) \
            if self.tolerate_all and props.get("errors.deadletterqueue.topic.name") else None
        cls = worker.plugins.connector_class(props["connector.class"])().task_class()
        self.task = cls()
        self.task.initialize(SinkTaskContext(self._request_commit, lambda: list(self.current)))
        self.task.start(self.task_props)
        self.consumer = worker.make_consumer(f"connect-{self.id.connector}", self.id)
        try:
            self.healthy = True
            self._consume_loop(props)
        except BaseException:
            self.healthy = False
            raise
        finally:
            self.consumer.close()  # revokes the partitions: a last commit (if healthy) and close()
            self.stop_task()       # a sink task is stopped on its own thread, after its last put

    def _consume_loop(self, props: dict[str, str]) -> None:
        topics = [t.strip() for t in props.get("topics", "").split(",") if t.strip()]
        self.consumer.subscribe(topics or ["^" + props["topics.regex"]],
                                on_assign=self._on_assign, on_revoke=self._on_revoke)
        self._report("PAUSED" if self.paused else "RUNNING")
        flush_interval_s = self.worker.config.int("offset.flush.interval.ms") / 1000
        next_commit = time.monotonic() + flush_interval_s
        consumer_paused = False  # partitions assigned while paused are paused by _on_assign
        while not self.stopping.is_set():
            if self.paused != consumer_paused:
                (self.consumer.pause if self.paused else self.consumer.resume)(self.consumer.assignment())
                consumer_paused = self.paused
            self._deliver(self.consumer.consume(SINK_BATCH_RECORDS_MAX, SINK_POLL_TIMEOUT_S))
            if self.commit_requested or time.monotonic() >= next_commit:
                self.commit()
                next_commit = time.monotonic() + flush_interval_s
        self.commit()

    def _request_commit(self) -> None:
        self.commit_requested = True

    def _deliver(self, messages) -> None:
        records, consumed = [], {}
        for message in messages:
            if message.error() is not None:
                if message.error().fatal():
                    raise KafkaException(message.error())
                log.info("task %s: %s", self.id, message.error())  # e.g. a topic not created yet
                continue
            topic = message.topic()
            record = self._converted(message)
            if record is not None:
                records.append(record)
            consumed[(topic, message.partition())] = message.offset() + 1
        if records:
            self.task.put(records)
        self.current.update(consumed)  # only what put accepted may be committed

    def _converted(self, message) -> SinkRecord | None:
        """The message converted and transformed; None when a transformation dropped it, or, with
        errors.tolerance=all, when a stage failed (reported to the dead letter queue)."""
        topic, stage, failed = message.topic(), "KEY_CONVERTER", self.key_converter
        try:
            key_schema, key = self.key_converter.to_connect_data(topic, message.key())
            stage, failed = "VALUE_CONVERTER", self.value_converter
            value_schema, value = self.value_converter.to_connect_data(topic, message.value())
            stage, failed = "TRANSFORMATION", self.chain
            _, timestamp_ms = message.timestamp()
            return self.chain.apply(SinkRecord(
                topic=topic, kafka_partition=message.partition(), key_schema=key_schema, key=key,
                value_schema=value_schema, value=value, timestamp_ms=timestamp_ms if timestamp_ms >= 0 else None,
                headers=list(message.headers() or []), kafka_offset=message.offset()))
        except Exception as error:
            if not self.tolerate_all:
                raise
            log.warning("task %s: %s failed on %s-%d@%d, skipped (errors.tolerance=all): %s", self.id, stage,
                        topic, message.partition(), message.offset(), error)
            if self.dead_letters is not None:
                self.dead_letters.report(message, stage, f"{type(failed).__module__}.{type(failed).__qualname__}",
                                         error)
            return None

    def commit(self) -> None:
        """pre_commit (flush by default), then commit what it returned: after put, never before."""
        self.commit_requested = False
        if self.dead_letters is not None:
            self.dead_letters.flush(self.worker.config.int("offset.flush.timeout.ms") / 1000)
        offsets = self.task.pre_commit(dict(self.current))
        changed = {tp: o for tp, o in offsets.items() if self.committed.get(tp) != o}
        if changed:
            self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in changed.items()],
                                 asynchronous=False)
            self.committed.update(changed)

    def _on_assign(self, consumer, partitions) -> None:
        self.task.open([(tp.topic, tp.partition) for tp in partitions])
        if self.paused:
            consumer.pause(partitions)

    def _on_revoke(self, consumer, partitions) -> None:
        revoked = [(tp.topic, tp.partition) for tp in partitions]
        if self.healthy:
            self.commit()
            self.task.close(revoked)
        for tp in revoked:
            self.current.pop(tp, None)
            self.committed.pop(tp, None)


class WorkerConnector:
    """One running Connector instance: started with its config, asked for task configs."""

    def __init__(self, worker: Worker, name: str, props: dict, target_state: str, on_reconfigure) -> None:
        self.worker, self.name, self.props = worker, name, props
        self.connector = None
        try:
            self.connector = worker.plugins.connector_class(props["connector.class"])()
            self.connector.initialize(ConnectorContext(lambda: on_reconfigure(name), self._raise_error))
            self.connector.start(props)
        except Exception:
            log.exception("connector %s failed to start", name)
            self.connector = None
            self._report("FAILED", traceback.format_exc())
            return
        self._report(target_state if target_state == "PAUSED" else "RUNNING")

    @property
    def failed(self) -> bool:
        return self.connector is None

    def task_configs(self) -> list[dict[str, str]]:
        """Each task's config: the connector's task config plus task.class, as Connect stores them."""
        assert self.connector is not None
        max_tasks = int(self.props.get("tasks.max", 1))
        try:
            configs = self.connector.task_configs(max_tasks)[:max_tasks]
        except Exception:
            self._report("FAILED", traceback.format_exc())
            self.connector = None
            return []
        task_class = self.connector.task_class()
        return [{**c, "task.class": f"{task_class.__module__}.{task_class.__qualname__}"} for c in configs]

    def set_target_state(self, state: str) -> None:
        if not self.failed:
            self._report("PAUSED" if state == "PAUSED" else "RUNNING")

    def stop(self) -> None:
        if self.connector is not None:
            try:
                self.connector.stop()
            except Exception:
                log.exception("connector %s: stop raised", self.name)
        self._report("UNASSIGNED")

    def _raise_error(self, error: Exception) -> None:
        self._report("FAILED", "".join(traceback.format_exception(error)))

    def _report(self, state: str, trace: str | None = None) -> None:
        self.worker.status.on_status(self.name, None, state, trace)


class Worker:
    def __init__(self, config: WorkerConfig, plugins: Plugins, offsets: OffsetStore, status: StatusListener,
                 worker_id: str) -> None:
        self.config, self.plugins, self.offsets, self.status = config, plugins, offsets, status
        self.worker_id = worker_id
        self.connectors: dict[str, WorkerConnector] = {}
        self.tasks: dict[TaskId, _TaskThread] = {}
        self.lock = threading.RLock()
        # set by a distributed herder: called on the task's thread before an exactly-once
        # task's producer is created; raises (the task FAILS) when the fencing cannot be done
        self.before_exactly_once_producer = lambda task_id, stopping: None

    def fence_producers(self, connector: str, task_count: int) -> None:
        """Fence the transactional producers of tasks 0..task_count-1 of `connector`, as Kafka's
        Admin.fenceProducers does: InitProducerId for each transactional id bumps its epoch, so
        the old producer's open transaction is aborted and its next write is refused."""
        timeout_s = self.config.int("offset.flush.timeout.ms") / 1000 + TRANSACTION_TIMEOUT_S
        for task in range(task_count):
            transactional_id = task_transactional_id(self.config["group.id"], connector, task)
            producer = Producer({**self.config.client_configs("producer"), "transactional.id": transactional_id,
                                 "client.id": f"connector-fencer-{connector}-{task}"})
            producer.init_transactions(timeout_s)
            log.info("fenced the producers of transactional id %s", transactional_id)

    def make_producer(self, task_id: TaskId, transactional_id: str | None = None) -> Producer:
        # Connect's source producers: acks=all, one request in flight, so a partition keeps send
        # order; with exactly-once support idempotent and transactional. Keys are partitioned
        # with murmur2, as Java's producers do.
        exactly_once = {"transactional.id": transactional_id, "enable.idempotence": True} if transactional_id \
            else {"enable.idempotence": False, "max.in.flight.requests.per.connection": 1}
        return Producer({**self.config.client_configs("producer"), "acks": "all", "partitioner": "murmur2_random",
                         "client.id": f"connector-producer-{task_id}", "linger.ms": 5, **exactly_once})

    def ensure_topic(self, topic: str, replication_factor: int) -> None:
        """Create the topic (one partition) unless it exists, as Connect does for a dead letter queue."""
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({**self.config.client_configs("admin"), "log_level": 0})
        if topic in admin.list_topics(timeout=10).topics:
            return
        try:
            admin.create_topics([NewTopic(topic, 1, replication_factor)])[topic].result(TASK_STOP_TIMEOUT_S)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    def make_consumer(self, group_id: str, task_id: TaskId) -> Consumer:
        # a subscribed topic that does not exist yet is looked for again every 5 s
        return Consumer({"topic.metadata.refresh.interval.ms": 5000, **self.config.client_configs("consumer"),
                         "group.id": group_id,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "client.id": f"connector-consumer-{task_id}"})

    def start_connector(self, name: str, props: dict, target_state: str, on_reconfigure) -> bool:
        """Start the connector; False when it FAILED (its status says why)."""
        with self.lock:
            assert name not in self.connectors, name
            self.connectors[name] = WorkerConnector(self, name, props, target_state, on_reconfigure)
            return not self.connectors[name].failed

    def stop_connector(self, name: str) -> None:
        with self.lock:
            connector = self.connectors.pop(name, None)
        if connector is not None:
            connector.stop()

    def start_task(self, task_id: TaskId, connector_props: dict, task_props: dict, target_state: str) -> None:
        with self.lock:
            assert task_id not in self.tasks, task_id
            try:
                is_sink = issubclass(self.plugins.connector_class(connector_props["connector.class"]), SinkConnector)
            except Exception:
                self.status.on_status(task_id.connector, task_id.task, "FAILED", traceback.format_exc())
                return
            source_runner = ExactlyOnceWorkerSourceTask \
                if self.config["exactly.once.source.support"] == "enabled" else WorkerSourceTask
            runner = (WorkerSinkTask if is_sink else source_runner)(
                self, task_id, connector_props, task_props, target_state)
            self.tasks[task_id] = runner
            runner.start()

    def stop_tasks(self, task_ids) -> None:
        with self.lock:
            runners = [self.tasks.pop(t) for t in task_ids if t in self.tasks]
        for runner in runners:
            runner.stopping.set()
        for runner in runners:
            runner.stop()

    def set_target_state(self, name: str, state: str) -> None:
        with self.lock:
            if name in self.connectors:
                self.connectors[name].set_target_state(state)
            for task_id, runner in self.tasks.items():
                if task_id.connector == name:
                    runner.set_target_state(state)

    def stop(self) -> None:
        self.stop_tasks(list(self.tasks))
        for name in list(self.connectors):
            self.stop_connector(name)
