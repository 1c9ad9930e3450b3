"""The plug-in API's pure parts: converters, SMTs and predicates by Connect's config names,
connector config validation, and the group protocol's codec and assignors (KIP-415)."""
from __future__ import annotations

import pytest

from connect import protocol
from connect.api import ConnectError, SinkRecord, SourceRecord, STRING_SCHEMA
from connect.config import transformation_chain, validate
from connect.converters import ByteArrayConverter, JsonConverter, StringConverter
from connect.plugins import Plugins
from connect.protocol import Work, WorkerState

PLUGINS = Plugins()


def record(value, topic="orders", schema=None, timestamp_ms=1_700_000_000_000):
    return SinkRecord(topic=topic, kafka_partition=2, key_schema=None, key="k", value_schema=schema, value=value,
                      timestamp_ms=timestamp_ms, kafka_offset=41)


def test_json_converter_with_and_without_the_schema_envelope():
    with_schemas, plain = JsonConverter(), JsonConverter()
    with_schemas.configure({}, is_key=False)
    plain.configure({"schemas.enable": "false"}, is_key=False)
    assert with_schemas.from_connect_data("t", STRING_SCHEMA, "hi") == \
        b'{"schema":{"type":"string","optional":false},"payload":"hi"}'
    assert plain.from_connect_data("t", None, {"a": 1}) == b'{"a":1}'
    assert with_schemas.to_connect_data("t", b'{"schema":null,"payload":[1,2]}') == (None, [1, 2])
    assert plain.to_connect_data("t", b'{"a":1}') == (None, {"a": 1})
    with pytest.raises(ConnectError, match="schemas.enable=false"):
        with_schemas.to_connect_data("t", b'{"a":1}')


def test_string_and_byte_array_converters():
    string, raw = StringConverter(), ByteArrayConverter()
    string.configure({}, is_key=True)
    raw.configure({}, is_key=False)
    assert string.from_connect_data("t", None, "é") == "é".encode()
    assert string.to_connect_data("t", b"x")[1] == "x" and string.to_connect_data("t", None)[1] is None
    assert raw.from_connect_data("t", None, b"\x00\x01") == b"\x00\x01"
    with pytest.raises(ConnectError):
        raw.from_connect_data("t", None, "text")


def chain(**props):
    return transformation_chain({k.replace("__", "."): v for k, v in props.items()}, PLUGINS)


def test_insert_field_adds_topic_partition_offset_and_static_values_with_their_schema():
    insert = chain(transforms="add",
                   transforms__add__type="org.apache.kafka.connect.transforms.InsertField$Value",
                   **{"transforms.add.topic.field": "t", "transforms.add.offset.field": "o!",
                      "transforms.add.static.field": "dc", "transforms.add.static.value": "eu"})
    out = insert.apply(record({"id": 1}))
    assert out.value == {"id": 1, "t": "orders", "o": 41, "dc": "eu"}
    schema = {"type": "struct", "fields": [{"field": "id", "type": "int32", "optional": False}]}
    out = insert.apply(record({"id": 1}, schema=schema))
    assert [f["field"] for f in out.value_schema["fields"]] == ["id", "t", "o", "dc"]
    assert out.value_schema["fields"][2]["optional"] is False  # "o!" is required


def test_replace_field_include_exclude_and_renames():
    replace = chain(transforms="r", transforms__r__type="org.apache.kafka.connect.transforms.ReplaceField$Value",
                    **{"transforms.r.exclude": "secret", "transforms.r.renames": "id:order_id"})
    assert replace.apply(record({"id": 1, "secret": "x", "qty": 2})).value == {"order_id": 1, "qty": 2}
    keep = chain(transforms="r", transforms__r__type="org.apache.kafka.connect.transforms.ReplaceField$Value",
                 **{"transforms.r.include": "qty"})
    assert keep.apply(record({"id": 1, "qty": 2})).value == {"qty": 2}


def test_timestamp_router_behind_a_negated_topic_predicate():
    route = chain(transforms="route", transforms__route__type="org.apache.kafka.connect.transforms.TimestampRouter",
                  predicates="isAudit",
                  predicates__isAudit__type="org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
                  **{"transforms.route.topic.format": "${topic}_${timestamp}",
                     "transforms.route.timestamp.format": "yyyy-MM-dd",
                     "transforms.route.predicate": "isAudit", "transforms.route.negate": "true",
                     "predicates.isAudit.pattern": "audit.*"})
    assert route.apply(record("v")).topic == "orders_2023-11-14"  # 1_700_000_000 s is 2023-11-14 UTC
    assert route.apply(record("v", topic="audit-log")).topic == "audit-log"


def test_validate_names_the_offending_fields():
    info = validate({"name": "s", "connector.class": "FileStreamSource", "batch.size": "lots",
                     "transforms": "x", "transforms.x.type": "NoSuchTransform"}, PLUGINS)
    errors = {c["value"]["name"]: c["value"]["errors"] for c in info["configs"] if c["value"]["errors"]}
    assert set(errors) == {"topic", "batch.size", "transforms.x.type"}
    assert info["error_count"] == 3 and info["name"] == "FileStreamSourceConnector"
    unknown = validate({"name": "s", "connector.class": "com.example.Missing"}, PLUGINS)
    assert [c["value"]["errors"] for c in unknown["configs"] if c["value"]["name"] == "connector.class"] != [[]]


def test_exactly_once_required_needs_a_worker_with_the_support_enabled():
    props = {"name": "s", "connector.class": "FileStreamSource", "topic": "t", "exactly.once.support": "required"}

    def errors(enabled):
        return {c["value"]["name"]: c["value"]["errors"]
                for c in validate(props, PLUGINS, enabled)["configs"] if c["value"]["errors"]}
    assert list(errors(False)) == ["exactly.once.support"] and errors(True) == {}


def test_connector_classes_by_kafka_name_alias_and_python_path():
    source = PLUGINS.connector_class("org.apache.kafka.connect.file.FileStreamSourceConnector")
    assert PLUGINS.connector_class("FileStreamSource") is source
    assert PLUGINS.connector_class("connect.file.FileStreamSourceConnector") is source
    assert isinstance(SourceRecord("t", None, None, None, None, None).headers, list)


def test_the_protocol_codec_round_trips():
    state = WorkerState("http://w:8083/", 12, frozenset({Work("c"), Work("c", 0), Work("c", 3)}))
    assert protocol.decode_metadata(protocol.encode_metadata(1, state)) == state
    v0 = protocol.decode_metadata(protocol.encode_metadata(0, state))
    assert v0.allocation is None and v0.url == state.url
    assignment = protocol.Assignment(0, "m1", "http://l/", 7, frozenset({Work("a", 1)}), frozenset({Work("b")}), 250)
    assert protocol.decode_assignment(protocol.encode_assignment(1, assignment)) == assignment


def test_kip_415_holds_a_lost_workers_share_for_the_delay_then_moves_it():
    configured = [Work("c"), Work("c", 0), Work("c", 1), Work("d"), Work("d", 0)]
    assignor = protocol.IncrementalAssignor(max_delay_ms=1000)
    first, _, _ = assignor.assign({"a": WorkerState("u", 0), "b": WorkerState("u", 0)}, configured, now_ms=0)
    assert first["a"] | first["b"] == set(configured) and not first["a"] & first["b"]
    survivors = {"a": WorkerState("u", 0, first["a"])}
    held, _, delay_ms = assignor.assign(survivors, configured, now_ms=100)
    assert held["a"] == first["a"] and delay_ms == 1000
    held, _, delay_ms = assignor.assign(survivors, configured, now_ms=600)
    assert held["a"] == first["a"] and delay_ms == 500
    moved, revoked, delay_ms = assignor.assign(survivors, configured, now_ms=1100)
    assert moved["a"] == set(configured) and delay_ms == 0 and not revoked["a"]


def test_kip_415_a_new_worker_gets_its_share_by_revocation_then_assignment():
    configured = [Work(f"c{i}") for i in range(4)] + [Work(f"c{i}", 0) for i in range(4)]
    assignor = protocol.IncrementalAssignor(max_delay_ms=1000)
    members = {"a": WorkerState("u", 0, frozenset(configured)), "b": WorkerState("u", 0)}
    kept, revoked, _ = assignor.assign(members, configured, now_ms=0)
    assert len(revoked["a"]) == 4 and kept["a"] == set(configured) - revoked["a"] and not kept["b"]
    members = {"a": WorkerState("u", 0, kept["a"]), "b": WorkerState("u", 0, frozenset())}
    final, revoked, _ = assignor.assign(members, configured, now_ms=10)
    assert final["a"] == kept["a"] and final["b"] == set(configured) - kept["a"] and not revoked["a"]
    assert sum(w.task == -1 for w in final["b"]) == 2  # connectors and tasks balanced separately


def test_eager_deals_everything_round_robin():
    configured = [Work("c"), Work("c", 0), Work("c", 1)]
    dealt = protocol.eager_assign({"b": WorkerState("u", 0), "a": WorkerState("u", 0)}, configured)
    assert dealt == {"a": {Work("c"), Work("c", 1)}, "b": {Work("c", 0)}}


def test_worker_configs_with_kafkas_names():
    from connect.config import ConfigError, WorkerConfig
    base = {"key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "offset.storage.file.filename": "/tmp/offsets"}
    assert WorkerConfig(base, "standalone").rest_address() == ("", 8083)
    assert WorkerConfig({**base, "rest.port": "9000"}, "standalone").rest_address() == ("", 9000)
    assert WorkerConfig({**base, "listeners": "http://127.0.0.1:0"}, "standalone").rest_address() == ("127.0.0.1", 0)
    clients = WorkerConfig({**base, "bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL",
                            "sasl.mechanism": "SCRAM-SHA-256",
                            "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                                'username="connect" password="s3cret";',
                            "producer.linger.ms": "20"}, "standalone")
    assert clients.client_configs("producer") == {
        "bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "connect", "sasl.password": "s3cret", "linger.ms": "20"}
    assert "linger.ms" not in clients.client_configs("consumer")
    with pytest.raises(ConfigError, match="group.id"):
        WorkerConfig(base, "distributed")
    with pytest.raises(ConfigError, match="distributed workers only"):
        WorkerConfig({**base, "exactly.once.source.support": "enabled"}, "standalone")


def test_java_properties_files(tmp_path):
    from connect.config import read_properties
    path = tmp_path / "w.properties"
    path.write_text("# comment\n! also a comment\nbootstrap.servers = a:1,\\\n    b:2\nkey: value\nspaced value here\n")
    assert read_properties(str(path)) == {"bootstrap.servers": "a:1,b:2", "key": "value", "spaced": "value here"}


def test_errors_tolerance_is_none_or_all():
    for tolerance, error_count in (("all", 0), ("none", 0), ("some", 1)):
        info = validate({"name": "k", "connector.class": "FileStreamSink", "topics": "t",
                         "errors.tolerance": tolerance, "errors.deadletterqueue.topic.name": "dlq"}, PLUGINS)
        assert info["error_count"] == error_count, (tolerance, info)
