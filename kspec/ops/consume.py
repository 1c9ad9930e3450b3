"""`kspec consume TOPIC`: print a topic's records (as kafka-console-consumer.sh does).

Without --group the consumer assigns itself the partitions and commits nothing; with --group
it subscribes as a member of that consumer group, commits what it printed, and reports the
group's committed offsets when it stops. It stops at --max-messages, after --timeout-ms
without a record, or on Ctrl-C or SIGTERM; all are a clean exit (code 0).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

import click
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition
from kafka.protocol.api_key import ApiKey

from kspec.ops.common import (EXIT_CODES_EPILOG, REQUEST_TIMEOUT_S, BadUsage, ConnectionWatch, OpsCommand, OpsError,
                              await_metadata, broker_error, client_config, client_options, require_api)
from kspec.ops.lines import FIELDS, PrintedRecord, decode, format_json, format_text

POLL_INTERVAL_S = 0.2  # one poll; Ctrl-C and the idle timeout are checked between polls
ASSIGN_GROUP_ID = "kspec-consume"  # librdkafka wants a group.id even when nothing joins or commits
FATAL_CODES = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED,
               KafkaError.GROUP_AUTHORIZATION_FAILED}
NAMED_OFFSETS = {"earliest": OFFSET_BEGINNING, "latest": OFFSET_END}


def start_offset(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None or value in NAMED_OFFSETS:
        return NAMED_OFFSETS.get(value)
    if not value.isdigit():
        raise click.BadParameter(f"{value!r} is not an offset: give a number, 'earliest' or 'latest'", ctx, param)
    return int(value)


def field_list(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    fields = tuple(f.strip() for f in value.split(",") if f.strip())
    unknown = [f for f in fields if f not in FIELDS]
    if unknown or not fields:
        raise click.BadParameter(f"{','.join(unknown) or 'nothing'} is not a field; choose from {','.join(FIELDS)}",
                                 ctx, param)
    return fields


@click.command(cls=OpsCommand, epilog=EXIT_CODES_EPILOG)
@click.argument("topic")
@client_options("--consumer.config")  # kafka-console-consumer.sh's name before KIP-1147
@click.option("--group", metavar="GROUP", help="Consume as a member of this consumer group and commit offsets.")
@click.option("--from-beginning", is_flag=True,
              help="Start at the log start offset (with --group: where the group has no committed offset).")
@click.option("--partition", type=click.IntRange(0), help="Read only this partition.")
@click.option("--offset", callback=start_offset, metavar="OFFSET",
              help="With --partition: start here (a number, 'earliest' or 'latest').")
@click.option("--isolation", type=click.Choice(["read_uncommitted", "read_committed"]), default="read_uncommitted",
              show_default=True, help="read_committed hides aborted and open transactions (KIP-98).")
@click.option("--max-messages", type=click.IntRange(1), help="Stop after this many records.")
@click.option("--timeout-ms", type=click.IntRange(1), help="Stop when no record arrives for this long.")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Text: the fields tab-separated. JSON: one object a line.")
@click.option("--print", "fields", default="value", show_default=True, callback=field_list, metavar="FIELDS",
              help=f"Comma-separated fields to print, in order: {','.join(FIELDS)}.")
def consume(topic: str, bootstrap: str, group: str | None, from_beginning: bool, partition: int | None,
            offset: int | None, isolation: str, max_messages: int | None, timeout_ms: int | None,
            output_format: str, fields: tuple[str, ...]) -> None:
    """Print TOPIC's records, one a line, as text or JSON.

    Starts at the end of each partition unless told otherwise. Reports on stderr how many
    records were printed and, with --group, the group's committed offsets.

    \b
    Examples:
      kspec consume orders -b 127.0.0.1:9092 --from-beginning --max-messages 10
      kspec consume orders -b 127.0.0.1:9092 --partition 0 --offset 42 --print offset,key,value
      kspec consume orders -b 127.0.0.1:9092 --group billing --format json --print key,value,headers
      kspec consume orders -b 127.0.0.1:9092 --isolation read_committed --from-beginning --timeout-ms 5000
      kspec consume orders -b 127.0.0.1:9094 --command-config client.properties --from-beginning  # SASL_SSL
    """
    if offset is not None and partition is None:
        raise BadUsage("--offset needs --partition")
    if group and partition is not None:
        raise BadUsage("--partition reads without a group; drop --group, or drop --partition to read every partition")
    watch = ConnectionWatch()
    consumer = Consumer(client_config(bootstrap, watch, **{
        "group.id": group or ASSIGN_GROUP_ID, "enable.auto.commit": bool(group),
        "auto.offset.reset": "earliest" if from_beginning else "latest", "isolation.level": isolation}))
    metadata = await_metadata(consumer, watch, bootstrap, topic)
    if group:
        require_api(bootstrap, ApiKey.FindCoordinator, "consumer groups")
    partitions = sorted(metadata.topics[topic].partitions)
    if partition is not None and partition not in partitions:
        raise OpsError(f"topic {topic!r} has no partition {partition}; it has partitions 0 to {len(partitions) - 1}")
    if group:
        consumer.subscribe([topic])
    else:
        first = OFFSET_BEGINNING if from_beginning else OFFSET_END
        consumer.assign([TopicPartition(topic, p, first if offset is None else offset)
                         for p in partitions if partition in (None, p)])
    # Ctrl-C (or SIGTERM) is how a console consumer is stopped: it ends the loop between two
    # records, so the count reported is exactly what was printed, and the group commits it.
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    printer = RecordPrinter(consumer, output_format, fields)
    try:
        printer.run(max_messages, timeout_ms, stop)
    finally:
        click.echo(f"Processed a total of {printer.printed} messages.", err=True)
        if group:
            report_committed(consumer, group)
        consumer.close()


class RecordPrinter:
    """Polls and prints records until a limit is reached or `stop` is set; `printed` counts them."""

    def __init__(self, consumer: Consumer, output_format: str, fields: tuple[str, ...]) -> None:
        self.consumer = consumer
        self.format = format_json if output_format == "json" else format_text
        self.fields = fields
        self.printed = 0
        self.warned: set[int] = set()

    def run(self, max_messages: int | None, timeout_ms: int | None, stop: threading.Event) -> None:
        last_record_s = time.monotonic()
        try:
            while not stop.is_set() and (max_messages is None or self.printed < max_messages):
                message = self.consumer.poll(POLL_INTERVAL_S)
                if message is None:
                    sys.stdout.flush()  # idle: let a reader at the other end of a pipe see what came
                    if timeout_ms is not None and (time.monotonic() - last_record_s) * 1000 >= timeout_ms:
                        break
                    continue
                if message.error():
                    self.on_error(message.error(), message.topic())
                    continue
                sys.stdout.write(self.format(printed_record(message), self.fields) + "\n")
                self.printed += 1
                last_record_s = time.monotonic()
            sys.stdout.flush()
        except BrokenPipeError:  # the reader went away (e.g. `| head`): stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    def on_error(self, error: KafkaError, topic: str) -> None:
        if error.fatal() or error.code() in FATAL_CODES:
            raise broker_error(f"cannot consume {topic}", error)
        if error.code() not in self.warned:  # transient: librdkafka retries by itself
            self.warned.add(error.code())
            click.echo(f"warning: {error.str()} (retrying)", err=True)


def printed_record(message) -> PrintedRecord:
    return PrintedRecord(topic=message.topic(), partition=message.partition(), offset=message.offset(),
                         timestamp=message.timestamp()[1], key=decode(message.key()), value=decode(message.value()),
                         headers=tuple((name, decode(value)) for name, value in message.headers() or ()))


def report_committed(consumer: Consumer, group: str) -> None:
    """Commit what was printed and say on stderr where the group now stands."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as e:
        if e.args[0].code() != KafkaError._NO_OFFSET:  # nothing new to commit is fine
            click.echo(f"warning: commit failed: {e.args[0].str()}", err=True)
    assignment = consumer.assignment()
    if not assignment:
        click.echo(f"Group {group}: no partitions assigned, nothing committed.", err=True)
        return
    try:
        committed = consumer.committed(assignment, timeout=REQUEST_TIMEOUT_S)
    except KafkaException as e:
        click.echo(f"warning: cannot read committed offsets of group {group}: {e.args[0].str()}", err=True)
        return
    offsets = ", ".join(f"{tp.topic}-{tp.partition}={tp.offset if tp.offset >= 0 else 'none'}"
                        for tp in sorted(committed, key=lambda tp: (tp.topic, tp.partition)))
    click.echo(f"Group {group} committed offsets: {offsets}", err=True)
