"""The `kspec` command line.

Each subcommand lives in the package it belongs to and is imported only when it
runs, so `kspec broker` never loads Spark and `kspec check` never loads the broker.
"""
from __future__ import annotations

import importlib

import click

# command name -> ("module:attribute" of a click command or group, one-line help)
SUBCOMMANDS = {
    "broker": ("reference.cli:broker", "Run one reference broker node."),
    "demo": ("kspec.demo:demo", "The main job: broker, clients, checks, report."),
    "spec": ("spec.cli:spec", "Explore the executable specification's models."),
    "check": ("spark_validation.cli:check", "Check a recorded history with Spark."),
    "faults": ("faults.cli:faults", "Fault-injection runs (partitions, kills, pauses) and cleanup."),
    "conformance": ("conformance.cli:conformance", "Check any Kafka-compatible broker against the guarantees."),
    "topics": ("kspec.ops.topics:topics", "Create, list, describe, alter and delete topics."),
    "produce": ("kspec.ops.produce:produce", "Send lines from stdin to a topic."),
    "consume": ("kspec.ops.consume:consume", "Print a topic's records as text or JSON lines."),
    "groups": ("kspec.ops.groups:groups", "List, describe, reset and delete consumer groups."),
    "cluster": ("kspec.ops.cluster:cluster", "Cluster state: brokers, controller quorum, partitions."),
    "acls": ("kspec.ops.acls:acls", "List, add and remove ACLs (kafka-acls.sh's options)."),
    "users": ("kspec.ops.users:users", "Create, describe and delete SCRAM users."),
    "report": ("reports.cli:report", "Render a run folder as an HTML report with plots."),
    "mirror": ("mirror.cli:mirror", "MirrorMaker 2-style mirroring between clusters (mm2.properties)."),
    "connect": ("connect.cli:connect", "A Kafka Connect worker (standalone or distributed) with its REST API."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return None
        module_name, attribute = SUBCOMMANDS[name][0].split(":")
        return getattr(importlib.import_module(module_name), attribute)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUBCOMMANDS[name][1]) for name in self.list_commands(ctx)])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """kspec: a reference Kafka broker and a conformance kit for any Kafka-compatible broker."""


if __name__ == "__main__":
    main()
