"""Single message transforms (SMTs) and predicates, configured with Connect's names:

    transforms=addTopic,route
    transforms.addTopic.type=org.apache.kafka.connect.transforms.InsertField$Value
    transforms.addTopic.topic.field=from_topic
    transforms.route.type=org.apache.kafka.connect.transforms.TimestampRouter
    transforms.route.predicate=isOrders
    transforms.route.negate=false
    predicates=isOrders
    predicates.isOrders.type=org.apache.kafka.connect.transforms.predicates.TopicNameMatches
    predicates.isOrders.pattern=orders.*

A transform returns the new record, or None to drop it. `$Key` / `$Value` variants act on
the key or the value. Schemaless values are dicts; a struct schema ({"type": "struct",
"fields": [...]}) is updated alongside its value.
"""
from __future__ import annotations

import datetime
import re

from connect.api import ConfigKey, ConnectError, ConnectRecord, Plugin, SinkRecord


class Transformation(Plugin):
    def configure(self, configs: dict[str, str]) -> None:
        self.configs = configs

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        raise NotImplementedError


class Predicate(Plugin):
    def configure(self, configs: dict[str, str]) -> None:
        self.configs = configs

    def test(self, record: ConnectRecord) -> bool:
        raise NotImplementedError


class _KeyOrValue(Transformation):
    """A transform of the record's key (`$Key`) or value (`$Value`)."""
    OPERATES_ON = "value"

    def apply(self, record):
        schema, value = getattr(record, self.OPERATES_ON + "_schema"), getattr(record, self.OPERATES_ON)
        if value is None:
            return record  # tombstones pass through
        if not isinstance(value, dict):
            raise ConnectError(f"{type(self).__qualname__} requires a map or a struct {self.OPERATES_ON}, "
                               f"got {type(value).__name__}")
        new_schema, new_value = self.transform(record, schema, dict(value))
        return record.new_record(**{self.OPERATES_ON + "_schema": new_schema, self.OPERATES_ON: new_value})

    def transform(self, record, schema, value):
        raise NotImplementedError


def _field_spec(spec: str | None) -> tuple[str, bool] | None:
    """InsertField's `name`, `name!` (required) or `name?` (optional, the default)."""
    if not spec:
        return None
    if spec[-1] in "!?":
        return spec[:-1], spec[-1] == "!"
    return spec, False


class InsertField(_KeyOrValue):
    """Adds the record's topic, partition, offset (sink records), timestamp, or a static value."""
    CONFIG_DEF = tuple(ConfigKey(name, documentation=doc) for name, doc in (
        ("topic.field", "Field name for the Kafka topic. Suffix with ! to make it required, ? optional."),
        ("partition.field", "Field name for the Kafka partition."),
        ("offset.field", "Field name for the Kafka offset (sink connectors only)."),
        ("timestamp.field", "Field name for the record timestamp."),
        ("static.field", "Field name for the static data field."),
        ("static.value", "Static field value, if a field name is configured.")))

    def configure(self, configs):
        super().configure(configs)
        self.fields = {kind: _field_spec(configs.get(f"{kind}.field"))
                       for kind in ("topic", "partition", "offset", "timestamp", "static")}
        self.static_value = configs.get("static.value")

    def transform(self, record, schema, value):
        values = {"topic": ("string", record.topic), "partition": ("int32", record.kafka_partition),
                  "offset": ("int64", record.kafka_offset if isinstance(record, SinkRecord) else None),
                  "timestamp": ("int64", record.timestamp_ms), "static": ("string", self.static_value)}
        fields = list(schema.get("fields", [])) if schema else None
        for kind, spec in self.fields.items():
            if spec is None:
                continue
            name, required = spec
            field_type, field_value = values[kind]
            if required and field_value is None:
                raise ConnectError(f"InsertField: {kind} is required but the record has none")
            value[name] = field_value
            if fields is not None:
                fields = [f for f in fields if f["field"] != name]
                fields.append({"type": field_type, "optional": not required, "field": name})
        return (dict(schema, fields=fields) if schema else None), value


class ReplaceField(_KeyOrValue):
    """Keeps `include` (if set), drops `exclude`, renames `renames` (old:new,...)."""
    CONFIG_DEF = (ConfigKey("exclude", "LIST", ""), ConfigKey("include", "LIST", ""),
                  ConfigKey("renames", "LIST", ""))

    def configure(self, configs):
        super().configure(configs)
        as_list = lambda name: [x.strip() for x in configs.get(name, "").split(",") if x.strip()]  # noqa: E731
        self.exclude, self.include = set(as_list("exclude")), set(as_list("include"))
        self.renames = {}
        for pair in as_list("renames"):
            old, sep, new = pair.partition(":")
            if not sep or not old or not new:
                raise ConnectError(f"Invalid rename mapping: {pair} (expected old:new)")
            self.renames[old] = new

    def _kept(self, name: str) -> bool:
        return name not in self.exclude and (not self.include or name in self.include)

    def transform(self, record, schema, value):
        new_value = {self.renames.get(k, k): v for k, v in value.items() if self._kept(k)}
        if not schema:
            return None, new_value
        fields = [dict(f, field=self.renames.get(f["field"], f["field"]))
                  for f in schema.get("fields", []) if self._kept(f["field"])]
        return dict(schema, fields=fields), new_value


# java.text.SimpleDateFormat letters -> strftime, for TimestampRouter's timestamp.format.
_DATE_LETTERS = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S", "SSS": "%f"}
_DATE_PATTERN = re.compile("|".join(sorted(_DATE_LETTERS, key=len, reverse=True)))


class TimestampRouter(Transformation):
    """Renames the topic with the record's timestamp: topic.format ${topic}-${timestamp},
    timestamp.format a SimpleDateFormat pattern (yyyyMMdd), in UTC as Connect does."""
    CONFIG_DEF = (ConfigKey("topic.format", default="${topic}-${timestamp}"),
                  ConfigKey("timestamp.format", default="yyyyMMdd"))

    def configure(self, configs):
        super().configure(configs)
        self.topic_format = configs.get("topic.format", "${topic}-${timestamp}")
        pattern = configs.get("timestamp.format", "yyyyMMdd")
        self.strftime = _DATE_PATTERN.sub(lambda m: _DATE_LETTERS[m.group(0)], pattern.replace("%", "%%"))
        self.millis = "SSS" in pattern

    def apply(self, record):
        if record.timestamp_ms is None:
            raise ConnectError(f"Timestamp missing on record: {record}")
        when = datetime.datetime.fromtimestamp(record.timestamp_ms / 1000, datetime.UTC)
        stamp = when.strftime(self.strftime)
        if self.millis:  # %f gives microseconds; SSS is milliseconds
            stamp = stamp.replace(when.strftime("%f"), f"{when.microsecond // 1000:03d}")
        return record.new_record(topic=self.topic_format.replace("${topic}", record.topic)
                                 .replace("${timestamp}", stamp))


class TopicNameMatches(Predicate):
    CONFIG_DEF = (ConfigKey("pattern", required=True, importance="MEDIUM",
                            documentation="A Java regular expression matched against the whole topic name."),)

    def configure(self, configs):
        super().configure(configs)
        try:
            self.pattern = re.compile(configs["pattern"])
        except (KeyError, re.error) as e:
            raise ConnectError(f"Invalid value for pattern: {e}") from None

    def test(self, record):
        return self.pattern.fullmatch(record.topic) is not None


class HasHeaderKey(Predicate):
    CONFIG_DEF = (ConfigKey("name", required=True, documentation="The header name."),)

    def test(self, record):
        return any(key == self.configs["name"] for key, _ in record.headers)


class RecordIsTombstone(Predicate):
    def test(self, record):
        return record.value is None


def _variants(base: type[_KeyOrValue]) -> dict[str, type]:
    key = type(f"{base.__name__}$Key", (base,), {"OPERATES_ON": "key"})
    value = type(f"{base.__name__}$Value", (base,), {"OPERATES_ON": "value"})
    return {f"{base.__name__}$Key": key, f"{base.__name__}$Value": value}


# Kafka's class names for the built-ins (connect/transforms).
TRANSFORMS: dict[str, type[Transformation]] = {
    f"org.apache.kafka.connect.transforms.{name}": cls
    for name, cls in {**_variants(InsertField), **_variants(ReplaceField), "TimestampRouter": TimestampRouter}.items()}
PREDICATES: dict[str, type[Predicate]] = {
    f"org.apache.kafka.connect.transforms.predicates.{cls.__name__}": cls
    for cls in (TopicNameMatches, HasHeaderKey, RecordIsTombstone)}


class TransformationChain:
    """A connector's `transforms` in order, each behind its optional predicate."""

    def __init__(self, steps: list[tuple[Transformation, Predicate | None, bool]]) -> None:
        self.steps = steps

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        for transform, predicate, negate in self.steps:
            if predicate is not None and predicate.test(record) == negate:
                continue
            record = transform.apply(record)
            if record is None:
                return None
        return record
