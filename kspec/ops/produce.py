"""`kspec produce TOPIC`: send each line of stdin as one record (as kafka-console-producer.sh does).

Lines may carry headers and a key (kspec/ops/lines.py). With --transactional-id the whole
input is one transaction: committed at end of input, aborted on any error or Ctrl-C.
"""
from __future__ import annotations

import sys

import click
from confluent_kafka import KafkaException, Producer
from kafka.protocol.api_key import ApiKey

from kspec.ops.common import (EXIT_CODES_EPILOG, BadUsage, ConnectionWatch, OpsCommand, OpsError, await_metadata,
                              broker_error, client_config, client_options, require_api)
from kspec.ops.lines import LineError, parse_line

DELIVERY_TIMEOUT_MS = 30_000  # message.timeout.ms: a record not acknowledged by then is reported as failed
TRANSACTION_TIMEOUT_S = 30.0  # init, commit and abort of a transaction
QUEUE_FULL_WAIT_S = 0.05  # when librdkafka's send queue is full, serve delivery reports this long, then retry
COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")


class Deliveries:
    """Delivery reports: how many records were acknowledged, and the first failure."""

    def __init__(self) -> None:
        self.acknowledged = 0
        self.first_error = None

    def __call__(self, error, message) -> None:
        if error is None:
            self.acknowledged += 1
        elif self.first_error is None:
            self.first_error = error


def separator(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A separator given as text; backslash escapes such as \\t are understood."""
    if value is None:
        return None
    value = value.encode("utf-8").decode("unicode_escape")
    if not value:
        raise click.BadParameter("must not be empty", ctx, param)
    return value


@click.command(cls=OpsCommand, epilog=EXIT_CODES_EPILOG)
@click.argument("topic")
@client_options("--producer.config")  # kafka-console-producer.sh's name before KIP-1147
@click.option("--key-separator", callback=separator, metavar="SEP",
              help="Each line is KEY SEP VALUE (split at the first SEP; \\t allowed).")
@click.option("--parse-headers", is_flag=True,
              help="Each line starts with headers name:value,name:value and a tab.")
@click.option("--partition", type=click.IntRange(0), help="Send every record to this partition (default: by key).")
@click.option("--acks", type=click.Choice(["all", "1", "0"]), default="all", show_default=True,
              help="Acknowledgements the leader waits for.")
@click.option("--compression", type=click.Choice(COMPRESSION_TYPES), default="none", show_default=True)
@click.option("--idempotence/--no-idempotence", default=None,
              help="Idempotent producer (KIP-98); default on with --acks all.")
@click.option("--transactional-id", metavar="ID", help="Send all lines in one transaction under this id.")
def produce(topic: str, bootstrap: str, key_separator: str | None, parse_headers: bool, partition: int | None,
            acks: str, compression: str, idempotence: bool | None, transactional_id: str | None) -> None:
    """Send lines from stdin to TOPIC, one record a line.

    Reports the count of acknowledged records on stderr.

    \b
    Examples:
      printf 'hello\\nworld\\n' | kspec produce orders -b 127.0.0.1:9092
      printf 'user-1\\tclicked\\n' | kspec produce orders -b 127.0.0.1:9092 --key-separator '\\t'
      printf 'src:web\\tuser-1\\tclicked\\n' | kspec produce orders -b 127.0.0.1:9092 --parse-headers --key-separator '\\t'
      kspec produce orders -b 127.0.0.1:9092 --transactional-id loader-1 < records.txt
      kspec produce orders -b 127.0.0.1:9094 --command-config client.properties < records.txt  # SASL_SSL
    """
    if idempotence is None:
        idempotence = acks == "all"
    if idempotence and acks != "all":
        raise BadUsage("--idempotence needs --acks all (KIP-98)")
    if transactional_id and not idempotence:
        raise BadUsage("--transactional-id needs an idempotent producer: drop --no-idempotence and use --acks all")
    watch = ConnectionWatch()
    config = client_config(bootstrap, watch, **{
        "acks": acks, "compression.type": compression, "enable.idempotence": idempotence,
        "message.timeout.ms": DELIVERY_TIMEOUT_MS, "allow.auto.create.topics": False})
    if transactional_id:
        config["transactional.id"] = transactional_id
    producer = Producer(config)
    partition_count = len(await_metadata(producer, watch, bootstrap, topic).topics[topic].partitions)
    if partition is not None and partition >= partition_count:
        raise OpsError(f"topic {topic!r} has no partition {partition}; it has partitions 0 to {partition_count - 1}")
    if transactional_id:
        require_api(bootstrap, ApiKey.AddPartitionsToTxn, "transactions")
        transaction_step(f"cannot start transactions as {transactional_id!r}", lambda: producer.init_transactions(TRANSACTION_TIMEOUT_S))
        transaction_step("cannot begin a transaction", producer.begin_transaction)
    deliveries = Deliveries()
    try:
        sent = send_lines(producer, topic, partition, key_separator, parse_headers, deliveries)
        producer.flush()
        if deliveries.first_error is not None:
            raise broker_error(f"{sent - deliveries.acknowledged} of {sent} records not delivered to {topic!r}",
                               deliveries.first_error)
        if transactional_id:
            transaction_step("cannot commit the transaction", lambda: producer.commit_transaction(TRANSACTION_TIMEOUT_S))
    except (click.ClickException, KeyboardInterrupt):
        if transactional_id:
            transaction_step("cannot abort the transaction", lambda: producer.abort_transaction(TRANSACTION_TIMEOUT_S))
            click.echo("Transaction aborted.", err=True)
        producer.flush()
        click.echo(f"Produced {deliveries.acknowledged} records to {topic}.", err=True)
        raise
    click.echo(f"Produced {deliveries.acknowledged} records to {topic}.", err=True)


def send_lines(producer: Producer, topic: str, partition: int | None, key_separator: str | None,
               parse_headers: bool, deliveries: Deliveries) -> int:
    """Queue one record per stdin line; returns how many were queued."""
    sent = 0
    # surrogateescape keeps bytes that are not UTF-8 exactly as they came in
    for number, line in enumerate(open(sys.stdin.fileno(), encoding="utf-8", errors="surrogateescape",
                                       newline="\n", closefd=False), start=1):
        try:
            record = parse_line(line.removesuffix("\n"), key_separator, parse_headers)
        except LineError as e:
            raise BadUsage(f"line {number}: {e}; {sent} earlier lines were sent") from None
        message = {
            "value": record.value.encode("utf-8", "surrogateescape"),
            "key": None if record.key is None else record.key.encode("utf-8", "surrogateescape"),
            "headers": [(name, value.encode("utf-8", "surrogateescape")) for name, value in record.headers],
            "on_delivery": deliveries,
        }
        if partition is not None:
            message["partition"] = partition
        while True:
            try:
                producer.produce(topic, **message)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(QUEUE_FULL_WAIT_S)
        producer.poll(0)
        sent += 1
    return sent


def transaction_step(what: str, step) -> None:
    try:
        step()
    except KafkaException as e:
        raise broker_error(what, e) from None
