"""Distributed mode: workers sharing group.id form one Connect cluster.

- Membership: the workers join a group with protocol type `connect` (connect/protocol.py)
  through kafka-python's BaseCoordinator. The leader reads the config topic to the largest
  offset any member has seen, assigns connectors and tasks (eager or KIP-415 incremental
  cooperative) and tells everyone its REST URL.
- Configs live in the compacted config topic (config.storage.topic, one partition), written
  by the leader only: connector-<name> {"properties"}, task-<name>-<i> {"properties"},
  commit-<name> {"tasks": n} (which makes a set of task configs take effect at once),
  target-state-<name> {"state"}, restart-connector-<name> {"include-tasks","only-failed"}.
- Source offsets in offset.storage.topic keyed ["<connector>",{partition}]; states in
  status.storage.topic keyed status-connector-<name> / status-task-<name>-<i>.
- A worker that runs a connector asks it for task configs and sends them to the leader
  (POST /connectors/<name>/tasks); REST writes that reach a follower are forwarded to the
  leader by the REST layer.
- One herder thread does everything that changes what this worker runs: applying
  assignments, reacting to config records, scheduled rejoins (the KIP-415 delay).
"""
from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request

from confluent_kafka import KafkaException
from kafka.coordinator.base import BaseCoordinator
from kafka.net.compat import KafkaNetClient

from connect import protocol
from connect.api import ConnectError
from connect.config import WorkerConfig
from connect.herder import (AlreadyExists, BadRequest, ConnectRestError, Forward, Herder, MemoryStatusStore,
                            NotFound, NotLeader, Rebalancing, Status)
from connect.plugins import Plugins
from connect.protocol import CONNECTOR_TASK, Work
from connect.signing import SessionKey, SignatureError, signature_headers, verify
from connect.kafkalog import KafkaBasedLog
from connect.worker import OffsetStore, TaskId, Worker

log = logging.getLogger("connect.distributed")

HERDER_TICK_S = 0.2
JOIN_TIMEOUT_MS = 1000
TASK_CONFIGS_POST_TIMEOUT_S = 30.0
# the leader's wait for the config topic before it assigns (then CONFIG_MISMATCH: everyone rejoins)
ASSIGN_CONFIG_READ_TIMEOUT_S = 3.0
FENCING_TIMEOUT_S = 60.0        # a task waits this long for its zombie fencing, then FAILS
FENCING_RETRY_BACKOFF_S = 0.5   # between attempts (no leader yet, a rebalance)
# librdkafka client settings -> kafka-python keyword arguments, for the group membership client.
KAFKA_PYTHON_NAMES = {"bootstrap.servers": "bootstrap_servers", "security.protocol": "security_protocol",
                      "sasl.mechanism": "sasl_mechanism", "sasl.mechanisms": "sasl_mechanism",
                      "sasl.username": "sasl_plain_username", "sasl.password": "sasl_plain_password",
                      "ssl.ca.location": "ssl_cafile", "ssl.certificate.location": "ssl_certfile",
                      "ssl.key.location": "ssl_keyfile", "ssl.key.password": "ssl_password"}


def _json(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _target_state_value(state: str) -> dict:
    """A target-state-<name> record: STOPPED (KIP-875) is state.v2, with PAUSED for older workers."""
    return {"state": "PAUSED", "state.v2": "STOPPED"} if state == "STOPPED" else {"state": state}


class ConfigState:
    """The config topic, as read so far."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.connectors: dict[str, dict[str, str]] = {}
        self.tasks: dict[str, list[dict[str, str]]] = {}
        self.target_states: dict[str, str] = {}
        self.pending_tasks: dict[str, dict[int, dict[str, str]]] = {}
        self.restarts: list[tuple[str, bool, bool]] = []
        # KIP-618: the task count the last zombie fencing recorded (tasks-fencing-<name>), how
        # many task config sets were committed, and which connectors' newest task set has not
        # been fenced for yet (a commit-<name> after the last tasks-fencing-<name>)
        self.session_key: SessionKey | None = None  # KIP-507, written by the leader
        self.task_count_records: dict[str, int] = {}
        self.task_generations: dict[str, int] = {}
        self.pending_fencing: set[str] = set()
        self.offset = 0  # the offset after the last record read
        self.changed = threading.Event()

    def on_record(self, message) -> None:
        key = message.key().decode()
        value = json.loads(message.value()) if message.value() is not None else None
        with self.lock:
            if key.startswith("connector-"):
                name = key[len("connector-"):]
                if value is None:
                    for table in (self.connectors, self.tasks, self.target_states, self.pending_tasks,
                                  self.task_count_records):
                        table.pop(name, None)
                    self.pending_fencing.discard(name)
                else:
                    self.connectors[name] = value["properties"]
            elif key.startswith("task-"):
                name, _, index = key[len("task-"):].rpartition("-")
                if value is not None:
                    self.pending_tasks.setdefault(name, {})[int(index)] = value["properties"]
            elif key.startswith("commit-"):
                name = key[len("commit-"):]
                pending, count = self.pending_tasks.pop(name, {}), value["tasks"]
                if all(i in pending for i in range(count)):
                    self.tasks[name] = [pending[i] for i in range(count)]
                    self.task_generations[name] = self.task_generations.get(name, 0) + 1
                    self.pending_fencing.add(name)
                else:
                    log.error("config topic: commit-%s names %d tasks, only %s were written", name, count,
                              sorted(pending))
            elif key.startswith("target-state-"):
                name = key[len("target-state-"):]
                if value is None:
                    self.target_states.pop(name, None)
                else:
                    self.target_states[name] = value.get("state.v2", value["state"])
            elif key == "session-key" and value is not None:
                self.session_key = SessionKey.from_record(value)
            elif key.startswith("tasks-fencing-") and value is not None:
                name = key[len("tasks-fencing-"):]
                self.task_count_records[name] = value["task-count"]
                self.pending_fencing.discard(name)
            elif key.startswith("restart-connector-") and value is not None:
                self.restarts.append((key[len("restart-connector-"):], value.get("include-tasks", False),
                                      value.get("only-failed", False)))
            self.offset = message.offset() + 1
        self.changed.set()

    def snapshot(self) -> tuple[dict, dict, dict, int]:
        with self.lock:
            return (dict(self.connectors), {k: list(v) for k, v in self.tasks.items()}, dict(self.target_states),
                    self.offset)

    def configured_work(self) -> list[Work]:
        with self.lock:
            return [w for name in sorted(self.connectors)
                    for w in [Work(name)] + [Work(name, i) for i in range(len(self.tasks.get(name, [])))]]


class KafkaOffsetStore(OffsetStore):
    def __init__(self, config: WorkerConfig, clients: dict) -> None:
        self.data: dict[bytes, bytes] = {}
        self.log = KafkaBasedLog(config["offset.storage.topic"], clients, self._on_record,
                                 partitions=config.int("offset.storage.partitions"),
                                 replication_factor=config.int("offset.storage.replication.factor"))

    def _on_record(self, message) -> None:
        if message.value() is None:
            self.data.pop(message.key(), None)
        else:
            self.data[message.key()] = message.value()

    def get(self, key):
        return self.data.get(key)

    def entries(self):
        self.log.read_to_end()
        return dict(self.data)

    def put_all(self, offsets):
        for key, value in offsets.items():
            self.log.send(key, value)
        self.log.flush()


class KafkaStatusStore(MemoryStatusStore):
    """States written to status.storage.topic and read back from it, so any worker answers
    GET /connectors/<name>/status for the whole cluster."""

    def __init__(self, config: WorkerConfig, clients: dict, worker_id: str) -> None:
        super().__init__(worker_id)
        self.log = KafkaBasedLog(config["status.storage.topic"], clients, self._on_record,
                                 partitions=config.int("status.storage.partitions"),
                                 replication_factor=config.int("status.storage.replication.factor"))

    def on_status(self, connector, task, state, trace=None):
        key = f"status-connector-{connector}" if task is None else f"status-task-{connector}-{task}"
        self.log.send(key.encode(), _json({"state": state, "trace": trace, "worker_id": self.worker_id,
                                           "generation": self.generation}))
        self.log.producer.poll(0)

    def _on_record(self, message) -> None:
        key = message.key().decode()
        if key.startswith("status-connector-"):
            connector, task = key[len("status-connector-"):], None
        elif key.startswith("status-task-"):
            connector, _, index = key[len("status-task-"):].rpartition("-")
            task = int(index)
        else:
            return  # status-topic-* (KIP-558 active topics) are not tracked
        value = json.loads(message.value()) if message.value() is not None else None
        self.put(connector, task, value and Status(value["state"], value.get("trace"), value["worker_id"],
                                                   value["generation"]))


class WorkerCoordinator(BaseCoordinator):
    """Membership in the Connect group; calls back into the herder on the client's IO thread."""

    def __init__(self, client, herder: DistributedHerder, **configs) -> None:
        super().__init__(client, **configs)
        self.herder = herder

    def protocol_type(self):
        return "connect"

    def group_protocols(self):
        state = protocol.WorkerState(self.herder.url, self.herder.config_state.offset,
                                     frozenset(self.herder.running))
        return [(name, protocol.encode_metadata(version, state))
                for name, version in protocol.PROTOCOLS[self.herder.config["connect.protocol"]]]

    async def _on_join_prepare_async(self, generation, member_id, timeout_ms=None):
        if self._generation.protocol == "default":
            self.herder.revoke_all()  # eager: nothing runs across a rebalance

    def _perform_assignment(self, leader_id, protocol_name, members):
        return self.herder.assign(leader_id, protocol_name,
                                  {m.member_id: protocol.decode_metadata(m.metadata) for m in members})

    async def _on_join_complete_async(self, generation, member_id, protocol_name, member_assignment_bytes):
        self.herder.on_assignment(generation, member_id, protocol_name,
                                  protocol.decode_assignment(member_assignment_bytes))


class DistributedHerder(Herder):
    def __init__(self, config: WorkerConfig, plugins: Plugins, worker_id: str, url: str) -> None:
        clients = {kind: config.client_configs(kind) for kind in ("producer", "consumer", "admin")}
        super().__init__(config, plugins, KafkaStatusStore(config, clients, worker_id))
        self.url = url
        self.config_state = ConfigState()
        self.config_log = KafkaBasedLog(config["config.storage.topic"], clients, self.config_state.on_record,
                                        partitions=1,
                                        replication_factor=config.int("config.storage.replication.factor"))
        self.offsets = KafkaOffsetStore(config, clients)
        self.worker = Worker(config, plugins, self.offsets, self.status, worker_id)
        self.worker.before_exactly_once_producer = self._fence_before_producer
        self.fencing_lock = threading.Lock()  # one zombie fencing at a time on the leader
        self.assignor = protocol.IncrementalAssignor(config.int("scheduled.rebalance.max.delay.ms"))
        self.running: set[Work] = set()
        self.leader_url: str | None = None
        self.is_leader = False
        self.sessioned = False  # the group chose connect.protocol sessioned: internal requests are signed
        self.pending_assignment: tuple | None = None
        self.rejoin_at: float | None = None
        self.publish_pending: set[str] = set()  # connectors whose task configs the leader has not stored
        self.applied: tuple[dict, dict, dict] = ({}, {}, {})
        self.lock = threading.RLock()  # the herder's own state; REST reads take it briefly
        self.stopping = threading.Event()
        self.config_log.read_to_end()
        self._sync_views()
        client_configs = {KAFKA_PYTHON_NAMES[k]: v for k, v in clients["consumer"].items() if k in KAFKA_PYTHON_NAMES}
        self.client = KafkaNetClient(client_id=f"connect-{worker_id}", **client_configs)
        self.client._net.start()
        self.client._manager.bootstrap(30000)
        self.coordinator = WorkerCoordinator(
            self.client, self, group_id=config["group.id"], session_timeout_ms=config.int("session.timeout.ms"),
            heartbeat_interval_ms=config.int("heartbeat.interval.ms"),
            max_poll_interval_ms=config.int("rebalance.timeout.ms"),
            api_version=self.client._manager.broker_version)
        self.thread = threading.Thread(target=self._run, name="herder", daemon=True)
        self.thread.start()

    # the herder thread
    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.coordinator.ensure_active_group(timeout_ms=JOIN_TIMEOUT_MS)
                self.coordinator.poll_heartbeat()
                self._apply_assignment()
                self._apply_config_changes()
                self._rotate_session_key()
                for name in sorted(self.publish_pending):
                    self._publish_task_configs(name)
                if self.rejoin_at is not None and time.monotonic() >= self.rejoin_at:
                    self.rejoin_at = None
                    self.coordinator.request_rejoin()
            except Exception:
                if self.stopping.is_set():
                    break
                log.exception("herder tick failed; retrying")
            self.config_state.changed.wait(HERDER_TICK_S)
            self.config_state.changed.clear()

    def assign(self, leader_id: str, protocol_name: str, members: dict[str, protocol.WorkerState]) -> dict:
        """The leader's assignment (on the client's IO thread)."""
        max_offset = max(m.config_offset for m in members.values())
        if self.config_state.offset < max_offset:  # as Connect's leader: read on only when a member saw more
            try:  # this runs on the client's IO thread: while it blocks, no heartbeat goes out
                self.config_log.read_to_end(ASSIGN_CONFIG_READ_TIMEOUT_S)
            except (TimeoutError, KafkaException) as e:
                log.info("config topic not read to offset %d for the assignment (%s)", max_offset, e)
        offset = self.config_state.offset
        configured = self.config_state.configured_work()
        if offset < max_offset:  # a member has seen configs the leader cannot read yet
            log.warning("config topic read to offset %d, but a member has read to %d: assignment failed "
                        "(CONFIG_MISMATCH), everyone rejoins", offset, max_offset)
            mismatch = protocol.Assignment(protocol.CONFIG_MISMATCH, leader_id, self.url, offset)
            return {m: protocol.encode_assignment(0, mismatch) for m in members}
        if protocol_name == "default":
            full = protocol.eager_assign(members, configured)
            return {m: protocol.encode_assignment(0, protocol.Assignment(
                protocol.NO_ERROR, leader_id, self.url, offset, full[m])) for m in members}
        full, revoked, delay_ms = self.assignor.assign(members, configured, int(time.monotonic() * 1000))
        log.info("assignment (delay %d ms): %s; revoked %s", delay_ms,
                 {m: sorted(map(str, w)) for m, w in full.items()}, {m: sorted(map(str, w)) for m, w in revoked.items()})
        return {m: protocol.encode_assignment(protocol.VERSIONS[protocol_name], protocol.Assignment(
            protocol.NO_ERROR, leader_id, self.url, offset,
            full[m] - (members[m].allocation or frozenset()),  # KIP-415: only what is new to the member
            revoked[m], delay_ms)) for m in members}

    def on_assignment(self, generation: int, member_id: str, protocol_name: str, a: protocol.Assignment) -> None:
        with self.lock:
            self.pending_assignment = (generation, member_id, protocol_name, a)
        self.config_state.changed.set()

    def revoke_all(self) -> None:
        with self.lock:
            self._stop_work(set(self.running))
            self.running = set()

    def _apply_assignment(self) -> None:
        """Apply the newest assignment. The reads it needs (the config topic up to the leader's
        offset, the offsets topic for source tasks) come first and may time out while the
        cluster is faulted: the assignment then stays pending and is applied at a later tick.
        Marking its work running before it started would lose that work for good: the worker
        reports it as its own in every later rebalance, so the leader never deals it again."""
        with self.lock:
            if self.pending_assignment is None:
                return
            generation, member_id, protocol_name, a = self.pending_assignment
            if a.error == protocol.CONFIG_MISMATCH:
                log.warning("generation %d: assignment failed (the leader's config offset %d, ours %d); "
                            "reading the config topic to its end and rejoining", generation, a.config_offset,
                            self.config_state.offset)
                self.pending_assignment = None
                self.config_log.read_to_end()
                self.coordinator.request_rejoin()
                return
            if a.config_offset > self.config_state.offset:
                self.config_log.read_to_end()
            new = set(a.assigned) - (self.running - a.revoked)
            if any(w.task != CONNECTOR_TASK for w in new):
                self.offsets.log.read_to_end()  # a moved source task resumes from the latest committed offset
            self.pending_assignment = None
            self.status.generation = generation
            self.leader_url, self.is_leader = a.leader_url, a.leader == member_id
            self.sessioned = protocol_name == "sessioned"
            self._sync_views()
            self._stop_work(set(a.revoked))
            self.running -= a.revoked
            self.running |= new
            self._start_work(new)
            log.info("generation %d: running %s (leader %s)", generation, sorted(map(str, self.running)),
                     a.leader_url)
            if a.revoked:
                self.coordinator.request_rejoin()  # KIP-415: give back, then rejoin so it can be reassigned
            if a.delay_ms:
                self.rejoin_at = time.monotonic() + a.delay_ms / 1000

    def _sync_views(self) -> None:
        connectors, tasks, target_states, _ = self.config_state.snapshot()
        self.configs, self.task_props, self.target_states = connectors, tasks, target_states

    def _apply_config_changes(self) -> None:
        with self.lock:
            old_connectors, old_tasks, old_states = self.applied
            self._sync_views()
            connectors, tasks, states = self.configs, self.task_props, self.target_states
            self.applied = (connectors, tasks, states)
            with self.config_state.lock:
                restarts, self.config_state.restarts = self.config_state.restarts, []
            if set(connectors) != set(old_connectors) or any(
                    len(tasks.get(n, [])) != len(old_tasks.get(n, [])) for n in set(tasks) | set(old_tasks)):
                self.coordinator.request_rejoin()  # work was added or removed: the leader deals again
            gone = {w for w in self.running if w.connector not in connectors}
            self._stop_work(gone)
            self.running -= gone
            for name in connectors:
                if name not in old_connectors:
                    continue
                mine = {w for w in self.running if w.connector == name}
                if connectors[name] != old_connectors[name] and Work(name) in mine:
                    self._restart_work({Work(name)})
                changed_tasks = {w for w in mine if w.task != CONNECTOR_TASK and tasks.get(name) != old_tasks.get(name)}
                self._restart_work(changed_tasks)
                if states.get(name) != old_states.get(name):
                    state, old_state = states.get(name, "STARTED"), old_states.get(name, "STARTED")
                    if "STOPPED" in (state, old_state) and Work(name) in mine:
                        self._restart_work({Work(name)})  # _start_work leaves a STOPPED connector stopped
                    if state != "STOPPED":
                        self.worker.set_target_state(name, state)
            for name, include_tasks, only_failed in restarts:
                works = {w for w in self.running if w.connector == name
                         and (include_tasks or w.task == CONNECTOR_TASK)
                         and (not only_failed or self._failed(w))}
                self._restart_work(works)

    def _failed(self, work: Work) -> bool:
        table, key = ((self.status.connectors, work.connector) if work.task == CONNECTOR_TASK
                      else (self.status.tasks, TaskId(work.connector, work.task)))
        return key in table and table[key].state == "FAILED"

    def _restart_work(self, works: set[Work]) -> None:
        self._stop_work(works)
        if any(w.task != CONNECTOR_TASK for w in works):
            self.offsets.log.read_to_end()  # the task resumes from the offsets its last instance committed
        self._start_work(works)

    def _stop_work(self, works: set[Work]) -> None:
        self.worker.stop_tasks([TaskId(w.connector, w.task) for w in works if w.task != CONNECTOR_TASK])
        for w in works:
            if w.task == CONNECTOR_TASK:
                self.worker.stop_connector(w.connector)

    def _start_work(self, works: set[Work]) -> None:
        """Start connectors and tasks; a caller starting a source task has read the offsets topic to its end."""
        for w in sorted(works):
            if w.connector not in self.configs:
                continue
            state = self.target_states.get(w.connector, "STARTED")
            if w.task == CONNECTOR_TASK and state == "STOPPED":
                self.status.on_status(w.connector, None, "STOPPED")
            elif w.task == CONNECTOR_TASK:
                if self.worker.start_connector(w.connector, self.configs[w.connector], state,
                                               on_reconfigure=self._request_reconfiguration):
                    self.publish_pending.add(w.connector)
            elif w.task < len(self.task_props.get(w.connector, [])):
                self.worker.start_task(TaskId(w.connector, w.task), self.configs[w.connector],
                                       self.task_props[w.connector][w.task], state)

    def _request_reconfiguration(self, name: str) -> None:
        """A connector asked for its task configs to be read again (any thread)."""
        self.publish_pending.add(name)
        self.config_state.changed.set()

    def _publish_task_configs(self, name: str) -> None:
        """Send the connector's task configs to the leader when they differ from the stored ones;
        on failure (no leader yet, a rebalance) it stays pending and is tried at the next tick."""
        connector = self.worker.connectors.get(name)
        configs = connector.task_configs() if connector is not None and not connector.failed else []
        if not configs or configs == self.task_props.get(name):
            self.publish_pending.discard(name)
            return
        if self.is_leader:
            self._write_task_configs(name, configs)
            self.publish_pending.discard(name)
            return
        if self.leader_url is None:
            return
        body = json.dumps(configs).encode()
        request = urllib.request.Request(f"{self.leader_url.rstrip('/')}/connectors/{name}/tasks?forward=true",
                                         data=body, method="POST",
                                         headers={"Content-Type": "application/json", **self._signed(body)})
        try:
            urllib.request.urlopen(request, timeout=TASK_CONFIGS_POST_TIMEOUT_S).close()
        except (urllib.error.URLError, OSError) as e:
            log.info("connector %s: task configs not sent to the leader %s (%s); trying again", name,
                     self.leader_url, e)
            return
        self.publish_pending.discard(name)

    # KIP-507: the session key and the signatures of internal requests
    def _rotate_session_key(self) -> None:
        """The leader writes a new session key when there is none or it is older than its TTL."""
        if not (self.is_leader and self.sessioned):
            return
        now_ms = int(time.time() * 1000)
        key = self.config_state.session_key
        if key is not None and now_ms < key.creation_timestamp_ms + self.config.int("inter.worker.key.ttl.ms"):
            return
        size = self.config.get("inter.worker.key.size")
        key = SessionKey.generate(self.config["inter.worker.key.generation.algorithm"], now_ms,
                                  int(size) if size else None)
        self.config_log.send(b"session-key", _json(key.record()))
        self._write_and_read()
        log.info("wrote a new session key (%s)", key.algorithm)

    def _signed(self, body: bytes) -> dict[str, str]:
        key = self.config_state.session_key
        if not self.sessioned or key is None:
            return {}
        return signature_headers(key, self.config["inter.worker.signature.algorithm"], body)

    def verify_internal_request(self, body: bytes, headers) -> None:
        if not self.sessioned:
            return
        algorithms = [a.strip() for a in self.config["inter.worker.verification.algorithms"].split(",") if a.strip()]
        try:
            verify(self.config_state.session_key, algorithms, body, headers)
        except SignatureError as e:
            error = ConnectRestError(e.message)
            error.status = e.status
            raise error from None

    # leader-only writes
    def _require_leader(self) -> None:
        if not self.is_leader:
            raise NotLeader(self.leader_url)

    def _write_task_configs(self, name: str, configs: list[dict]) -> None:
        for i, props in enumerate(configs):
            self.config_log.send(f"task-{name}-{i}".encode(), _json({"properties": props}))
        self.config_log.send(f"commit-{name}".encode(), _json({"tasks": len(configs)}))
        self.config_log.flush()

    def fence_zombies(self, name: str) -> None:
        """KIP-618 zombie fencing, by the leader (PUT /connectors/<name>/fence): before a new
        generation of a source connector's tasks runs with exactly-once support, the producers
        of the previous generation's task ids, as many as its tasks-fencing-<name> record
        counted, are fenced; then tasks-fencing-<name> {"task-count": n} records the new
        generation's count, so the next fencing knows which ids to fence. Nothing to fence the
        first time (no record: no transactional producer ever ran) or when one task follows
        one task (the new task's own InitProducerId fences its predecessor)."""
        self._require_leader()
        with self.fencing_lock:
            self.config_log.read_to_end()
            self._sync_views()
            self._require(name)
            if self.connector_type(name) != "source":
                raise BadRequest(f"Connector {name} is not a source connector")
            with self.config_state.lock:
                if name not in self.config_state.pending_fencing:
                    return  # the newest task set has been fenced for already
                previous = self.config_state.task_count_records.get(name)
                task_count = len(self.config_state.tasks.get(name, []))
                generation = self.config_state.task_generations.get(name, 0)
            fenced = previous if previous is not None and (previous, task_count) != (1, 1) else 0
            self.worker.fence_producers(name, fenced)
            self.config_log.read_to_end()
            with self.config_state.lock:
                if self.config_state.task_generations.get(name, 0) != generation:
                    raise Rebalancing(f"Zombie fencing for {name} raced with a reconfiguration of its tasks")
            self.config_log.send(f"tasks-fencing-{name}".encode(), _json({"task-count": task_count}))
            self._write_and_read()
            log.info("connector %s: zombie fencing done (%d task ids fenced; the new generation has %d tasks)",
                     name, fenced, task_count)

    def _fence_before_producer(self, task_id: TaskId, stopping: threading.Event) -> None:
        """On an exactly-once source task's thread: have the leader fence the connector's zombie
        producers (forwarded as PUT /connectors/<name>/fence when another worker leads)."""
        deadline = time.monotonic() + FENCING_TIMEOUT_S
        while True:
            with self.config_state.lock:
                if task_id.connector not in self.config_state.pending_fencing:
                    return
            try:
                if self.is_leader:
                    self.fence_zombies(task_id.connector)
                elif self.leader_url is None:
                    raise Rebalancing("no leader yet")
                else:
                    request = urllib.request.Request(
                        f"{self.leader_url.rstrip('/')}/connectors/{task_id.connector}/fence?forward=true",
                        method="PUT", headers={"Content-Type": "application/json", **self._signed(b"")})
                    urllib.request.urlopen(request, timeout=FENCING_TIMEOUT_S).close()
                    self.config_log.read_to_end()  # the leader's tasks-fencing record
                return
            except (ConnectRestError, urllib.error.URLError, OSError, TimeoutError, KafkaException) as e:
                if isinstance(e, KafkaException) and not e.args[0].retriable() or stopping.is_set() \
                        or time.monotonic() > deadline:
                    raise ConnectError(f"zombie fencing for connector {task_id.connector} failed: {e}") from e
                log.info("task %s: zombie fencing not done yet (%s); trying again", task_id, e)
                stopping.wait(FENCING_RETRY_BACKOFF_S)

    def put_task_configs(self, name: str, configs: list[dict]) -> None:
        self._require_leader()
        self._require(name)
        self._write_task_configs(name, [{k: str(v) for k, v in c.items()} for c in configs])

    def put_connector_config(self, name: str, props: dict[str, str], allow_replace: bool,
                             initial_state: str = "STARTED") -> tuple[bool, dict]:
        self._require_leader()
        props = self.checked(name, props)
        self.config_log.read_to_end()
        self._sync_views()
        created = name not in self.configs
        if not created and not allow_replace:
            raise AlreadyExists(f"Connector {name} already exists")
        if created:
            self.config_log.send(f"target-state-{name}".encode(), _json(_target_state_value(initial_state)))
        self.config_log.send(f"connector-{name}".encode(), _json({"properties": props}))
        self._write_and_read()
        return created, self.connector_info(name)

    def delete_connector(self, name: str) -> None:
        self._require_leader()
        self._require(name)
        self.config_log.send(f"connector-{name}".encode(), None)
        self.config_log.send(f"target-state-{name}".encode(), None)
        self._write_and_read()

    def offset_store(self):
        return self.offsets

    def stop_connector(self, name: str) -> None:
        """KIP-875: target state STOPPED, then an empty set of task configs, so every task stops
        and the connector's offsets may be altered or reset."""
        self._require_leader()
        self._require(name)
        self.config_log.send(f"target-state-{name}".encode(), _json(_target_state_value("STOPPED")))
        self._write_task_configs(name, [])
        self._write_and_read()

    def alter_offsets(self, name: str, offsets) -> str:
        self._require_leader()  # the leader reads the config topic to its end: is it STOPPED?
        self.config_log.read_to_end()
        self._sync_views()
        return super().alter_offsets(name, offsets)

    def reset_offsets(self, name: str) -> str:
        self._require_leader()
        self.config_log.read_to_end()
        self._sync_views()
        return super().reset_offsets(name)

    def pause_connector(self, name: str) -> None:
        self._set_target_state(name, "PAUSED")

    def resume_connector(self, name: str) -> None:
        self._set_target_state(name, "STARTED")

    def _set_target_state(self, name: str, state: str) -> None:
        self._require_leader()
        self._require(name)
        self.config_log.send(f"target-state-{name}".encode(), _json({"state": state}))
        self._write_and_read()

    def restart_connector(self, name: str, include_tasks: bool = False, only_failed: bool = False) -> None:
        self._require_leader()
        self._require(name)
        self.config_log.send(f"restart-connector-{name}".encode(),
                             _json({"include-tasks": include_tasks, "only-failed": only_failed}))
        self._write_and_read()

    def restart_task(self, name: str, task: int) -> None:
        """Restarted by the worker that runs it; another worker forwards the request there."""
        self._require(name)
        work = Work(name, task)
        with self.lock:
            if work in self.running:
                self._restart_work({work})
                return
        status = self.status.tasks.get(TaskId(name, task))
        if task >= len(self.task_props.get(name, [])) or status is None:
            raise NotFound(f"Task {name}-{task} not found")
        raise Forward(f"http://{status.worker_id}/", f"Task {name}-{task} runs on {status.worker_id}")

    def _write_and_read(self) -> None:
        self.config_log.flush()
        self.config_log.read_to_end()
        self._sync_views()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()
        with self.lock:
            self._stop_work(set(self.running))
            self.running = set()
        try:
            self.coordinator.maybe_leave_group("worker stopping")
            self.coordinator.close()
        except Exception:
            log.exception("leaving the group failed")
        for store in (self.config_log, self.offsets.log, self.status.log):
            store.stop()

