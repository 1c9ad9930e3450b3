"""`kspec mirror mm2.properties` runs every enabled flow; `kspec mirror status mm2.properties`
shows each flow's progress and checkpoints; `kspec mirror record mm2.properties --out DIR`
writes both clusters' records of each flow for `kspec check DIR`.

As `connect-mirror-maker.sh mm2.properties [--clusters B ...]`: `--clusters` runs only the flows
into the named target clusters. A bad file, an unknown alias, a regex that does not compile or
a target refusing to create a topic is one line on stderr and exit 2; a cluster that cannot be
reached is logged and retried with backoff. SIGTERM or SIGINT stops cleanly: what was copied is
committed first.
"""
from __future__ import annotations

import logging
import signal
import sys
import threading

import click
from confluent_kafka import KafkaException

from kspec.ops.common import BadUsage, OpsCommand, OpsError, OpsGroup
from mirror.clients import MirrorError
from mirror.config import ConfigError, FlowConfig, load

log = logging.getLogger("mirror")


class MirrorGroup(OpsGroup):
    """`kspec mirror FILE` runs the mirror; `kspec mirror status FILE` is the operator view."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


def clusters_option(command):
    return click.option("--clusters", multiple=True, metavar="ALIAS",
                        help="only the flows into these target clusters (repeatable)")(command)


def _flows(properties: str, clusters: tuple[str, ...]) -> list[FlowConfig]:
    try:
        return load(properties, list(clusters) or None)
    except ConfigError as error:
        raise BadUsage(f"{properties}: {error}") from None


@click.group(cls=MirrorGroup)
def mirror() -> None:
    """MirrorMaker 2-style mirroring between Kafka-compatible clusters.

    \b
    Examples:
      kspec mirror mm2.properties
      kspec mirror mm2.properties --clusters B
      kspec mirror status mm2.properties
      kspec mirror record mm2.properties --out run/ && kspec check run/
    """


@mirror.command(cls=OpsCommand)
@click.argument("properties", metavar="MM2_PROPERTIES")
@clusters_option
def run(properties: str, clusters: tuple[str, ...]) -> None:
    """Mirror every enabled flow of an mm2.properties file until stopped."""
    from mirror.flow import Flow

    flows = _flows(properties, clusters)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    failures: list[str] = []   # MirrorError: the config or a cluster's refusal (exit 2)
    crashes: list[str] = []    # anything else (exit 1)

    def run_flow(config: FlowConfig) -> None:
        try:
            flow = Flow(config, stopping)
            if flow.start():
                flow.run()
        except MirrorError as error:
            failures.append(str(error))
            stopping.set()
        except Exception:
            log.exception("flow %s failed", config.name)
            crashes.append(f"flow {config.name} failed; see the log above")
            stopping.set()

    threads = [threading.Thread(target=run_flow, args=(config,), name=config.name) for config in flows]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        for thread in threads:
            thread.join(0.2)
    if failures:
        raise BadUsage(failures[0])
    if crashes:
        raise OpsError(crashes[0])


@mirror.command(cls=OpsCommand)
@click.argument("properties", metavar="MM2_PROPERTIES")
@clusters_option
def status(properties: str, clusters: tuple[str, ...]) -> None:
    """Per remote partition: source end, mirrored position, target end and lag; checkpoints per group."""
    from mirror.status import show

    flows = _flows(properties, clusters)
    try:
        for config in flows:
            show(config)
    except MirrorError as error:
        raise BadUsage(str(error)) from None


@mirror.command(cls=OpsCommand)
@click.argument("properties", metavar="MM2_PROPERTIES")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="folder for the history (one subfolder per flow when there are several)")
@clusters_option
def record(properties: str, out_dir: str, clusters: tuple[str, ...]) -> None:
    """Record both clusters' records of each flow for `kspec check` (MIR-1, MIR-2)."""
    from pathlib import Path

    from mirror.history import record as record_flow

    flows = _flows(properties, clusters)
    for config in flows:
        folder = Path(out_dir) / (config.name.replace("->", "-to-") if len(flows) > 1 else "")
        try:
            source_records, target_records = record_flow(config, folder)
        except (MirrorError, KafkaException) as error:
            raise OpsError(f"flow {config.name}: cannot record: {error}") from None
        click.echo(f"flow {config.name}: {source_records} source records, {target_records} copies in {folder}")
