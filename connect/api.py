"""The plug-in API: Connect's records, connectors and tasks as Python base classes.

A connector is configured once and splits its work into task configs; the worker runs one
task per config. Source tasks are polled for records, sink tasks are handed records with
`put` and asked to `flush` before their offsets are committed. The method names follow
Connect's Java API in snake case (taskConfigs -> task_configs, preCommit -> pre_commit).

Data model: a value is None, bool, int, float, str, bytes, a list or a dict. A schema is
optional and, when present, is written in the JSON form Connect's JsonConverter uses
({"type": "string", "optional": false}, {"type": "struct", "fields": [...]}), so a
struct is a dict with a struct schema beside it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

STRING_SCHEMA = {"type": "string", "optional": False}
OPTIONAL_STRING_SCHEMA = {"type": "string", "optional": True}


class ConnectError(Exception):
    """A plug-in or the runtime failed; the task or connector that raised it is marked FAILED."""


@dataclass
class ConnectRecord:
    topic: str
    kafka_partition: int | None
    key_schema: dict | None
    key: Any
    value_schema: dict | None
    value: Any
    timestamp_ms: int | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)

    def new_record(self, **changes):
        """A copy with some fields replaced (Connect's newRecord)."""
        return dataclasses.replace(self, **changes)


@dataclass
class SourceRecord(ConnectRecord):
    # Where the record came from in the source system, and how far the task had read:
    # both are small JSON-able dicts (e.g. {"filename": f} and {"position": n}).
    source_partition: dict | None = None
    source_offset: dict | None = None


@dataclass
class SinkRecord(ConnectRecord):
    kafka_offset: int = -1


@dataclass(frozen=True)
class ConfigKey:
    """One config a plug-in accepts (Connect's ConfigDef.ConfigKey, the parts validate needs)."""
    name: str
    type: str = "STRING"          # STRING, INT, LONG, BOOLEAN, LIST, CLASS, PASSWORD
    default: Any = None
    required: bool = False
    importance: str = "MEDIUM"    # HIGH, MEDIUM, LOW
    documentation: str = ""
    group: str | None = None


class Plugin:
    """What every connector, transformation and predicate has: a version and its configs."""
    CONFIG_DEF: tuple[ConfigKey, ...] = ()

    @classmethod
    def version(cls) -> str:
        return "0.1.0"


class Connector(Plugin):
    def initialize(self, context: ConnectorContext) -> None:
        self.context = context

    def start(self, props: dict[str, str]) -> None:
        raise NotImplementedError

    def task_class(self) -> type[Task]:
        raise NotImplementedError

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        raise NotImplementedError

    def stop(self) -> None:
        pass

    def validate(self, props: dict[str, str]) -> dict[str, list[str]]:
        """Errors by config name; the runtime has already checked CONFIG_DEF's required keys."""
        return {}


class SourceConnector(Connector):
    TYPE = "source"


class SinkConnector(Connector):
    TYPE = "sink"


class ConnectorContext:
    """What a connector may ask of the runtime."""

    def __init__(self, request_task_reconfiguration, raise_error) -> None:
        self.request_task_reconfiguration = request_task_reconfiguration
        self.raise_error = raise_error


class Task:
    def version(self) -> str:
        return "0.1.0"

    def start(self, props: dict[str, str]) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        pass


class OffsetStorageReader:
    """A source task's view of the offsets committed for its source partitions."""

    def __init__(self, read_offset) -> None:
        self._read_offset = read_offset

    def offset(self, partition: dict) -> dict | None:
        return self._read_offset(partition)


class SourceTaskContext:
    def __init__(self, offset_storage_reader: OffsetStorageReader) -> None:
        self.offset_storage_reader = offset_storage_reader


class SourceTask(Task):
    def initialize(self, context: SourceTaskContext) -> None:
        self.context = context

    def poll(self) -> list[SourceRecord] | None:
        """Records read from the source; may block briefly (about a second) when there are none."""
        raise NotImplementedError

    def commit(self) -> None:
        """Offsets up to the last acked records were committed."""

    def commit_record(self, record: SourceRecord, metadata) -> None:
        """`record` was acked by the broker (metadata: (topic, partition, offset))."""


class SinkTaskContext:
    def __init__(self, request_commit, assignment) -> None:
        self.request_commit = request_commit
        self.assignment = assignment


class SinkTask(Task):
    def initialize(self, context: SinkTaskContext) -> None:
        self.context = context

    def open(self, partitions: list[tuple[str, int]]) -> None:
        pass

    def put(self, records: list[SinkRecord]) -> None:
        raise NotImplementedError

    def flush(self, current_offsets: dict[tuple[str, int], int]) -> None:
        pass

    def pre_commit(self, current_offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """The offsets that are safe to commit; by default flush everything and commit it all."""
        self.flush(current_offsets)
        return current_offsets

    def close(self, partitions: list[tuple[str, int]]) -> None:
        pass
