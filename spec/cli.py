"""`kspec spec explore` and `kspec spec simulate`: run the specification's models.

explore exits 0 when every invariant holds in every state within the bound, 1 with the
shortest counterexample printed as a numbered trace; simulate exits the same way for one
seeded run. Bad arguments get one line saying what is wrong and how to fix it (exit 2).
"""
from __future__ import annotations

import sys
import time

import click
from rich.console import Console

from spec.explorer import Exploration, explore as explore_model
from spec.models.group import GroupConfig, GroupModel
from spec.models.idempotence import IdempotenceConfig, IdempotenceModel
from spec.models.log import LogConfig, LogModel
from spec.models.mirror import MIRROR_BUGS, MirrorConfig, MirrorModel
from spec.models.replication import ACKS, TRUNCATION_RULES, ReplicationConfig, ReplicationModel
from spec.models.transactions import TRANSACTION_BUGS, TransactionsConfig, TransactionsModel
from spec.simulator import simulate as simulate_model

MODELS = ("log", "replication", "group", "idempotence", "transactions", "mirror")


class ArgumentError(click.ClickException):
    exit_code = 2


class OneLineErrors(click.Command):
    """Usage errors as one line with the way out, instead of click's usage block."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as error:
            raise ArgumentError(f"{error.format_message()} (see: kspec spec {info_name} --help)") from None


def build_model(model: str, replicas: int, records: int, truncation: str, max_epochs: int, crashes: int,
                acks: str, min_insync_replicas: int, unclean: bool, bug: tuple[str, ...], at_least_once: bool):
    """The model named on the command line; ValueError says which argument is out of range."""
    owner = "mirror" if model == "mirror" else "transactions"
    foreign = [name for name in bug if name not in (MIRROR_BUGS if owner == "mirror" else TRANSACTION_BUGS)]
    if foreign:
        raise ValueError(f"--bug {foreign[0]} does not apply to the {model} model")
    if model == "mirror":
        return MirrorModel(MirrorConfig(records=records, crashes=crashes, exactly_once=not at_least_once,
                                        **{name.replace("-", "_"): True for name in bug}))
    if model == "replication":
        return ReplicationModel(ReplicationConfig(
            replicas=replicas, records=records, max_epochs=max_epochs, truncation=truncation, acks=acks,
            min_insync_replicas=min_insync_replicas, max_crashes=crashes, unclean_leader_election=unclean))
    if model == "log":
        return LogModel(LogConfig(records=records))
    if model == "group":
        return GroupModel(GroupConfig(members=replicas, records=records, max_generations=max_epochs))
    if model == "transactions":
        switches = {name.replace("-", "_"): True for name in bug}
        return TransactionsModel(TransactionsConfig(max_transactions=records, **switches))
    return IdempotenceModel(IdempotenceConfig(records=records))


def model_options(command):
    options = [
        click.option("--model", type=click.Choice(MODELS), default="replication", show_default=True),
        click.option("--replicas", type=int, default=2, show_default=True,
                     help="replicas (replication) or members (group)"),
        click.option("--records", type=int, default=2, show_default=True,
                     help="records written (per partition for group; batches for idempotence; "
                          "transactions for transactions)"),
        click.option("--truncation", type=click.Choice(TRUNCATION_RULES), default="kip320", show_default=True,
                     help="the follower truncation rule (replication)"),
        click.option("--max-epochs", type=int, default=3, show_default=True,
                     help="leader epochs (replication) or generations (group)"),
        click.option("--crashes", type=int, default=0, show_default=True,
                     help="broker crashes allowed (replication) or mirror crashes (mirror)"),
        click.option("--acks", type=click.Choice(ACKS), default="all", show_default=True),
        click.option("--min-insync-replicas", type=int, default=1, show_default=True),
        click.option("--unclean", is_flag=True, help="allow unclean leader election (replication)"),
        click.option("--bug", type=click.Choice(TRANSACTION_BUGS + MIRROR_BUGS), multiple=True,
                     help="re-create a historical bug (transactions, mirror; repeatable)"),
        click.option("--at-least-once", is_flag=True, help="the mirror without transactions (mirror)"),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _model_or_exit(**arguments):
    try:
        return build_model(**arguments)
    except ValueError as error:
        raise ArgumentError(f"{error} (see: kspec spec --help)") from None


@click.group()
def spec() -> None:
    """The executable specification: exhaustive exploration and seeded simulation of its models."""


@spec.command(cls=OneLineErrors)
@model_options
@click.option("--max-states", type=int, default=None, help="stop after this many distinct states")
@click.option("--no-symmetry", is_flag=True, help="do not merge states that differ only by replica names")
def explore(max_states: int | None, no_symmetry: bool, **arguments) -> None:
    """Visit every reachable state; print the shortest counterexample if an invariant breaks."""
    if max_states is not None and max_states < 1:
        raise ArgumentError("--max-states must be at least 1, or left out for no bound (see: kspec spec explore --help)")
    model = _model_or_exit(**arguments)
    console = Console(stderr=True)
    with console.status("exploring ...") as status:
        def progress(so_far: Exploration) -> None:
            status.update(f"{so_far.states:,} states, depth {so_far.depth}, "
                          f"{so_far.states_per_second:,.0f} states/s")
        result = explore_model(model, max_states=max_states, on_progress=progress, symmetry=not no_symmetry)
    click.echo(f"checked: {'; '.join(result.checked)}")
    click.echo(f"{result.states:,} states, {result.transitions:,} transitions, depth {result.depth}, "
               f"{result.seconds:.1f} s, {result.states_per_second:,.0f} states/s")
    if result.counterexample is not None:
        click.echo(result.counterexample.render(model))
        sys.exit(1)
    if result.exhausted:
        click.echo("every invariant holds in every reachable state (exhausted)")
    else:
        click.echo(f"no violation in the first {result.states:,} states (bound reached, not exhausted)")


@spec.command(cls=OneLineErrors)
@click.option("--seed", type=int, required=True)
@click.option("--steps", type=int, default=100_000, show_default=True)
@click.option("--cores", is_flag=True, help="simulate three real replica cores (reference/replication) "
                                            "under a faulty network instead of a model")
@model_options
def simulate(seed: int, steps: int, cores: bool, **arguments) -> None:
    """One seeded run, checking every invariant at every step: a random walk through a model,
    or with --cores a cluster of the reference's replica cores."""
    if steps < 0:
        raise ArgumentError("--steps must be 0 or more (see: kspec spec simulate --help)")
    if cores:
        _simulate_cores(seed, steps)
        return
    model = _model_or_exit(**arguments)
    result = simulate_model(model, seed=seed, steps=steps)
    click.echo(f"seed {seed}: {result.steps:,} steps in {result.walks:,} walks, {result.seconds:.1f} s, "
               f"{result.steps_per_second:,.0f} steps/s")
    if result.counterexample is not None:
        click.echo(result.counterexample.render(model))
        sys.exit(1)
    click.echo("every invariant held at every step")


def _simulate_cores(seed: int, steps: int) -> None:
    from spec.cluster_simulation import run  # imports the reference cores only when asked

    started = time.monotonic()
    simulation, violation = run(seed, steps)
    seconds = time.monotonic() - started
    click.echo(f"seed {seed}: {simulation.steps:,} steps, {seconds:.1f} s, {simulation.steps / seconds:,.0f} steps/s, "
               f"{len(simulation.acked)} records acked, leader epoch {simulation.change.leader_epoch}")
    if violation is not None:
        click.echo(f"{violation.guarantee_id} violated at step {violation.step}: {violation.problem}")
        click.echo("last events:\n  " + "\n  ".join(simulation.events[-25:]))
        sys.exit(1)
    click.echo("every invariant held at every step")
