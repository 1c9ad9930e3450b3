"""The `kspec` command line.

Each subcommand lives in the package it belongs to and is imported only when it
runs, so `kspec broker` never loads Spark and `kspec check` never loads the broker.
"""
from __future__ import annotations

import importlib

import click

# command name -> "module:attribute" of a click command or group
SUBCOMMANDS = {
    "broker": "reference.cli:broker",
    "demo": "kspec.demo:demo",
    "spec": "spec.cli:spec",
    "check": "spark_validation.cli:check",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        return getattr(importlib.import_module(module_name), attribute)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """kspec: a reference Kafka broker and a conformance kit for any Kafka-compatible broker."""


if __name__ == "__main__":
    main()
