"""The mirror's pure parts: mm2.properties, replication policies, MM2's record layouts, offset
syncs and their translation (MIR-3)."""
from __future__ import annotations

import pytest

from mirror.config import ConfigError, parse, read_properties
from mirror.offsets import NO_TRANSLATION, SyncStore, SyncWriter
from mirror.policy import DefaultReplicationPolicy, IdentityReplicationPolicy
from mirror.records import Checkpoint, Heartbeat, OffsetSync, decode_progress, progress_key, progress_value

BASE = {"clusters": "A, B", "A.bootstrap.servers": "a:9092", "B.bootstrap.servers": "b:9092", "A->B.enabled": "true"}


def test_properties_format_comments_separators_and_continuations():
    text = "# comment\n! also\nclusters = A, \\\n   B\nA.bootstrap.servers: a:9092\nkey value with spaces\n"
    assert read_properties(text) == {"clusters": "A, B", "A.bootstrap.servers": "a:9092", "key": "value with spaces"}


def test_mm2_defaults_and_flow_overrides():
    (flow,) = parse({**BASE, "A->B.topics": "orders.*", "sync.group.offsets.enabled": "true"})
    assert (flow.source, flow.target, flow.name) == ("A", "B", "A->B")
    assert flow.mirrors_topic("orders-eu") and not flow.mirrors_topic("payments")
    assert flow.sync_group_offsets and flow.emit_checkpoints and flow.emit_heartbeats and not flow.exactly_once
    assert flow.replication_factor == 2 and flow.offset_lag_max == 100
    assert flow.offsets_topic == "mm2-offsets.A.internal"
    assert flow.checkpoints_topic == "A.checkpoints.internal"
    assert flow.offset_syncs_topic == "mm2-offset-syncs.B.internal"
    (default,) = parse(BASE)
    for never in ("__consumer_offsets", "mm2-offsets.A.internal", "x.replica", "B.orders", "B.A.orders"):
        assert not default.mirrors_topic(never), never
    assert default.mirrors_topic("heartbeats") and default.mirrors_topic("C.heartbeats")
    assert default.mirrors_group("billing") and not default.mirrors_group("console-consumer-1")


def test_client_keys_pass_through_to_the_right_clients():
    (flow,) = parse({**BASE, "A.security.protocol": "PLAINTEXT", "A.consumer.fetch.min.bytes": "10",
                     "A.producer.acks": "all", "A.offset.storage.replication.factor": "1"})
    assert flow.source_clients["consumer"] == {"bootstrap.servers": "a:9092", "security.protocol": "PLAINTEXT",
                                               "fetch.min.bytes": "10"}
    assert flow.source_clients["producer"]["acks"] == "all" and "acks" not in flow.source_clients["admin"]
    assert flow.target_clients["admin"] == {"bootstrap.servers": "b:9092"}


def test_exactly_once_by_connector_or_worker_key():
    assert parse({**BASE, "exactly.once.support": "enabled"})[0].exactly_once
    assert parse({**BASE, "B.exactly.once.source.support": "enabled"})[0].exactly_once
    assert not parse({**BASE, "exactly.once.support": "requested"})[0].exactly_once


@pytest.mark.parametrize("properties, says", [
    ({"clusters": ""}, "no cluster aliases"),
    ({**BASE, "A->B.enabled": "false"}, "no flow is enabled"),
    ({**BASE, "B->X.enabled": "true"}, "unknown cluster alias 'X'"),
    ({**BASE, "replication.factor": "0"}, "not a replication factor"),
    ({"clusters": "A, B", "A.bootstrap.servers": "a:1", "A->B.enabled": "true"}, "B.bootstrap.servers: missing"),
])
def test_config_errors_name_the_key(properties, says):
    with pytest.raises(ConfigError, match=says.replace("(", r"\(")):
        parse(properties)


def test_replication_policies():
    default, identity = DefaultReplicationPolicy(), IdentityReplicationPolicy()
    assert default.format_remote_topic("A", "orders") == "A.orders"
    assert DefaultReplicationPolicy("_").format_remote_topic("A", "orders") == "A_orders"
    assert default.topic_source("A.orders") == "A" and default.topic_source("orders") is None
    assert default.is_cycle("A.B.orders", "B") and not default.is_cycle("A.orders", "B")
    assert identity.format_remote_topic("A", "orders") == "orders"
    assert identity.format_remote_topic("A", "heartbeats") == "A.heartbeats"
    assert not identity.is_cycle("B.orders", "B")


def test_record_layouts_are_mm2s():
    sync = OffsetSync("orders", 3, 41, 17)
    assert sync.key() == b"\x00\x06orders\x00\x00\x00\x03"
    assert sync.value() == (41).to_bytes(8, "big") + (17).to_bytes(8, "big")
    checkpoint = Checkpoint("billing", "A.orders", 0, 41, 17, "")
    assert checkpoint.value()[:2] == b"\x00\x00" and len(checkpoint.value()) == 2 + 8 + 8 + 2
    heartbeat = Heartbeat("A", "B", 1_700_000_000_000)
    for record in (sync, checkpoint, heartbeat):
        assert type(record).decode(record.key(), record.value()) == record
    assert progress_key("A", "orders", 1) == b'["MirrorSourceConnector",{"cluster":"A","partition":1,"topic":"orders"}]'
    assert decode_progress(progress_key("A", "orders", 1), progress_value(99)) == ("A", "orders", 1, 99)


def test_sync_writer_syncs_the_first_record_gaps_lag_and_defers_the_last():
    writer = SyncWriter(offset_lag_max=3)
    emitted = [writer.copied("t", 0, upstream, downstream) for upstream, downstream in
               [(0, 10), (1, 11), (2, 12), (3, 13), (4, 14), (7, 15), (8, 16)]]
    assert [s.upstream_offset for s in emitted if s] == [0, 4, 7]   # first, lag reached, a gap upstream
    assert writer.deferred() == [OffsetSync("t", 0, 8, 16)]
    assert writer.deferred() == []


@pytest.mark.guarantee("MIR-3")
def test_translation_never_points_past_an_unconsumed_record():
    store = SyncStore()
    assert store.translate("t", 0, 5) == NO_TRANSLATION
    for sync in (OffsetSync("t", 0, 0, 100), OffsetSync("t", 0, 10, 110)):
        store.add(sync)
    assert store.translate("t", 0, 10) == 110       # exactly at a sync
    assert store.translate("t", 0, 7) == 101        # between syncs: one past the older sync, never 107
    assert store.translate("t", 0, 50) == 111       # ahead of every sync: still only one past
    store.add(OffsetSync("t", 0, 4, 120))           # a restart copied from 4 again: older syncs dropped
    assert store.translate("t", 0, 3) == NO_TRANSLATION
    assert store.translate("t", 0, 9) == 121
