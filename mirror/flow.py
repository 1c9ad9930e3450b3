"""One flow `source->target`: copy the chosen topics, keep the mirror's progress in the target,
write offset syncs, emit checkpoints and heartbeats, and sync group offsets.

What MM2 spreads over three connectors (MirrorSourceConnector, MirrorCheckpointConnector,
MirrorHeartbeatConnector) on a Connect herder runs here as one connector loop and `tasks.max`
source tasks, each on a thread of its own:

    connector: refresh topics, sync topic configs and ACLs, deal new partitions to the tasks,
               heartbeat, checkpoints, group offsets (each on its own interval)
    task k:    poll source -> copy into target -> commit progress -> offset syncs

As MirrorSourceConnector does, partitions are dealt round-robin over the tasks (the n-th
partition found goes to task n % tasks.max); each task has its own consumer and producer (with
exactly once its own transactional.id, `<source>-mm2-MirrorSourceConnector-<task>`).

Progress is Connect's source offsets, kept in `mm2-offsets.<source>.internal` in the target:
for each source partition the last offset copied; a restarted mirror continues after it,
whichever task the partition is dealt to then.

- At least once (default): records are produced with an idempotent producer; every
  `offset.flush.interval.ms` the producer is flushed and only then is progress written. A kill
  between the two re-copies what was flushed since the last progress: duplicates, no loss.
- Exactly once (`exactly.once.support=enabled`, or the target's
  `exactly.once.source.support=enabled`; KIP-618, the idea of KIP-656): each poll's records
  (or, with `transaction.boundary=interval`, each `transaction.boundary.interval.ms`'s) and
  the progress after them are written in one transaction of a producer whose
  transactional.id belongs to this flow. A restart's init_transactions fences a zombie and
  aborts its open transaction; progress is read read_committed, so it and the records
  committed with it agree: a kill neither loses nor duplicates. The source is read
  read_committed too, so aborted source records are not copied.

Offset syncs are written (into the source cluster) only after the records they name are
committed, so a checkpoint never translates to a copy that might vanish.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import (OFFSET_BEGINNING, TIMESTAMP_NOT_AVAILABLE, ConsumerGroupState,
                             ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition)
from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, AlterConfigOpType, ConfigEntry,
                                  ConfigResource, ConfigSource, NewPartitions, NewTopic, ResourcePatternType,
                                  ResourceType)

from mirror import acls

from mirror.clients import (REQUEST_TIMEOUT_S, ConnectionLog, MirrorError, build, committed_offsets, create_topics,
                            init_transactions, partition_count, read_to_end, wait_reachable)
from mirror.config import FlowConfig
from mirror.offsets import SyncStore, SyncWriter
from mirror.policy import HEARTBEATS_TOPIC
from mirror.records import Checkpoint, Heartbeat, OffsetSync, decode_progress, progress_key, progress_value

log = logging.getLogger("mirror")

POLL_RECORDS_MAX = 500          # records per poll (and per transaction with exactly once)
POLL_TIMEOUT_S = 0.2
FLUSH_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 1.0
IDLE_GROUP_STATES = {ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD}  # DEAD: unknown to the target


class Rewind(Exception):
    """A copy was not acknowledged: go back to the stored progress and copy again."""


@dataclass
class Batch:
    """What was produced since the last progress commit."""
    last_consumed: dict[tuple[str, int], int] = field(default_factory=dict)    # source tp -> offset
    delivered: list[tuple[str, int, int, int]] = field(default_factory=list)  # (topic, partition, upstream, downstream)
    failure: KafkaError | None = None
    produced: int = 0


class Flow:
    def __init__(self, config: FlowConfig, stopping: threading.Event) -> None:
        self.config = config
        self.stopping = stopping
        self.policy = config.policy
        self.source_connection = ConnectionLog(config.source)
        self.target_connection = ConnectionLog(config.target)
        self.progress: dict[tuple[str, int], int] = {}     # source tp -> last offset copied (committed)
        self.assigned: dict[tuple[str, int], None] = {}    # source partitions being copied, in order
        self.remote_partitions_wanted: dict[str, int] = {}  # remote topic -> its source's partition count
        self.store = SyncStore()
        self.store_lock = threading.Lock()                  # tasks add syncs, the connector translates
        self.tasks: list[SourceTask] = []
        self.checkpoints: dict[tuple[str, str, int], Checkpoint] = {}
        self.inactive_groups_warned: set[str] = set()
        self.due_s = {"refresh": 0.0, "config-sync": 0.0, "acl-sync": 0.0, "heartbeat": 0.0, "checkpoint": 0.0,
                      "group-sync": 0.0}
        self.source_has_authorizer = True  # until DescribeAcls says SECURITY_DISABLED

    # ---- start ---------------------------------------------------------------------------

    def start(self) -> bool:
        """Connect to both clusters (retrying), create the internal topics, recover progress.
        False if asked to stop meanwhile."""
        c = self.config
        self.source_admin = build("admin", c.source_clients, self.source_connection)
        self.target_admin = build("admin", c.target_clients, self.target_connection)
        if wait_reachable(self.target_admin, self.target_connection, self.stopping) is None:
            return False
        if wait_reachable(self.source_admin, self.source_connection, self.stopping) is None:
            return False
        compact = {"cleanup.policy": "compact"}
        rf = c.internal_replication_factor
        create_topics(self.target_admin, c.target, [
            NewTopic(c.offsets_topic, c.offset_storage_partitions, rf["offset.storage"], config=compact),
            *([NewTopic(c.checkpoints_topic, 1, rf["checkpoints.topic"], config=compact)] if c.emit_checkpoints else []),
            *([NewTopic(HEARTBEATS_TOPIC, 1, rf["heartbeats.topic"], config=compact)] if c.emit_heartbeats else []),
        ])
        if c.emit_offset_syncs:
            create_topics(self.source_admin, c.source,
                          [NewTopic(c.offset_syncs_topic, 1, rf["offset-syncs.topic"], config=compact)])
        self.source_producer = build("producer", c.source_clients, self.source_connection,
                                     **{"client.id": f"{c.name}-offset-syncs"})
        # Internal records (heartbeats, checkpoints) never belong to the copy's transactions.
        self.target_producer = build("producer", c.target_clients, self.target_connection,
                                     **{"client.id": f"{c.name}-internal", "partitioner": "murmur2_random"})
        self.tasks = [SourceTask(self, task) for task in range(c.tasks_max)]
        if not all(task.ready for task in self.tasks):
            return False
        self._recover_progress()
        if c.emit_offset_syncs:
            self._read_offset_syncs()
        log.info("flow %s: %s, %d task(s), progress for %d partitions", c.name,
                 "exactly once" if c.exactly_once else "at least once", len(self.tasks), len(self.progress))
        return True

    def _recover_progress(self) -> None:
        c = self.config
        partitions = partition_count(self.target_admin, c.offsets_topic)
        for message in read_to_end(c.target_clients, self.target_connection, c.offsets_topic, partitions,
                                   read_committed=True):
            decoded = decode_progress(message.key(), message.value())
            if decoded is None or decoded[0] != c.source:
                continue
            _, topic, partition, last = decoded
            if last is None:
                self.progress.pop((topic, partition), None)
            else:
                self.progress[(topic, partition)] = last

    def _read_offset_syncs(self) -> None:
        """MM2 translates only once the syncs topic is read to its end (OffsetSyncStore)."""
        c = self.config
        for message in read_to_end(c.source_clients, self.source_connection, c.offset_syncs_topic, 1):
            self.store.add(OffsetSync.decode(message.key(), message.value()))

    # ---- the loop --------------------------------------------------------------------------

    def run(self) -> None:
        """The connector loop on this thread, each task on its own; a task's MirrorError or crash
        stops the flow and is raised here."""
        c = self.config
        threads = [threading.Thread(target=task.run, name=f"{c.name}-task-{task.index}") for task in self.tasks]
        for thread in threads:
            thread.start()
        try:
            while not self.stopping.is_set():
                now_s = time.monotonic()
                if self._due("refresh", now_s, c.refresh_topics_interval_s if c.refresh_topics else None):
                    self._refresh_topics()
                if self._due("config-sync", now_s, c.sync_topic_configs_interval_s if c.sync_topic_configs else None):
                    self._sync_topic_configs()
                if self._due("acl-sync", now_s, c.sync_topic_acls_interval_s
                             if c.sync_topic_acls and self.source_has_authorizer else None):
                    self._sync_topic_acls()
                if c.emit_heartbeats and self._due("heartbeat", now_s, c.emit_heartbeats_interval_s):
                    self._heartbeat()
                if c.emit_checkpoints and self._due("checkpoint", now_s, c.emit_checkpoints_interval_s):
                    self._checkpoints()
                self.stopping.wait(POLL_TIMEOUT_S)
        finally:
            self.stopping.set()
            for thread in threads:
                thread.join()
            self._close()
        for task in self.tasks:
            if task.error is not None:
                raise task.error

    def _due(self, what: str, now_s: float, interval_s: float | None) -> bool:
        if interval_s is None or now_s < self.due_s[what]:
            return False
        self.due_s[what] = now_s + interval_s
        return True

    # ---- topics ------------------------------------------------------------------------------

    def _refresh_topics(self) -> None:
        """Find the source topics to mirror; create their remote topics with the same partition
        count (and configs), add partitions that appeared, and start copying new partitions."""
        c = self.config
        try:
            metadata = self.source_admin.list_topics(timeout=REQUEST_TIMEOUT_S)
            self.source_connection.answered()
            target = self.target_admin.list_topics(timeout=REQUEST_TIMEOUT_S)
        except KafkaException as error:
            log.warning("flow %s: cannot list topics (%s); retrying at the next refresh", c.name, error.args[0].str())
            self.due_s["refresh"] = time.monotonic() + RETRY_BACKOFF_S
            return
        wanted = {name: len(t.partitions) for name, t in metadata.topics.items()
                  if t.error is None and c.mirrors_topic(name)}
        new_topics, grown = [], []
        for topic, partitions in sorted(wanted.items()):
            remote = self.policy.format_remote_topic(c.source, topic)
            existing = target.topics.get(remote)
            have = len(existing.partitions) if existing is not None and existing.error is None else 0
            self.remote_partitions_wanted[remote] = partitions
            if have == 0:
                new_topics.append(NewTopic(remote, partitions, c.replication_factor, config=self._topic_configs(topic)))
            elif have < partitions:
                grown.append(NewPartitions(remote, partitions))
        create_topics(self.target_admin, c.target, new_topics)
        for remote, future in (self.target_admin.create_partitions(grown, request_timeout=REQUEST_TIMEOUT_S).items()
                               if grown else ()):
            try:
                future.result()
                log.info("flow %s: %s grown to its source's partition count", c.name, remote)
            except KafkaException as error:
                raise MirrorError(f"cluster {c.target} refused to add partitions to {remote}: "
                                  f"{error.args[0].str()}") from None
        added = [(topic, p) for topic, n in sorted(wanted.items()) for p in range(n) if (topic, p) not in self.assigned]
        for topic, partition in added:  # round-robin, as MirrorSourceConnector deals partitions to its tasks
            self.tasks[len(self.assigned) % len(self.tasks)].add(topic, partition)
            self.assigned[(topic, partition)] = None
        if added:
            log.info("flow %s: copying %s", c.name, ", ".join(f"{t}-{p}" for t, p in added))

    def _topic_configs(self, topic: str) -> dict[str, str]:
        """The source topic's own configs (not defaults), minus config.properties.exclude."""
        c = self.config
        if not c.sync_topic_configs:
            return {}
        resource = ConfigResource(ResourceType.TOPIC, topic)
        try:
            entries = self.source_admin.describe_configs([resource], request_timeout=REQUEST_TIMEOUT_S)[resource].result()
        except KafkaException as error:
            log.warning("flow %s: cannot read the configs of %s (%s); creating it with defaults",
                        c.name, topic, error.args[0].str())
            return {}
        return {name: entry.value for name, entry in entries.items()
                if entry.source in (ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
                and entry.value is not None
                and not c.config_properties_exclude.fullmatch(name)}

    def _sync_topic_configs(self) -> None:
        """Set on each remote topic the source's configs that differ (MirrorSourceConnector's
        periodic config sync; keys the source does not set are left to the target)."""
        c = self.config
        for topic in sorted({topic for topic, _ in self.assigned}):
            remote = ConfigResource(ResourceType.TOPIC, self.policy.format_remote_topic(c.source, topic))
            try:
                current = self.target_admin.describe_configs([remote], request_timeout=REQUEST_TIMEOUT_S)[remote].result()
                changes = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
                           for name, value in sorted(self._topic_configs(topic).items())
                           if name not in current or current[name].value != value]
                if changes:
                    remote.incremental_configs = changes
                    self.target_admin.incremental_alter_configs([remote], request_timeout=REQUEST_TIMEOUT_S)[remote].result()
                    log.info("flow %s: synced %s of %s", c.name, ", ".join(e.name for e in changes), remote.name)
            except KafkaException as error:
                log.warning("flow %s: cannot sync the configs of %s (%s); trying again at the next interval",
                            c.name, remote.name, error.args[0].str())

    def _sync_topic_acls(self) -> None:
        """Create in the target the source's topic ACLs, as MM2 rewrites them (mirror/acls.py).
        A source without an authorizer has no ACLs: said once, never asked again."""
        c = self.config
        any_topic = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                                     AclOperation.ANY, AclPermissionType.ANY)
        try:
            source_bindings = self.source_admin.describe_acls(any_topic, request_timeout=REQUEST_TIMEOUT_S).result()
        except KafkaException as error:
            if error.args[0].code() == KafkaError.SECURITY_DISABLED:
                log.info("flow %s: cluster %s has no authorizer; no ACLs will be synced", c.name, c.source)
                self.source_has_authorizer = False
            else:
                log.warning("flow %s: cannot read the source's topic ACLs (%s); trying again at the next interval",
                            c.name, error.args[0].str())
            return
        wanted = acls.target_bindings(source_bindings, c.mirrors_topic,
                                      lambda topic: self.policy.format_remote_topic(c.source, topic))
        if not wanted:
            return
        try:
            for future in self.target_admin.create_acls(wanted, request_timeout=REQUEST_TIMEOUT_S).values():
                future.result()
            log.info("flow %s: %d topic ACLs synced", c.name, len(wanted))
        except KafkaException as error:
            log.warning("flow %s: cannot create topic ACLs in %s (%s); trying again at the next interval",
                        c.name, c.target, error.args[0].str())

    # ---- heartbeats, checkpoints, group offsets -------------------------------------------

    def _heartbeat(self) -> None:
        beat = Heartbeat(self.config.source, self.config.target, int(time.time() * 1000))
        self.target_producer.produce(HEARTBEATS_TOPIC, beat.value(), beat.key(), partition=0)
        self.target_producer.poll(0)

    def _checkpoints(self) -> None:
        """Translate every chosen source group's committed offsets and emit what changed
        (MirrorCheckpointTask); then, if enabled and due, write them into idle target groups."""
        c = self.config
        try:
            listing = self.source_admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S).result()
            groups = sorted(g.group_id for g in listing.valid if c.mirrors_group(g.group_id))
            translated: dict[str, list[Checkpoint]] = {}
            for group in groups:
                for tp in committed_offsets(c.source_clients, self.source_connection, group, list(self.assigned)):
                    if tp.offset < 0 or tp.error is not None:
                        continue
                    with self.store_lock:
                        downstream = self.store.translate(tp.topic, tp.partition, tp.offset)
                    if downstream < 0:
                        continue
                    remote = self.policy.format_remote_topic(c.source, tp.topic)
                    checkpoint = Checkpoint(group, remote, tp.partition, tp.offset, downstream, tp.metadata or "")
                    translated.setdefault(group, []).append(checkpoint)
        except KafkaException as error:
            log.warning("flow %s: cannot read the source's group offsets (%s); retrying at the next interval",
                        c.name, error.args[0].str())
            if error.args[0].code() == KafkaError._TIMED_OUT:
                # Seen after the source's only node was restarted behind a cut link: the admin
                # client's requests to the group coordinator kept timing out for minutes while
                # the consumers had reconnected. A new client starts from the bootstrap list.
                self.source_admin = build("admin", c.source_clients, self.source_connection)
            return
        for checkpoint in (cp for cps in translated.values() for cp in cps):
            key = (checkpoint.group, checkpoint.topic, checkpoint.partition)
            if self.checkpoints.get(key) != checkpoint:
                self.target_producer.produce(c.checkpoints_topic, checkpoint.value(), checkpoint.key(), partition=0)
                self.checkpoints[key] = checkpoint
        self.target_producer.flush(FLUSH_TIMEOUT_S)
        if c.sync_group_offsets and self._due("group-sync", time.monotonic(), c.sync_group_offsets_interval_s):
            for group, checkpoints in translated.items():
                self._sync_group(group, checkpoints)

    def _sync_group(self, group: str, checkpoints: list[Checkpoint]) -> None:
        """Write translated offsets into the target group, only while it has no members, and only
        forward (MirrorCheckpointTask.syncGroupOffset): a live consumer's position is its own."""
        c = self.config
        try:
            description = self.target_admin.describe_consumer_groups([group], request_timeout=REQUEST_TIMEOUT_S)[group].result()
            if description.state not in IDLE_GROUP_STATES or description.members:
                if group not in self.inactive_groups_warned:
                    log.warning("flow %s: group %s is active in %s; its offsets are not synced while it runs",
                                c.name, group, c.target)
                    self.inactive_groups_warned.add(group)
                return
            self.inactive_groups_warned.discard(group)
            current = committed_offsets(c.target_clients, self.target_connection, group,
                                        [(cp.topic, cp.partition) for cp in checkpoints])
            committed = {(tp.topic, tp.partition): tp.offset for tp in current}
            forward = [TopicPartition(cp.topic, cp.partition, cp.offset) for cp in checkpoints
                       if cp.offset > committed.get((cp.topic, cp.partition), -1)]
            if forward:
                self.target_admin.alter_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group, forward)], request_timeout=REQUEST_TIMEOUT_S)[group].result()
        except KafkaException as error:
            log.warning("flow %s: cannot sync group %s into %s (%s)", c.name, group, c.target, error.args[0].str())

    # ---- stop --------------------------------------------------------------------------------

    def _close(self) -> None:
        """A clean stop (the tasks have committed what they copied): send what is queued."""
        for name in ("source_producer", "target_producer"):
            if hasattr(self, name):
                getattr(self, name).flush(FLUSH_TIMEOUT_S)
        log.info("flow %s: stopped after copying %d records", self.config.name, sum(t.copied_total for t in self.tasks))


class SourceTask:
    """One of MirrorSourceConnector's tasks: copies the source partitions dealt to it with a
    consumer and a producer of its own, and commits their progress (see the module docstring)."""

    def __init__(self, flow: Flow, index: int) -> None:
        c = flow.config
        self.flow, self.config, self.index = flow, c, index
        self.stopping = flow.stopping
        self.name = f"{c.name} task {index}"
        self.assigned: dict[tuple[str, int], None] = {}  # copied by this task, in the order dealt
        self.pending: list[tuple[str, int]] = []          # dealt by the connector, not yet assigned
        self.pending_lock = threading.Lock()
        self.writer = SyncWriter(c.offset_lag_max)
        self.batch = Batch()
        self.copied_total = 0
        self.commit_due_s = 0.0
        self.error: Exception | None = None
        self.source_consumer = build("consumer", c.source_clients, flow.source_connection, **{
            "group.id": f"{c.source}-mm2", "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "isolation.level": "read_committed" if c.exactly_once else "read_uncommitted"})
        # MM2's producer overrides come from `<target>.producer.*`; linger.ms is ours unless set there.
        data_settings = {"client.id": f"{c.name}-{index}", "enable.idempotence": True, "acks": "all",
                         "partitioner": "murmur2_random",
                         **({} if "linger.ms" in c.target_clients["producer"] else {"linger.ms": 5})}
        if c.exactly_once:
            data_settings["transactional.id"] = c.transactional_id(index)
        self.data_producer = build("producer", c.target_clients, flow.target_connection, **data_settings)
        # Fences an earlier incarnation and aborts its open transaction before progress is read;
        # False when the mirror was asked to stop before the coordinator answered.
        self.ready = not c.exactly_once or init_transactions(self.data_producer, self.name, self.stopping)

    def add(self, topic: str, partition: int) -> None:
        """The connector deals a partition to this task (from the connector's thread)."""
        with self.pending_lock:
            self.pending.append((topic, partition))

    def run(self) -> None:
        c = self.config
        try:
            while not self.stopping.is_set():
                self._assign_pending()
                try:
                    self._copy_one_poll()
                    if self._commit_due():
                        self._commit()
                except Rewind as why:
                    log.warning("%s: %s; copying again from the stored progress", self.name, why)
                    self._rewind()
                    self.stopping.wait(RETRY_BACKOFF_S)
        except Exception as error:  # MirrorError: one line for the operator; anything else: logged here
            if not isinstance(error, MirrorError):
                log.exception("%s failed", self.name)
            self.error = error
            self.stopping.set()
        finally:
            self._close()

    def _assign_pending(self) -> None:
        """Start copying the partitions dealt to this task whose remote partition this task's
        producer already knows (it refuses to produce to others); the rest wait for a later loop."""
        with self.pending_lock:
            pending, self.pending = self.pending, []
        ready, waiting = [], []
        for topic, partition in pending:
            remote = self.flow.policy.format_remote_topic(self.config.source, topic)
            metadata = self.data_producer.list_topics(remote, timeout=REQUEST_TIMEOUT_S).topics.get(remote)
            known = metadata is not None and metadata.error is None and partition in metadata.partitions
            (ready if known else waiting).append((topic, partition))
        with self.pending_lock:
            self.pending[:0] = waiting
        if ready:
            self.source_consumer.incremental_assign([TopicPartition(t, p, self._start_offset(t, p)) for t, p in ready])
            self.assigned.update(dict.fromkeys(ready))
            log.info("%s: copying %s", self.name, ", ".join(f"{t}-{p}" for t, p in ready))

    def _start_offset(self, topic: str, partition: int) -> int:
        last = self.flow.progress.get((topic, partition))
        return OFFSET_BEGINNING if last is None else last + 1

    # ---- copying -----------------------------------------------------------------------------

    def _copy_one_poll(self) -> None:
        if not self.assigned:
            self.stopping.wait(POLL_TIMEOUT_S)
            return
        messages = self.source_consumer.consume(POLL_RECORDS_MAX, POLL_TIMEOUT_S)
        records = []
        for message in messages:
            if message.error() is None:
                records.append(message)
            elif message.error().code() != KafkaError._PARTITION_EOF:
                log.warning("%s: reading %s-%s: %s", self.name, message.topic(), message.partition(),
                            message.error().str())
        if not records:
            return
        if self.config.exactly_once and self.batch.produced == 0:
            self.data_producer.begin_transaction()
        for message in records:
            self._produce_copy(message)
        self.data_producer.poll(0)

    def _produce_copy(self, message) -> None:
        source_tp = (message.topic(), message.partition())
        upstream = message.offset()
        batch = self.batch

        def delivered(error, copy) -> None:
            if error is not None:
                batch.failure = batch.failure or error
            else:
                batch.delivered.append((*source_tp, upstream, copy.offset()))

        timestamp_type, timestamp_ms = message.timestamp()
        while True:
            try:
                self.data_producer.produce(
                    self.flow.policy.format_remote_topic(self.config.source, message.topic()), message.value(),
                    message.key(), partition=message.partition(), headers=message.headers(),
                    timestamp=0 if timestamp_type == TIMESTAMP_NOT_AVAILABLE else timestamp_ms, on_delivery=delivered)
                break
            except BufferError:  # librdkafka's queue is full: let deliveries drain
                self.data_producer.poll(0.1)
        batch.last_consumed[source_tp] = upstream
        batch.produced += 1

    def _commit(self) -> None:
        """Make the batch's copies and the progress after them durable, then send offset syncs."""
        c, batch = self.config, self.batch
        if batch.produced == 0:
            return
        progress = [(c.offsets_topic, progress_key(c.source, topic, partition), progress_value(last))
                    for (topic, partition), last in sorted(batch.last_consumed.items())]
        if c.exactly_once:
            for topic, key, value in progress:
                self.data_producer.produce(topic, value, key)
            try:
                self.data_producer.commit_transaction(FLUSH_TIMEOUT_S)
            except KafkaException as exception:
                self._transaction_failed(exception.args[0])
        elif c.bug_commit_before_ack:
            # kspec.bug.mirror.commit.before.ack: the progress is written and acknowledged while
            # the copies may still wait in the producer (linger.ms): a kill -9 now loses them.
            for topic, key, value in progress:
                self.flow.target_producer.produce(topic, value, key, on_delivery=self._progress_delivered)
            self.flow.target_producer.flush(FLUSH_TIMEOUT_S)
        else:
            self._flush_or_rewind()
            for topic, key, value in progress:
                self.data_producer.produce(topic, value, key, on_delivery=self._progress_delivered)
            self._flush_or_rewind()
        if batch.failure is not None:
            raise Rewind(f"a copy was refused: {batch.failure.str()}")
        self.flow.progress.update(batch.last_consumed)
        self.copied_total += batch.produced
        self.batch = Batch()
        self._offset_syncs(batch)

    def _progress_delivered(self, error, _message) -> None:
        if error is not None:
            self.batch.failure = self.batch.failure or error

    def _flush_or_rewind(self) -> None:
        if self.data_producer.flush(FLUSH_TIMEOUT_S) > 0:
            raise Rewind(f"the target did not acknowledge within {FLUSH_TIMEOUT_S:.0f} s")

    def _transaction_failed(self, error: KafkaError) -> None:
        if error.fatal():
            raise MirrorError(f"{self.name}: the transactional producer {self.config.transactional_id(self.index)} "
                              f"cannot go on ({error.str()}); another mirror of this flow may have fenced it")
        if error.txn_requires_abort():
            self.data_producer.abort_transaction(REQUEST_TIMEOUT_S)
        raise Rewind(f"the transaction failed: {error.str()}")

    def _rewind(self) -> None:
        """Forget the uncommitted batch and read every partition again after its stored progress."""
        if self.config.exactly_once and self.batch.produced:
            try:
                self.data_producer.abort_transaction(REQUEST_TIMEOUT_S)
            except KafkaException:
                pass  # no transaction was open any more
        self.data_producer.flush(FLUSH_TIMEOUT_S)
        self.batch = Batch()
        self.source_consumer.assign([TopicPartition(t, p, self._start_offset(t, p)) for t, p in self.assigned])

    def _offset_syncs(self, batch: Batch) -> None:
        c = self.config
        if not c.emit_offset_syncs:
            return
        syncs = [s for d in sorted(batch.delivered, key=lambda d: (d[0], d[1], d[2]))
                 if (s := self.writer.copied(*d)) is not None]
        for sync in syncs + self.writer.deferred():
            self.flow.source_producer.produce(c.offset_syncs_topic, sync.value(), sync.key(), partition=0)
            with self.flow.store_lock:
                self.flow.store.add(sync)
        self.flow.source_producer.poll(0)

    def _commit_due(self) -> bool:
        """At least once: every offset.flush.interval.ms. Exactly once: after every poll, or
        every transaction.boundary.interval.ms with transaction.boundary=interval (KIP-618)."""
        c = self.config
        if c.exactly_once and c.transaction_boundary == "poll":
            return True
        interval_ms = c.transaction_boundary_interval_ms if c.exactly_once else c.offset_flush_interval_ms
        now_s = time.monotonic()
        if now_s < self.commit_due_s:
            return False
        self.commit_due_s = now_s + interval_ms / 1000
        return True

    def _close(self) -> None:
        """A clean stop: commit what was copied, then leave the source cluster."""
        try:
            if self.batch.produced:
                self._commit()
        except (Rewind, KafkaException) as error:
            log.warning("%s: the last batch was not committed (%s); it is copied again at the next start",
                        self.name, error)
        self.source_consumer.close()
