"""`kspec faults run` (a fault-injection run with a live progress line), `kspec faults soak` and `kspec faults clean`."""
from __future__ import annotations

import signal
import sys
from pathlib import Path

import click

from faults import net

STREAMS_KEY_COUNT = 4  # --workload quixstreams: topics t0 and t1, so the application keeps two state stores


@click.group()
def faults() -> None:
    """Fault injection: partitions, kills, pauses, power cuts, disk faults and clock skew under a recorded workload."""


@faults.command()
@click.option("--target", default="reference", show_default=True,
              help="'reference' (kspec's broker), 'docker' (kspec's broker in containers) or a TOML file "
                   "describing how to start any broker (with an 'image' key: in containers).")
@click.option("--image", default=None,
              help="Containers' image (--target docker or a TOML with an image); default: the reference "
                   "image of these sources, built on first use.")
@click.option("--nodes", type=int, default=1, show_default=True, help="Nodes of the reference target.")
@click.option("--nemesis", default="partition,kill,pause", show_default=True,
              help="Comma-separated fault packages: partition, kill, pause, link, power, disk, io, clock, malformed; "
                   "'none' for none. PACKAGE:VARIANT holds kill, pause or power to one variant, "
                   "e.g. power:all (one, leader, minority, all).")
@click.option("--time-limit", "time_limit_s", type=float, default=60.0, show_default=True,
              help="Seconds of workload under faults.")
@click.option("--rate", "rate_hz", type=float, default=200.0, show_default=True, help="Target ops per second.")
@click.option("--concurrency", type=int, default=8, show_default=True, help="Worker threads: each polls with one consumer and pipelines sends on one producer.")
@click.option("--interval", "interval_s", type=float, default=10.0, show_default=True,
              help="Mean seconds between a fault package's starts and heals.")
@click.option("--quiet", "quiet_s", type=float, default=5.0, show_default=True,
              help="Seconds of quiet after the final heal, before the final reads.")
@click.option("--network", type=click.Choice(["auto", "netns", "proxy"]), default="auto", show_default=True,
              help="How faults reach the network: namespaces + iptables, or the Toxiproxy-compatible proxy layer.")
@click.option("--acks", type=click.Choice(["0", "1", "all"]), default="all", show_default=True)
@click.option("--idempotence/--no-idempotence", default=None,
              help="Idempotent producers; by default on with --acks all and off otherwise, as Kafka's producer "
                   "(idempotence needs acks=all).")
@click.option("--isolation-level", type=click.Choice(["read_committed", "read_uncommitted"]),
              default="read_committed", show_default=True)
@click.option("--sub-via", type=click.Choice(["assign", "subscribe"]), default="assign", show_default=True,
              help="How consumers get partitions: assign, or subscribe as members of one group (rebalances "
                   "and commits recorded, GRP-1..3 checked).")
@click.option("--assignor", type=click.Choice(["roundrobin", "range", "cooperative-sticky", "consumer"]),
              default="roundrobin", show_default=True,
              help="Subscribe mode's group: roundrobin or range (eager), cooperative-sticky, or consumer "
                   "(KIP-848 group.protocol=consumer).")
@click.option("--topic-config", "topic_configs", multiple=True, metavar="KEY=VALUE",
              help="A topic config for the run's topics, e.g. cleanup.policy=compact (then the records repeat "
                   "keys, tombstones delete some, and RET-1 is checked); repeatable.")
@click.option("--txn", is_flag=True, help="Transactions mixing sends and polls instead of plain sends and polls.")
@click.option("--workload", "workload_name", type=click.Choice(["queue", "quixstreams", "connect", "mirror", "all"]),
              default="queue", show_default=True,
              help="quixstreams: the queue workload's sends feed a Quix Streams exactly-once "
                   "counting application, itself killed and restarted (faults/streams.py); "
                   "connect: beside the queue workload, a FileStreamSource -> topic -> "
                   "FileStreamSink pipeline on two distributed Connect workers, killed -9 and "
                   "restarted (faults/connect_workload.py; CON-1..3 checked); "
                   "mirror: a source and a target cluster of --nodes nodes each and `kspec mirror` "
                   "between them, killed -9 and restarted, under partition (the link between the "
                   "clusters), kill and pause (leaders on either side) (faults/mirror_run.py; MIR-1..3 checked); "
                   "all: every workload side by side on topics of its own (lanes: main with connect, txn, groups, "
                   "acks1, compact, streams), sharing --rate and --concurrency, so that one run checks every "
                   "guarantee (faults/lanes.py).")
@click.option("--mirror-set", "mirror_settings", multiple=True, metavar="KEY=VALUE",
              help="With --workload mirror: an mm2.properties key for the mirror, e.g. exactly.once.support=enabled "
                   "(MIR-2 checked too) or tasks.max=2; repeatable.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the fault schedule and the workload.")
@click.option("--set", "properties", multiple=True, metavar="KEY=VALUE",
              help="A Kafka broker property for every reference node, e.g. log.flush.interval.messages=1; repeatable.")
@click.option("--command-config", "command_config", default=None, metavar="FILE",
              help="Client properties (librdkafka names: security.protocol, sasl.mechanism, sasl.username, "
                   "sasl.password, ssl.ca.location, ...) for every client of the run, e.g. a secured TOML target's.")
@click.option("--secure", is_flag=True,
              help="Reference nodes with SASL_SSL listeners (certificates made in the results folder); the run's "
                   "clients use the admin's client properties (faults/security.py).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Results folder (new or empty): history.parquet, nemesis.jsonl, results.json, node logs.")
def run(target: str, image: str | None, nodes: int, nemesis: str, time_limit_s: float, rate_hz: float, concurrency: int,
        interval_s: float, quiet_s: float, network: str, acks: str, idempotence: bool | None, isolation_level: str,
        txn: bool, seed: int, properties: tuple[str, ...], out_dir: Path, sub_via: str = "assign",
        assignor: str = "roundrobin", topic_configs: tuple[str, ...] = (), workload_name: str = "queue",
        command_config: str | None = None, secure: bool = False, mirror_settings: tuple[str, ...] = ()) -> None:
    """Run a workload under faults and record its history."""
    from rich.console import Console
    from rich.live import Live

    from faults.image import ImageError
    from faults.run import RunError, RunOptions, run as run_faults
    from faults.targets import TargetError
    from faults.workload import WorkloadOptions

    packages, variants = parse_nemeses(nemesis)
    if workload_name == "all":
        lane_flags = [flag for flag, given in (("--txn", txn), ("--sub-via subscribe", sub_via != "assign"),
                                               (f"--acks {acks}", acks != "all"), ("--topic-config", topic_configs),
                                               ("--idempotence/--no-idempotence", idempotence is not None))
                      if given]
        if lane_flags:
            raise click.UsageError(f"--workload all sets transactions, subscribe mode, acks and topic configs per "
                                   f"lane (faults/lanes.py): drop {', '.join(lane_flags)}")
    if txn and sub_via == "subscribe":
        raise click.UsageError("--txn runs in assign mode: drop --sub-via subscribe")
    if idempotence is None:
        idempotence = acks == "all"
    elif idempotence and acks != "all":
        raise click.UsageError(f"--idempotence needs --acks all (Kafka's enable.idempotence requires acks=all), "
                               f"not --acks {acks}")
    workload = WorkloadOptions(concurrency=concurrency, rate_hz=rate_hz, acks=acks, idempotence=idempotence,
                               isolation_level=isolation_level, replication_factor=min(nodes, 3), txn=txn,
                               sub_via=sub_via, assignor=assignor, topic_config=topic_config(topic_configs),
                               key_count=STREAMS_KEY_COUNT if workload_name == "quixstreams" else 8)
    if workload_name == "quixstreams":
        from faults.streams import StreamsUnavailable, check_streams_python
        if txn:
            raise click.UsageError("--workload quixstreams feeds its application with plain sends: drop --txn")
        if sub_via == "subscribe" or topic_configs:
            raise click.UsageError("--workload quixstreams feeds its application from the assign-mode queue "
                                   "workload: drop --sub-via and --topic-config")
        try:
            check_streams_python()
        except StreamsUnavailable as e:
            raise click.ClickException(str(e)) from None
    if mirror_settings and workload_name != "mirror":
        raise click.UsageError("--mirror-set configures the mirror of --workload mirror: add --workload mirror")
    if workload_name == "mirror" and (txn or sub_via != "assign" or topic_configs):
        raise click.UsageError("--workload mirror runs its own sends, group and mirror across two clusters: "
                               "drop --txn, --sub-via and --topic-config")
    if image is not None and target == "reference":
        raise click.UsageError("--image is for containers: add --target docker")
    if target == "docker" and (network != "auto" or "link" in nemesis.split(",")):
        raise click.UsageError("containers' faults go through their Docker network: drop --network and the link nemesis")
    if secure and (target != "reference" or command_config):
        raise click.UsageError("--secure secures the reference nodes and sets their clients' properties: "
                               "no --target, no --command-config")
    client_properties = {}
    if command_config is not None:
        from conformance.client_properties import BadClientProperties, read_client_properties
        try:
            client_properties = read_client_properties(command_config)
        except BadClientProperties as e:
            raise click.UsageError(f"--command-config: {e}") from None
    options = RunOptions(target=target, image=image, nodes=nodes, nemeses=packages, nemesis_variants=variants,
                         time_limit_s=time_limit_s, interval_s=interval_s, quiet_s=quiet_s, network=network,
                         seed=seed, broker_properties=broker_properties(properties), workload=workload,
                         workload_name=workload_name, client_properties=client_properties, secure=secure,
                         mirror_properties=key_values("--mirror-set", mirror_settings, "exactly.once.support=enabled"))
    # SIGTERM unwinds like Ctrl-C, so the run tears down what it made.
    signal.signal(signal.SIGTERM, _interrupt)
    console = Console(stderr=True)
    try:
        with Live(console=console, refresh_per_second=4, transient=False) as live:
            if workload_name == "mirror":  # two clusters and a mirror between them
                from faults.mirror_run import run_mirror as run_faults
            result = run_faults(options, out_dir, progress=lambda status: live.update(_status_line(status)))
        if not console.is_terminal:  # Live leaves its last line open when writing to a file or pipe
            console.line()
    except (RunError, TargetError, ImageError) as e:
        raise click.ClickException(str(e)) from None
    except KeyboardInterrupt:
        console.print("interrupted: nodes stopped, network and proxies removed")
        sys.exit(130)
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(result.completions.items()))
    console.print(f"network: {result.mode} ({result.mode_reason})")
    console.print(f"{counts}; {result.ops_per_s:.0f} ops/s in the main phase; final reads "
                  f"{'complete' if result.final_reads_complete else 'INCOMPLETE'}"
                  + (f"; {result.acked_missing} acked values missing from them" if result.acked_missing else ""))
    for failure in result.workload_failures:
        console.print(f"[red]workload: {failure}[/red]")
    for lane, summary in result.lanes.items():  # --workload all: the lanes beside the main one
        if summary.get("skipped"):
            console.print(f"lane {lane}: skipped ({summary['skipped']})")
        elif lane != "main":
            console.print(f"lane {lane}: " + ", ".join(f"{n} {kind}" for kind, n in sorted(summary["completions"].items()))
                          + f"; final reads {'complete' if summary['final_reads_complete'] else 'INCOMPLETE'}")
            for failure in summary["workload_failures"]:
                console.print(f"[red]lane {lane} workload: {failure}[/red]")
    click.echo(str(out_dir if workload_name == "mirror" else out_dir / "history.parquet"))


def parse_nemeses(nemesis: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """`partition,power:all` -> the packages, and the one variant a package is held to."""
    from faults.nemesis import PACKAGES, VARIANTS
    packages, variants = [], {}
    for item in (word.strip() for word in nemesis.split(",")):
        if not item or item == "none":
            continue
        package, _, variant = item.partition(":")
        if package not in PACKAGES:
            raise click.UsageError(f"unknown nemesis {package!r}; choose from {', '.join(PACKAGES)}")
        if variant and variant not in VARIANTS.get(package, ()):
            choices = ", ".join(VARIANTS.get(package, ())) or "none (it has no variants)"
            raise click.UsageError(f"--nemesis {item}: {package} has no variant {variant!r}; choose from {choices}")
        packages.append(package)
        if variant:
            variants[package] = variant
    return tuple(packages), variants


def key_values(option: str, settings: tuple[str, ...], example: str) -> dict[str, str]:
    """An option's repeated KEY=VALUE settings; a usage error naming the bad one otherwise."""
    pairs = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key.strip():
            raise click.UsageError(f"{option} {setting!r} is not KEY=VALUE; write e.g. {option} {example}")
        pairs[key.strip()] = value.strip()
    return pairs


def topic_config(settings: tuple[str, ...]) -> dict[str, str]:
    """--topic-config KEY=VALUE pairs, checked as a reference broker checks a topic's configs."""
    from reference.protocol.errors import KafkaError
    from reference.storage.config import LogConfig
    config = key_values("--topic-config", settings, "cleanup.policy=compact")
    try:
        LogConfig.from_properties(config)
    except (ValueError, KafkaError) as e:
        raise click.UsageError(f"--topic-config: {e}") from None
    return config


def broker_properties(settings: tuple[str, ...]) -> dict[str, str]:
    """--set KEY=VALUE pairs, checked as a reference broker checks its properties."""
    from reference.config import BrokerConfig
    from reference.protocol.errors import KafkaError
    from reference.storage.config import LogConfig
    properties = key_values("--set", settings, "log.flush.interval.messages=1")
    try:
        LogConfig.from_properties(BrokerConfig.from_properties(properties).topic_defaults())
    except (ValueError, KafkaError) as e:
        raise click.UsageError(f"--set: {e}; see the Kafka broker property names in reference/config.py") from None
    return properties


def _interrupt(signal_number: int, frame) -> None:
    raise KeyboardInterrupt


def _status_line(status) -> str:
    from rich.text import Text
    errors = status.completions.get("fail", 0) + status.completions.get("info", 0)
    faults_active = ", ".join(f"{package}:{_fault_summary(value)}" for package, value in status.active_faults.items())
    filled = int(20 * min(1.0, status.elapsed_s / status.time_limit_s))
    return Text(f"{status.phase:<11} [{'#' * filled}{'.' * (20 - filled)}] {status.elapsed_s:5.0f}/"
                f"{status.time_limit_s:.0f} s  {status.ops_per_s:6.0f} ops/s  "
                f"{sum(status.completions.values()):>8} ops  {errors:>5} errors  faults: {faults_active or '-'}")


def _fault_summary(value: dict) -> str:
    if "error" in value:
        return "failed"
    return str(value.get("variant") or value.get("toxic") or "on") + (f"@{value['node']}" if "node" in value else "")


@faults.command()
def clean() -> None:
    """Remove namespaces, links, host iptables chains, processes, containers, networks, FUSE and tmpfs
    mounts and faketime files that crashed runs left behind."""
    from faults import clock, disk, docker_target
    removed = net.clean_all() + docker_target.clean() + disk.clean_all() + clock.clean_all()
    for item in removed:
        click.echo(f"removed {item}")
    click.echo(f"{len(removed)} leftovers removed" if removed else "nothing to clean")


@faults.group()
def image() -> None:
    """The reference broker's container image (built locally, no registry)."""


@image.command()
def build() -> None:
    """Build the reference image of these sources (reused when present) and print its name."""
    from faults import docker_target, image as reference_image
    from faults.targets import TargetError
    try:
        client = docker_target.engine()
        click.echo(reference_image.ensure(client))
    except (TargetError, reference_image.ImageError) as e:
        raise click.ClickException(str(e)) from None


@faults.command()
@click.option("--runs", type=click.IntRange(min=1), required=True, help="How many runs, each checked.")
@click.option("--nodes", type=int, default=3, show_default=True, help="Nodes of the reference target.")
@click.option("--nemesis", default="mix", show_default=True,
              help="'mix' (each run draws 1-3 of partition, kill, pause, power, disk, io, clock) or a list as for run.")
@click.option("--time-limit", "time_limit_s", type=float, default=60.0, show_default=True,
              help="Seconds of workload under faults, per run.")
@click.option("--rate", "rate_hz", type=float, default=100.0, show_default=True, help="Target ops per second.")
@click.option("--concurrency", type=int, default=4, show_default=True, help="Worker threads.")
@click.option("--interval", "interval_s", type=float, default=8.0, show_default=True,
              help="Mean seconds between a fault package's starts and heals.")
@click.option("--acks", type=click.Choice(["0", "1", "all"]), default="all", show_default=True)
@click.option("--set", "properties", multiple=True, metavar="KEY=VALUE",
              help="A Kafka broker property for every reference node; repeatable.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of run 0; run i uses seed + i.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder (new or empty) for run-<i>/ folders, summary.json and summary.md.")
def soak(runs: int, nodes: int, nemesis: str, time_limit_s: float, rate_hz: float, concurrency: int,
         interval_s: float, acks: str, properties: tuple[str, ...], seed: int, out_dir: Path) -> None:
    """Run and check many fault runs; write one summary table."""
    from faults import soak as soaking
    from faults.run import RunOptions
    from faults.workload import WorkloadOptions

    if out_dir.exists() and any(out_dir.iterdir()):
        raise click.UsageError(f"--out {out_dir} is not empty; give a new folder for the soak")
    packages, variants = ((), {}) if nemesis == soaking.MIX else parse_nemeses(nemesis)
    workload = WorkloadOptions(concurrency=concurrency, rate_hz=rate_hz, acks=acks,
                               replication_factor=min(nodes, 3))
    base = RunOptions(nodes=nodes, nemeses=packages, nemesis_variants=variants, time_limit_s=time_limit_s,
                      interval_s=interval_s, seed=seed, broker_properties=broker_properties(properties),
                      workload=workload)
    signal.signal(signal.SIGTERM, _interrupt)

    def report(summary) -> None:
        violated = ", ".join(f"{g} ({n})" for g, n in sorted(summary.violated.items()))
        click.echo(f"run {summary.run} [{','.join(summary.nemeses)}]: {summary.ops} ops, {summary.dropped_bytes} "
                   f"bytes dropped, {summary.verdict}" + (f" {violated}" if violated else "")
                   + (f" {summary.error}" if summary.error else ""), err=True)

    try:
        soaking.soak(base, runs, nemesis == soaking.MIX, out_dir, report)
    except KeyboardInterrupt:
        click.echo("interrupted: the runs so far are in the summary", err=True)
        sys.exit(130)
    click.echo((out_dir / "summary.md").read_text())
