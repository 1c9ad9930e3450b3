"""`kspec mirror status`: what a flow has copied and translated, read from the clusters alone.

Per remote partition: the source's end offset, the mirror's position (one past the last source
offset whose copy is committed, from `mm2-offsets.<source>.internal`), the remote partition's
end offset and the lag (source end minus position). Then the newest checkpoint of every group
and partition from `<source>.checkpoints.internal`.
"""
from __future__ import annotations

import click
from confluent_kafka import KafkaException, TopicPartition

from kspec.ops.common import OpsError, print_table
from mirror.clients import ConnectionLog, build, partition_count, read_to_end
from mirror.config import FlowConfig
from mirror.records import Checkpoint, decode_progress

STATUS_TIMEOUT_S = 10.0


def show(config: FlowConfig) -> None:
    source_connection, target_connection = ConnectionLog(config.source), ConnectionLog(config.target)
    source_admin = build("admin", config.source_clients, source_connection)
    target_admin = build("admin", config.target_clients, target_connection)
    source_metadata = _metadata(source_admin, config.source)
    target_metadata = _metadata(target_admin, config.target)
    progress: dict[tuple[str, int], int] = {}
    if config.offsets_topic in target_metadata.topics:
        for message in read_to_end(config.target_clients, target_connection, config.offsets_topic,
                                   partition_count(target_admin, config.offsets_topic), read_committed=True):
            decoded = decode_progress(message.key(), message.value())
            if decoded is not None and decoded[0] == config.source:
                _, topic, partition, last = decoded
                progress[(topic, partition)] = -1 if last is None else last
    source_ends = _ends(config.source_clients, source_connection,
                        [(t, p) for t, m in source_metadata.topics.items() if config.mirrors_topic(t) for p in m.partitions])
    remote = {(t, p): config.policy.format_remote_topic(config.source, t) for t, p in source_ends}
    target_ends = _ends(config.target_clients, target_connection,
                        [(remote[tp], tp[1]) for tp in source_ends if remote[tp] in target_metadata.topics])
    rows = []
    for (topic, partition), source_end in sorted(source_ends.items()):
        position = progress.get((topic, partition), -1) + 1
        target_end = target_ends.get((remote[(topic, partition)], partition))
        rows.append((remote[(topic, partition)], partition, source_end, position,
                     "-" if target_end is None else target_end, max(source_end - position, 0)))
    click.echo(f"flow {config.name} ({'exactly once' if config.exactly_once else 'at least once'})")
    print_table(("REMOTE TOPIC", "PARTITION", "SOURCE END", "MIRRORED", "TARGET END", "LAG"), rows)
    if config.checkpoints_topic not in target_metadata.topics:
        click.echo(f"no checkpoints yet ({config.checkpoints_topic} does not exist in {config.target})")
        return
    newest: dict[tuple[str, str, int], Checkpoint] = {}
    for message in read_to_end(config.target_clients, target_connection, config.checkpoints_topic, 1):
        checkpoint = Checkpoint.decode(message.key(), message.value())
        newest[(checkpoint.group, checkpoint.topic, checkpoint.partition)] = checkpoint
    print_table(("GROUP", "REMOTE TOPIC", "PARTITION", "SOURCE OFFSET", "TARGET OFFSET"),
                [(c.group, c.topic, c.partition, c.upstream_offset, c.offset) for _, c in sorted(newest.items())])


def _metadata(admin, alias: str):
    try:
        return admin.list_topics(timeout=STATUS_TIMEOUT_S)
    except KafkaException as error:
        raise OpsError(f"cluster {alias} cannot be reached: {error.args[0].str()}; "
                       f"check {alias}.bootstrap.servers and that the cluster runs") from None


def _ends(configs, connection, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Each partition's end offset (its high watermark)."""
    if not partitions:
        return {}
    consumer = build("consumer", configs, connection, **{"group.id": "kspec-mirror-status"})
    try:
        return {(t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=STATUS_TIMEOUT_S)[1]
                for t, p in partitions}
    except KafkaException as error:
        raise OpsError(f"cluster {connection.alias}: cannot read end offsets: {error.args[0].str()}") from None
    finally:
        consumer.close()
