"""Standalone mode: one worker, connectors given on the command line or through REST, kept in
memory (as Connect's MemoryConfigBackingStore), source offsets in a local file
(`offset.storage.file.filename`).

The offsets file holds the same keys and values Connect writes to its offsets topic
(["<connector>",{partition}] -> offset map, as JSON), as a JSON object of strings. Kafka's
own file is a Java-serialized HashMap, which a Python worker does not write.
"""
from __future__ import annotations

import json
import os
import threading

from connect.config import WorkerConfig
from connect.herder import AlreadyExists, Herder, MemoryStatusStore, NotFound
from connect.plugins import Plugins
from connect.worker import OffsetStore, TaskId, Worker


class FileOffsetStore(OffsetStore):
    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.data: dict[str, str] = {}
        if os.path.exists(path) and os.path.getsize(path):
            with open(path, encoding="utf-8") as f:
                self.data = json.load(f)

    def get(self, key):
        value = self.data.get(key.decode())
        return None if value is None else value.encode()

    def entries(self):
        with self.lock:
            return {k.encode(): v.encode() for k, v in self.data.items()}

    def put_all(self, offsets):
        with self.lock:
            for k, v in offsets.items():
                if v is None:
                    self.data.pop(k.decode(), None)
                else:
                    self.data[k.decode()] = v.decode()
            temporary = self.path + ".tmp"
            with open(temporary, "w", encoding="utf-8") as f:
                json.dump(self.data, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, self.path)  # the whole file or the old one, never half


class StandaloneHerder(Herder):
    def __init__(self, config: WorkerConfig, plugins: Plugins, worker_id: str) -> None:
        super().__init__(config, plugins, MemoryStatusStore(worker_id))
        self.worker = Worker(config, plugins, FileOffsetStore(config["offset.storage.file.filename"]),
                             self.status, worker_id)
        self.lock = threading.RLock()

    def put_connector_config(self, name: str, props: dict[str, str], allow_replace: bool,
                             initial_state: str = "STARTED") -> tuple[bool, dict]:
        props = self.checked(name, props)
        with self.lock:
            created = name not in self.configs
            if not created and not allow_replace:
                raise AlreadyExists(f"Connector {name} already exists")
            if not created:
                self._stop(name)
            self.configs[name] = props
            self.target_states.setdefault(name, initial_state)
            if self.target_states[name] == "STOPPED":
                self.task_props[name] = []
                self.status.on_status(name, None, "STOPPED")
            else:
                self._start(name)
            return created, self.connector_info(name)

    def delete_connector(self, name: str) -> None:
        with self.lock:
            self._require(name)
            self._stop(name)
            for table in (self.configs, self.task_props, self.target_states):
                table.pop(name, None)
            self.status.forget(name)

    def offset_store(self):
        return self.worker.offsets

    def pause_connector(self, name: str) -> None:
        self._set_target_state(name, "PAUSED")

    def stop_connector(self, name: str) -> None:
        """KIP-875: the connector and its tasks shut down, no task configs kept; status STOPPED."""
        with self.lock:
            self._require(name)
            self._stop(name)
            self.task_props[name] = []
            self.target_states[name] = "STOPPED"
            self.status.on_status(name, None, "STOPPED")

    def resume_connector(self, name: str) -> None:
        self._set_target_state(name, "STARTED")

    def restart_connector(self, name: str, include_tasks: bool = False, only_failed: bool = False) -> None:
        with self.lock:
            self._require(name)
            if not only_failed or self._failed(name, None):
                self.worker.stop_connector(name)
                self._start_connector(name)
            if include_tasks:
                for task in range(len(self.task_props.get(name, []))):
                    if not only_failed or self._failed(name, task):
                        self.restart_task(name, task)

    def _failed(self, name: str, task: int | None) -> bool:
        status = self.status.connectors.get(name) if task is None else self.status.tasks.get(TaskId(name, task))
        return status is not None and status.state == "FAILED"

    def restart_task(self, name: str, task: int) -> None:
        with self.lock:
            self._require(name)
            if task >= len(self.task_props.get(name, [])):
                raise NotFound(f"Task {name}-{task} not found")
            task_id = TaskId(name, task)
            self.worker.stop_tasks([task_id])
            self.worker.start_task(task_id, self.configs[name], self.task_props[name][task], self.target_states[name])

    def stop(self) -> None:
        self.worker.stop()

    def _set_target_state(self, name: str, state: str) -> None:
        with self.lock:
            self._require(name)
            stopped = self.target_states[name] == "STOPPED"
            self.target_states[name] = state
            if stopped:  # a stopped connector starts again, its tasks from new task configs
                self._start(name)
            else:
                self.worker.set_target_state(name, state)

    def _start(self, name: str) -> None:
        if self._start_connector(name):
            self.reconfigure_tasks(name)

    def _start_connector(self, name: str) -> bool:
        return self.worker.start_connector(name, self.configs[name], self.target_states[name],
                                           on_reconfigure=self.reconfigure_tasks)

    def reconfigure_tasks(self, name: str) -> None:
        """Ask the connector for task configs; restart the tasks when they changed."""
        with self.lock:
            connector = self.worker.connectors.get(name)
            if connector is None or connector.failed:
                return
            configs = connector.task_configs()
            old = self.task_props.get(name)
            if configs == old:
                return
            self.worker.stop_tasks([TaskId(name, i) for i in range(len(old or []))])
            self.task_props[name] = configs
            for i, task_props in enumerate(configs):
                self.worker.start_task(TaskId(name, i), self.configs[name], task_props, self.target_states[name])

    def _stop(self, name: str) -> None:
        self.worker.stop_tasks([TaskId(name, i) for i in range(len(self.task_props.get(name, [])))])
        self.worker.stop_connector(name)
