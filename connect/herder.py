"""What standalone and distributed herders share: the REST-facing operations, the errors
they answer with, and the status store's view (connector and task states by worker).

A herder owns the connectors' configs and target states and decides which of them this
worker runs. Its operations are synchronous; the REST server calls them off its loop.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass

from connect.api import SinkConnector
from connect.config import WorkerConfig, validate, validation_errors
from connect.plugins import PluginNotFound, Plugins
from connect.worker import OffsetStore, StatusListener, TaskId, offset_key

ADMIN_TIMEOUT_S = 30.0


class ConnectRestError(Exception):
    """An error answered as {"error_code": status, "message": ...}."""
    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(ConnectRestError):
    status = 404


class AlreadyExists(ConnectRestError):
    status = 409


class Rebalancing(ConnectRestError):
    status = 409


class BadRequest(ConnectRestError):
    status = 400


class Forward(ConnectRestError):
    """Another worker must do this; the REST layer forwards the request to `url` (409 when
    there is none yet, e.g. during a rebalance)."""
    status = 409

    def __init__(self, url: str | None, why: str) -> None:
        super().__init__(why if url else "Cannot complete request because of a conflicting operation "
                                          "(e.g. worker rebalance)")
        self.url = url


class NotLeader(Forward):
    def __init__(self, leader_url: str | None) -> None:
        super().__init__(leader_url, f"This worker is not the leader; the leader is {leader_url}")


@dataclass
class Status:
    state: str
    trace: str | None
    worker_id: str
    generation: int


class MemoryStatusStore(StatusListener):
    """Connector and task states in memory: the standalone store, and the distributed
    store's view of the status topic. A state from an older generation never replaces a
    newer one (a stopped worker's UNASSIGNED arriving after the new owner's RUNNING)."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self.generation = 0
        self.connectors: dict[str, Status] = {}
        self.tasks: dict[TaskId, Status] = {}
        self.lock = threading.Lock()

    def on_status(self, connector, task, state, trace=None):
        self.put(connector, task, Status(state, trace, self.worker_id, self.generation))

    def put(self, connector: str, task: int | None, status: Status | None) -> None:
        with self.lock:
            table, key = (self.connectors, connector) if task is None else (self.tasks, TaskId(connector, task))
            if status is None:
                table.pop(key, None)
            elif key not in table or table[key].generation <= status.generation:
                table[key] = status

    def forget(self, connector: str) -> None:
        with self.lock:
            self.connectors.pop(connector, None)
            for task_id in [t for t in self.tasks if t.connector == connector]:
                del self.tasks[task_id]


class Herder:
    """The operations of Connect's REST API on one cluster's connectors.

    Subclasses keep `configs` (connector name -> props), `task_props` (name -> task configs)
    and `target_states` (name -> STARTED/PAUSED) current and implement the writes."""

    def __init__(self, config: WorkerConfig, plugins: Plugins, status: MemoryStatusStore) -> None:
        self.config, self.plugins, self.status = config, plugins, status
        self.configs: dict[str, dict[str, str]] = {}
        self.task_props: dict[str, list[dict[str, str]]] = {}
        self.target_states: dict[str, str] = {}
        self._cluster_id: str | None = None

    def kafka_cluster_id(self) -> str | None:
        if self._cluster_id is None:
            from confluent_kafka.admin import AdminClient
            admin = AdminClient({**self.config.client_configs("admin"), "log_level": 0})
            self._cluster_id = admin.list_topics(timeout=10).cluster_id
        return self._cluster_id

    def put_task_configs(self, name: str, configs: list[dict]) -> None:
        raise BadRequest("task configs are written by a distributed cluster's leader only")

    # KIP-875: a connector's offsets, read at any time, altered or reset only while it is STOPPED
    def offset_store(self) -> OffsetStore:
        """The source offsets, read up to date (subclasses)."""
        raise NotImplementedError

    def connector_offsets(self, name: str) -> list[dict]:
        """[{"partition": ..., "offset": ...}]: a source's offsets from the offset store, a sink's
        from its consumer group connect-<name>, in Connect's shapes."""
        self._require(name)
        if self.connector_type(name) == "sink":
            return self._sink_offsets(name)
        result = []
        for key, value in self.offset_store().entries().items():
            connector, partition = json.loads(key)
            if connector == name and value is not None:
                result.append({"partition": partition, "offset": json.loads(value)})
        return result

    def _sink_offsets(self, name: str) -> list[dict]:
        """The committed offsets of group connect-<name> on the partitions of the sink's topics
        (OffsetFetch, asked by a consumer that does not join the group)."""
        import re

        from confluent_kafka import Consumer, TopicPartition
        props = self.configs[name]
        consumer = Consumer({**self.config.client_configs("consumer"), "group.id": f"connect-{name}",
                             "enable.auto.commit": False, "log_level": 0})
        try:
            metadata = consumer.list_topics(timeout=ADMIN_TIMEOUT_S)
            topics = {t.strip() for t in props.get("topics", "").split(",") if t.strip()}
            pattern = re.compile(props["topics.regex"]) if props.get("topics.regex") else None
            partitions = [TopicPartition(topic, p) for topic, t in sorted(metadata.topics.items())
                          if topic in topics or (pattern is not None and pattern.fullmatch(topic))
                          for p in sorted(t.partitions)]
            committed = consumer.committed(partitions, timeout=ADMIN_TIMEOUT_S) if partitions else []
        finally:
            consumer.close()
        return [{"partition": {"kafka_topic": tp.topic, "kafka_partition": tp.partition},
                 "offset": {"kafka_offset": tp.offset}} for tp in committed if tp.offset >= 0]

    def _require_stopped(self, name: str) -> None:
        self._require(name)
        if self.target_states.get(name) != "STOPPED" or self.task_props.get(name):
            raise BadRequest("Connectors must be in the STOPPED state before their offsets can be modified. This can "
                             f"be done for the specified connector by issuing a 'PUT' request to the "
                             f"'/connectors/{name}/stop' endpoint")

    def alter_offsets(self, name: str, offsets) -> str:
        self._require_stopped(name)
        if not isinstance(offsets, list) or not offsets or not all(
                isinstance(o, dict) and isinstance(o.get("partition"), dict) and "offset" in o
                and (o["offset"] is None or isinstance(o["offset"], dict)) for o in offsets):
            raise BadRequest("The request body must be {\"offsets\": [{\"partition\": {...}, \"offset\": {...} or "
                             "null}, ...]} with at least one partition")
        if self.connector_type(name) == "sink":
            from confluent_kafka import Consumer, TopicPartition
            partitions = []
            for o in offsets:
                topic, partition = o["partition"].get("kafka_topic"), o["partition"].get("kafka_partition")
                offset = (o["offset"] or {}).get("kafka_offset")
                if not isinstance(topic, str) or not isinstance(partition, int):
                    raise BadRequest("A sink connector's partition is {\"kafka_topic\": ..., \"kafka_partition\": ...}")
                if not isinstance(offset, int) or offset < 0:
                    raise BadRequest("A sink connector's offset is {\"kafka_offset\": <a non-negative integer>}; "
                                     "removing one partition's offset (null) is not supported here, DELETE resets all")
                partitions.append(TopicPartition(topic, partition, offset))
            # a consumer outside the group commits for it: the group is empty, its sink stopped
            consumer = Consumer({**self.config.client_configs("consumer"), "group.id": f"connect-{name}",
                                 "enable.auto.commit": False, "log_level": 0})
            try:
                consumer.commit(offsets=partitions, asynchronous=False)
            finally:
                consumer.close()
        else:
            self.offset_store().put_all({
                offset_key(name, o["partition"]):
                    None if o["offset"] is None else json.dumps(o["offset"], separators=(",", ":")).encode()
                for o in offsets})
        return "The offsets for this connector have been altered successfully"

    def reset_offsets(self, name: str) -> str:
        self._require_stopped(name)
        if self.connector_type(name) == "sink":
            from confluent_kafka import KafkaError, KafkaException
            group = f"connect-{name}"
            try:
                self._admin().delete_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S)[group].result(
                    ADMIN_TIMEOUT_S)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
                    raise
        else:
            store = self.offset_store()
            store.put_all({key: None for key, value in store.entries().items()
                           if value is not None and json.loads(key)[0] == name})
        return "The offsets for this connector have been reset successfully"

    def _admin(self):
        from confluent_kafka.admin import AdminClient
        return AdminClient({**self.config.client_configs("admin"), "log_level": 0})

    def verify_internal_request(self, body: bytes, headers) -> None:
        """KIP-507: raise (400/403) unless an internal request is signed; only sessioned groups sign."""

    def fence_zombies(self, name: str) -> None:
        raise BadRequest("zombie fencing is done by a distributed cluster's leader only")

    # reads
    def connectors(self) -> list[str]:
        return sorted(self.configs)

    def connector_config(self, name: str) -> dict[str, str]:
        self._require(name)
        return self.configs[name]

    def connector_info(self, name: str) -> dict:
        self._require(name)
        return {"name": name, "config": self.configs[name],
                "tasks": [{"connector": name, "task": i} for i in range(len(self.task_props.get(name, [])))],
                "type": self.connector_type(name)}

    def connector_type(self, name: str) -> str:
        try:
            cls = self.plugins.connector_class(self.configs[name].get("connector.class", ""))
        except PluginNotFound:
            return "unknown"
        return "sink" if issubclass(cls, SinkConnector) else "source"

    def task_configs(self, name: str) -> list[dict]:
        self._require(name)
        return [{"id": {"connector": name, "task": i}, "config": c} for i, c in enumerate(self.task_props.get(name, []))]

    def connector_status(self, name: str) -> dict:
        self._require(name)
        connector = self.status.connectors.get(name)
        tasks = sorted((t, s) for t, s in list(self.status.tasks.items()) if t.connector == name)
        count = len(self.task_props.get(name, []))
        return {"name": name,
                "connector": _status_entry(connector),
                "tasks": [{"id": t.task, **_status_entry(s)} for t, s in tasks if t.task < count],
                "type": self.connector_type(name)}

    def task_status(self, name: str, task: int) -> dict:
        self._require(name)
        status = self.status.tasks.get(TaskId(name, task))
        if status is None:
            raise NotFound(f"No status found for task {name}-{task}")
        return {"id": task, **_status_entry(status)}

    def validate(self, props: dict[str, str]) -> dict:
        return validate(props, self.plugins, self.config["exactly.once.source.support"] == "enabled")

    def checked(self, name: str, props: dict[str, str]) -> dict[str, str]:
        """`props` with its name, or BadRequest listing every invalid field."""
        if not name or "/" in name:
            raise BadRequest("Connector name must not be empty and may not contain '/'")
        props = {**props, "name": props.get("name", name)}
        if props["name"] != name:
            raise BadRequest("Connector name configuration (" + props["name"] + ") doesn't match connector "
                             "name in the URL (" + name + ")")
        errors = validation_errors(self.validate(props))
        if errors:
            raise BadRequest(f"Connector configuration is invalid and contains the following {len(errors)} "
                             "error(s):\n" + "\n".join(errors) + "\nYou can also find the above list of errors at "
                             "the endpoint `/connector-plugins/{connectorType}/config/validate`")
        return props

    def _require(self, name: str) -> None:
        if name not in self.configs:
            raise NotFound(f"Connector {name} not found")

    # writes: put_connector_config(name, props, allow_replace) -> (created, info),
    # delete_connector, pause_connector, resume_connector, restart_connector, restart_task, stop


def _status_entry(status: Status | None) -> dict:
    if status is None:
        return {"state": "UNASSIGNED", "worker_id": None}
    entry = {"state": status.state, "worker_id": status.worker_id}
    if status.trace:
        entry["trace"] = status.trace
    return entry
