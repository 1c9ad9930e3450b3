"""`kspec topics`: create, list, describe, alter and delete topics (as kafka-topics.sh does).

`describe` shows, per partition, the leader, replicas, in-sync replicas, the leader epoch and
the partition's offsets: log start offset, log end offset, high watermark and last stable
offset. The log end offset is not something a consumer may see: it is asked of each leader
with a raw ListOffsets whose replica_id is -2, the id Kafka's debugging tools use, which Kafka
answers with the leader's log end offset instead of the high watermark.
"""
from __future__ import annotations

import click
from confluent_kafka import IsolationLevel, TopicCollection, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewPartitions, NewTopic, OffsetSpec)

from kspec.ops.common import (EXIT_CODES_EPILOG, REQUEST_TIMEOUT_S, BadUsage, ConnectionWatch, OpsError, OpsGroup,
                              await_metadata, bootstrap_option, client_config, node_list, parse_configs,
                              print_table, require_topic, result, wire_client)
from reference.protocol.api_keys import ApiKey

PARTITIONS_MAX = 100_000  # a sanity bound on --partitions; brokers enforce their own limits
REPLICATION_FACTOR_MAX = 1_000
BROKER_DEFAULT = -1  # CreateTopics v4+: use the broker's num.partitions / default.replication.factor
NO_LEADER = -1
DEBUGGING_REPLICA_ID = -2  # ListOffsets from a tool: LATEST is the log end offset, not the high watermark
LATEST_TIMESTAMP = -1
LIST_OFFSETS_VERSION = 1  # the oldest version every broker since Kafka 0.10.1 still answers
LOG_END_OFFSET_TIMEOUT_S = 5.0  # per leader; a broker that does not answer shows "-"

partitions_type = click.IntRange(1, PARTITIONS_MAX)
config_option = click.option("--config", "configs", multiple=True, callback=parse_configs, metavar="KEY=VALUE",
                             help="A topic config, e.g. retention.ms=60000 (repeatable).")


def connect(bootstrap: str) -> tuple[AdminClient, object]:
    """An admin client and the cluster's metadata; fails in one line when unreachable."""
    watch = ConnectionWatch()
    admin = AdminClient(client_config(bootstrap, watch))
    return admin, await_metadata(admin, watch, bootstrap)


@click.group(cls=OpsGroup, epilog=EXIT_CODES_EPILOG)
def topics() -> None:
    """Create, list, describe, alter and delete topics.

    \b
    Examples:
      kspec topics create orders -b 127.0.0.1:9092 --partitions 3 --config retention.ms=600000
      kspec topics list -b 127.0.0.1:9092
      kspec topics describe orders -b 127.0.0.1:9092
      kspec topics alter orders -b 127.0.0.1:9092 --partitions 6
      kspec topics delete orders -b 127.0.0.1:9092
    """


@topics.command(epilog=EXIT_CODES_EPILOG)
@click.argument("topic")
@bootstrap_option
@click.option("--partitions", type=partitions_type, help="Partition count (default: the broker's num.partitions).")
@click.option("--replication-factor", type=click.IntRange(1, REPLICATION_FACTOR_MAX),
              help="Replicas per partition (default: the broker's default.replication.factor).")
@config_option
def create(topic: str, bootstrap: str, partitions: int | None, replication_factor: int | None,
           configs: dict[str, str]) -> None:
    """Create TOPIC.

    \b
    Example:
      kspec topics create orders -b 127.0.0.1:9092 --partitions 3 --replication-factor 1
    """
    admin, _ = connect(bootstrap)
    new_topic = NewTopic(topic, num_partitions=partitions or BROKER_DEFAULT,
                         replication_factor=replication_factor or BROKER_DEFAULT, config=configs)
    result(f"cannot create topic {topic!r}", admin.create_topics([new_topic])[topic])
    click.echo(f"Created topic {topic}.")


@topics.command(name="list", epilog=EXIT_CODES_EPILOG)
@bootstrap_option
def list_topics(bootstrap: str) -> None:
    """List topic names, one a line.

    \b
    Example:
      kspec topics list -b 127.0.0.1:9092
    """
    _, metadata = connect(bootstrap)
    for name in sorted(metadata.topics):
        click.echo(name)


@topics.command(epilog=EXIT_CODES_EPILOG)
@click.argument("names", metavar="[TOPIC]...", nargs=-1)
@bootstrap_option
def describe(names: tuple[str, ...], bootstrap: str) -> None:
    """Show topics' partitions: leaders, replicas, ISR, epochs, offsets.

    For each topic (all when none is named): its id and config overrides, then per partition
    the leader, replicas, in-sync replicas, leader epoch, log start offset, log end offset,
    high watermark and last stable offset.

    The leader epoch is the one ListOffsets reports with the partition's latest offset. The
    log end offset is asked of the leader with replica_id -2 (Kafka's debugging id); a broker
    that does not answer that shows "-".

    \b
    Example:
      kspec topics describe orders -b 127.0.0.1:9092
    """
    admin, metadata = connect(bootstrap)
    for name in names:
        require_topic(metadata, name)
    names = names or tuple(sorted(metadata.topics))
    if not names:
        click.echo("No topics.")
        return
    descriptions = admin.describe_topics(TopicCollection(list(names)))
    configs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, name) for name in names])
    configs_by_topic = {resource.name: future for resource, future in configs.items()}
    for name in names:
        description = result(f"cannot describe topic {name!r}", descriptions[name])
        partitions = [TopicPartition(name, p.id) for p in description.partitions]
        offsets = partition_offsets(admin, partitions)
        end_offsets = log_end_offsets(name, description.partitions)
        overrides = {key: entry.value for key, entry in
                     result(f"cannot read configs of {name!r}", configs_by_topic[name]).items()
                     if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
        replication_factor = len(description.partitions[0].replicas) if description.partitions else 0
        click.echo(f"Topic: {name}  TopicId: {description.topic_id}  PartitionCount: {len(partitions)}  "
                   f"ReplicationFactor: {replication_factor}  "
                   f"Configs: {','.join(f'{k}={v}' for k, v in sorted(overrides.items())) or '-'}")
        rows = []
        for p in description.partitions:
            log_start, high_watermark, last_stable, leader_epoch = offsets[TopicPartition(name, p.id)]
            rows.append([p.id, p.leader.id if p.leader else NO_LEADER, node_list(p.replicas), node_list(p.isr),
                         leader_epoch, log_start, end_offsets.get(p.id), high_watermark, last_stable])
        print_table(["PARTITION", "LEADER", "REPLICAS", "ISR", "LEADER-EPOCH", "LOG-START-OFFSET",
                     "LOG-END-OFFSET", "HIGH-WATERMARK", "LAST-STABLE-OFFSET"], rows)


def partition_offsets(admin: AdminClient, partitions: list[TopicPartition]) -> dict:
    """Per partition: (log start offset, high watermark, last stable offset, leader epoch).

    ListOffsets answers LATEST with the high watermark for read_uncommitted and with the
    last stable offset for read_committed (KIP-98); EARLIEST is the log start offset.
    """
    if not partitions:
        return {}

    def ask(spec: OffsetSpec, isolation: IsolationLevel) -> dict:
        futures = admin.list_offsets({tp: spec for tp in partitions}, isolation_level=isolation,
                                     request_timeout=REQUEST_TIMEOUT_S)
        return {tp: result(f"cannot list offsets of {tp.topic}-{tp.partition}", f) for tp, f in futures.items()}

    earliest = ask(OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED)
    latest = ask(OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED)
    stable = ask(OffsetSpec.latest(), IsolationLevel.READ_COMMITTED)
    answers = {}
    for tp in partitions:
        key = TopicPartition(tp.topic, tp.partition)
        leader_epoch = latest[tp].leader_epoch
        answers[key] = (earliest[tp].offset, latest[tp].offset, stable[tp].offset,
                        leader_epoch if leader_epoch is not None and leader_epoch >= 0 else None)
    return answers


def log_end_offsets(topic: str, partitions) -> dict[int, int]:
    """Partition index -> the leader's log end offset, for the partitions whose leader answers
    ListOffsets LATEST for replica_id -2 without an error (the others are left out)."""
    by_leader: dict[str, list[int]] = {}
    for p in partitions:
        if p.leader is not None:
            by_leader.setdefault(f"{p.leader.host}:{p.leader.port}", []).append(p.id)
    answers: dict[int, int] = {}
    for address, indexes in by_leader.items():
        body = {"replica_id": DEBUGGING_REPLICA_ID, "topics": [{"name": topic, "partitions": [
            {"partition_index": index, "timestamp": LATEST_TIMESTAMP} for index in indexes]}]}
        try:
            with wire_client(address, client_id="kspec-topics", timeout_s=LOG_END_OFFSET_TIMEOUT_S) as wire:
                response = wire.request(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
        except (OSError, ValueError):  # unreachable, closed, timed out, or an answer that does not decode
            continue
        answers.update({p.partition_index: p.offset for t in response.topics for p in t.partitions
                        if p.error_code == 0 and p.offset >= 0})
    return answers


@topics.command(epilog=EXIT_CODES_EPILOG)
@click.argument("topic")
@bootstrap_option
@click.option("--partitions", type=partitions_type, help="New, larger partition count.")
@config_option
@click.option("--delete-config", "deleted_configs", multiple=True, metavar="KEY",
              help="Remove a topic config override, back to the broker default (repeatable).")
def alter(topic: str, bootstrap: str, partitions: int | None, configs: dict[str, str],
          deleted_configs: tuple[str, ...]) -> None:
    """Add partitions to TOPIC or change its configs.

    \b
    Examples:
      kspec topics alter orders -b 127.0.0.1:9092 --partitions 6
      kspec topics alter orders -b 127.0.0.1:9092 --config retention.ms=3600000 --delete-config cleanup.policy
    """
    if partitions is None and not configs and not deleted_configs:
        raise BadUsage("nothing to change: give --partitions, --config or --delete-config")
    admin, metadata = connect(bootstrap)
    current = len(require_topic(metadata, topic).partitions)
    if partitions is not None and partitions != current:
        if partitions < current:
            raise OpsError(f"cannot shrink topic {topic!r} from {current} to {partitions} partitions; "
                           "partition counts can only grow")
        result(f"cannot add partitions to {topic!r}", admin.create_partitions([NewPartitions(topic, partitions)])[topic])
        click.echo(f"Topic {topic} now has {partitions} partitions.")
    if configs or deleted_configs:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deleted_configs]
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
        for future in admin.incremental_alter_configs([resource]).values():
            result(f"cannot change configs of {topic!r}", future)
        click.echo(f"Updated configs of topic {topic}.")


@topics.command(epilog=EXIT_CODES_EPILOG)
@click.argument("names", metavar="TOPIC...", nargs=-1, required=True)
@bootstrap_option
def delete(names: tuple[str, ...], bootstrap: str) -> None:
    """Delete topics and all their records.

    \b
    Example:
      kspec topics delete orders payments -b 127.0.0.1:9092
    """
    admin, metadata = connect(bootstrap)
    for name in names:
        require_topic(metadata, name)
    for name, future in admin.delete_topics(list(names)).items():
        result(f"cannot delete topic {name!r}", future)
        click.echo(f"Deleted topic {name}.")
