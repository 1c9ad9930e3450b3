"""`kspec report RUN`: render a run folder as RUN/report/index.html (reports/run.py).

A run under REPORTS/runs/ also refreshes the index of runs, REPORTS/latest/index.html.
"""
from __future__ import annotations

from pathlib import Path

import click

from reports.index import write_index
from reports.run import RunFolderError, in_runs_folder, render_run


@click.command()
@click.argument("run_dir", metavar="RUN", type=click.Path(exists=True, file_okay=False, path_type=Path))
def report(run_dir: Path) -> None:
    """Render RUN (a `kspec faults run --out` folder, checked or not) as RUN/report/index.html."""
    try:
        page = render_run(run_dir)
    except RunFolderError as e:
        raise click.ClickException(str(e)) from None
    click.echo(str(page))
    if in_runs_folder(run_dir):
        click.echo(str(write_index(run_dir.resolve().parent.parent)))
