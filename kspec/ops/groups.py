"""`kspec groups`: list, describe, reset offsets of and delete consumer groups
(as kafka-consumer-groups.sh does).

`describe` joins three answers: the group's members and assignments (DescribeGroups), its
committed offsets (OffsetFetch, by a consumer that does not join the group; rdkafka.py says
why not the admin client's) and each partition's high watermark (ListOffsets); the lag
is high watermark minus committed offset. `reset-offsets` first computes a plan (a pure
function, `plan_reset`), prints it, and applies it only with --execute.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import click
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka.protocol.api_key import ApiKey

from kspec.ops import rdkafka
from kspec.ops.common import (EXIT_CODES_EPILOG, REQUEST_TIMEOUT_S, BadUsage, ConnectionWatch, OpsError, OpsGroup,
                              broker_error,
                              await_metadata, bootstrap_option, client_config, print_table, require_api, require_topic, result)

NO_OFFSET = -1  # OffsetFetch: the group has not committed this partition; ListOffsets: no such record
INACTIVE_STATES = {ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD}


def connect(bootstrap: str) -> tuple[AdminClient, object]:
    """An admin client and the cluster's metadata, once the broker is known to offer groups."""
    watch = ConnectionWatch()
    admin = AdminClient(client_config(bootstrap, watch))
    metadata = await_metadata(admin, watch, bootstrap)
    require_api(bootstrap, ApiKey.FindCoordinator, "consumer groups")
    return admin, metadata


@click.group(cls=OpsGroup, epilog=EXIT_CODES_EPILOG)
def groups() -> None:
    """List, describe, reset offsets of and delete consumer groups.

    \b
    Examples:
      kspec groups list -b 127.0.0.1:9092
      kspec groups describe billing -b 127.0.0.1:9092
      kspec groups reset-offsets billing -b 127.0.0.1:9092 --topic orders --to-earliest --dry-run
      kspec groups reset-offsets billing -b 127.0.0.1:9092 --topic orders --to-timestamp 2024-05-01T12:00:00 --execute
      kspec groups delete billing -b 127.0.0.1:9092
    """


@groups.command(name="list", epilog=EXIT_CODES_EPILOG)
@bootstrap_option
def list_groups(bootstrap: str) -> None:
    """List consumer groups with their state.

    \b
    Example:
      kspec groups list -b 127.0.0.1:9092
    """
    admin, _ = connect(bootstrap)
    listing = result("cannot list consumer groups", admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S))
    if listing.errors:
        raise broker_error("cannot list consumer groups", listing.errors[0])
    rows = [[g.group_id, g.state.name if g.state else None, g.type.name if g.type else None]
            for g in sorted(listing.valid, key=lambda g: g.group_id)]
    if not rows:
        click.echo("No consumer groups.")
        return
    print_table(["GROUP", "STATE", "TYPE"], rows)


def describe_group(admin: AdminClient, group: str):
    """The group's description; a one-line error when the coordinator does not know it."""
    return result(f"cannot describe group {group!r}",
                  admin.describe_consumer_groups([group], request_timeout=REQUEST_TIMEOUT_S)[group])


def committed_offsets(bootstrap: str, group: str, partitions) -> dict[TopicPartition, int]:
    """The group's committed offsets of these partitions (those it has one for), by one OffsetFetch
    from a consumer that does not join the group; not the admin client's ListConsumerGroupOffsets,
    which crashes the process when a moving coordinator answers NOT_COORDINATOR (rdkafka.py)."""
    config = client_config(bootstrap, ConnectionWatch(), **{"group.id": group})
    what = f"cannot fetch committed offsets of group {group!r}"
    try:
        answer = rdkafka.committed_offsets(config, [(tp.topic, tp.partition) for tp in partitions], REQUEST_TIMEOUT_S)
    except KafkaException as e:
        raise broker_error(what, e) from None
    failed = [tp for tp in answer if tp.error is not None]
    if failed:
        raise broker_error(f"{what} ({failed[0].topic}-{failed[0].partition})", failed[0].error)
    return {TopicPartition(tp.topic, tp.partition): tp.offset for tp in answer if tp.offset >= 0}


def list_offsets(admin: AdminClient, partitions, spec_for) -> dict[TopicPartition, int]:
    """ListOffsets for each partition with the OffsetSpec `spec_for(partition)` gives."""
    if not partitions:
        return {}
    futures = admin.list_offsets({tp: spec_for(tp) for tp in partitions}, request_timeout=REQUEST_TIMEOUT_S)
    return {TopicPartition(tp.topic, tp.partition): result(f"cannot list offsets of {tp.topic}-{tp.partition}", f).offset
            for tp, f in futures.items()}


@groups.command(epilog=EXIT_CODES_EPILOG)
@click.argument("group")
@bootstrap_option
def describe(group: str, bootstrap: str) -> None:
    """Show GROUP's state, members, assignments, committed offsets and lag per partition.

    \b
    Example:
      kspec groups describe billing -b 127.0.0.1:9092
    """
    admin, metadata = connect(bootstrap)
    description = describe_group(admin, group)
    owner = {}
    for member in description.members:
        for tp in member.assignment.topic_partitions:
            owner[TopicPartition(tp.topic, tp.partition)] = member
    # OffsetFetch names its partitions: the assigned ones and every one in the cluster's metadata,
    # which covers all a group can have committed for (Kafka drops a deleted topic's offsets).
    in_cluster = {TopicPartition(name, p) for name, topic in metadata.topics.items() for p in topic.partitions}
    committed = committed_offsets(bootstrap, group, sorted(in_cluster | set(owner), key=lambda tp: (tp.topic, tp.partition)))
    if description.state == ConsumerGroupState.DEAD and not committed:
        raise OpsError(f"consumer group {group!r} does not exist; list groups with `kspec groups list`")
    partitions = sorted(set(committed) | set(owner), key=lambda tp: (tp.topic, tp.partition))
    high_watermarks = list_offsets(admin, partitions, lambda tp: OffsetSpec.latest())
    coordinator = description.coordinator.id if description.coordinator else None
    click.echo(f"Group: {group}  State: {description.state.name}  Coordinator: {coordinator}  "
               f"Assignor: {description.partition_assignor or '-'}  Members: {len(description.members)}")
    rows = []
    for tp in partitions:
        offset = committed.get(tp, NO_OFFSET)
        high_watermark = high_watermarks[tp]
        member = owner.get(tp)
        rows.append([tp.topic, tp.partition, offset if offset >= 0 else None, high_watermark,
                     high_watermark - offset if offset >= 0 else None,
                     member.member_id if member else None, member.host if member else None,
                     member.client_id if member else None])
    print_table(["TOPIC", "PARTITION", "COMMITTED-OFFSET", "HIGH-WATERMARK", "LAG", "MEMBER-ID", "HOST",
                 "CLIENT-ID"], rows)


@dataclass(frozen=True)
class ResetTarget:
    """Where to move a group's offsets: 'earliest', 'latest', 'offset' (value) or 'timestamp' (value, ms)."""

    kind: str
    value: int | None = None


def plan_reset(target: ResetTarget, log_start: dict, high_watermark: dict, at_timestamp: dict) -> dict:
    """The new committed offset of each partition.

    An explicit offset outside [log start, high watermark] is moved to the nearer end, and a
    timestamp after the last record gives the high watermark, as kafka-consumer-groups.sh does.
    """
    plan = {}
    for tp in log_start:
        low, high = log_start[tp], high_watermark[tp]
        assert 0 <= low <= high, (tp, low, high)
        if target.kind == "earliest":
            plan[tp] = low
        elif target.kind == "latest":
            plan[tp] = high
        elif target.kind == "offset":
            plan[tp] = min(max(target.value, low), high)
        else:
            found = at_timestamp[tp]
            plan[tp] = high if found == NO_OFFSET else found
        assert low <= plan[tp] <= high
    return plan


def parse_timestamp(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """Milliseconds since the epoch, or an ISO-8601 date-time (UTC unless it names a zone)."""
    if value is None:
        return None
    if value.isdigit():
        return int(value)
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither epoch milliseconds nor an ISO-8601 date-time "
                                 "(for example 2024-05-01T12:00:00)", ctx, param) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


@groups.command(name="reset-offsets", epilog=EXIT_CODES_EPILOG)
@click.argument("group")
@bootstrap_option
@click.option("--topic", "topic_names", multiple=True, required=True, metavar="TOPIC",
              help="A topic whose offsets to reset, every partition (repeatable).")
@click.option("--to-earliest", is_flag=True, help="To each partition's log start offset.")
@click.option("--to-latest", is_flag=True, help="To each partition's high watermark.")
@click.option("--to-offset", type=click.IntRange(0), help="To this offset (kept within the log).")
@click.option("--to-timestamp", callback=parse_timestamp, metavar="WHEN",
              help="To the first record at or after WHEN: epoch milliseconds or ISO-8601 (UTC by default).")
@click.option("--dry-run", is_flag=True, help="Print the plan, change nothing.")
@click.option("--execute", is_flag=True, help="Apply the plan.")
def reset_offsets(group: str, bootstrap: str, topic_names: tuple[str, ...], to_earliest: bool, to_latest: bool,
                  to_offset: int | None, to_timestamp: int | None, dry_run: bool, execute: bool) -> None:
    """Move GROUP's committed offsets on the given topics; the group must have no active members.

    \b
    Examples:
      kspec groups reset-offsets billing -b 127.0.0.1:9092 --topic orders --to-earliest --dry-run
      kspec groups reset-offsets billing -b 127.0.0.1:9092 --topic orders --to-offset 100 --execute
    """
    targets = [ResetTarget(kind, value) for kind, value, given in (
        ("earliest", None, to_earliest), ("latest", None, to_latest), ("offset", to_offset, to_offset is not None),
        ("timestamp", to_timestamp, to_timestamp is not None)) if given]
    if len(targets) != 1:
        raise BadUsage("give exactly one of --to-earliest, --to-latest, --to-offset, --to-timestamp")
    if dry_run == execute:
        raise BadUsage("give --dry-run to see the plan or --execute to apply it")
    target = targets[0]
    admin, metadata = connect(bootstrap)
    partitions = [TopicPartition(name, p) for name in topic_names for p in sorted(require_topic(metadata, name).partitions)]
    description = describe_group(admin, group)
    if execute and description.state not in INACTIVE_STATES:
        raise OpsError(f"group {group!r} is {description.state.name} with {len(description.members)} members; "
                       "offsets can be reset only while no consumer is running in it: stop them first")
    log_start = list_offsets(admin, partitions, lambda tp: OffsetSpec.earliest())
    high_watermark = list_offsets(admin, partitions, lambda tp: OffsetSpec.latest())
    at_timestamp = (list_offsets(admin, partitions, lambda tp: OffsetSpec.for_timestamp(target.value))
                    if target.kind == "timestamp" else {})
    plan = plan_reset(target, log_start, high_watermark, at_timestamp)
    current = committed_offsets(bootstrap, group, partitions)
    print_table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
                [[tp.topic, tp.partition, current.get(tp, NO_OFFSET) if current.get(tp, NO_OFFSET) >= 0 else None,
                  plan[tp]] for tp in plan])
    if dry_run:
        click.echo("Dry run: nothing changed; run again with --execute to apply.", err=True)
        return
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(tp.topic, tp.partition, offset)
                                                    for tp, offset in plan.items()])]
    answer = result(f"cannot reset offsets of group {group!r}",
                    admin.alter_consumer_group_offsets(request, request_timeout=REQUEST_TIMEOUT_S)[group])
    failed = [tp for tp in answer.topic_partitions if tp.error is not None]
    if failed:
        raise OpsError(f"cannot reset {failed[0].topic}-{failed[0].partition} of group {group!r}: {failed[0].error.str()}")
    click.echo(f"Reset offsets of group {group} on {len(plan)} partitions.", err=True)


@groups.command(epilog=EXIT_CODES_EPILOG)
@click.argument("names", metavar="GROUP...", nargs=-1, required=True)
@bootstrap_option
def delete(names: tuple[str, ...], bootstrap: str) -> None:
    """Delete consumer groups and their committed offsets; each must have no active members.

    \b
    Example:
      kspec groups delete billing -b 127.0.0.1:9092
    """
    admin, _ = connect(bootstrap)
    for name, future in admin.delete_consumer_groups(list(names), request_timeout=REQUEST_TIMEOUT_S).items():
        result(f"cannot delete group {name!r}", future)
        click.echo(f"Deleted group {name}.")
