"""`kspec check HISTORY`: check a recorded history with Spark.

Exit status: 0 when no anomaly violates a guarantee, 1 when one does, 2 for bad input.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from pyspark.sql import SparkSession

from spark_validation.checker import CHECKS, HistoryError, history_rows, write_result
from spark_validation.lanes import check_folder, check_lanes, is_lanes_run
from spark_validation.mirror import check_mirror_history, is_mirror_history
from spark_validation.progress import CheckProgress
from spark_validation.session import DEFAULT_MASTER, connect_session, spark_session

EXIT_VALID, EXIT_VIOLATION, EXIT_BAD_INPUT = 0, 1, 2


def _default_out(history: Path) -> Path:
    return history / "check" if history.is_dir() else history.with_name(history.stem + "-check")


@click.command()
@click.argument("history", type=click.Path(path_type=Path))
@click.option("--master", default=DEFAULT_MASTER, show_default=True, help="Spark master URL.")
@click.option("--remote", help="Spark Connect server (sc://HOST:PORT) to run the checks on, instead of --master.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the verdict JSON here.")
@click.option("--checks", default=",".join(CHECKS), show_default=False,
              help=f"Comma-separated checks (default all): {', '.join(CHECKS)}.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for anomalies.parquet and verdict.json (default: beside the history).")
def check(history: Path, master: str, remote: str | None, json_path: Path | None, checks: str,
          out_dir: Path | None) -> None:
    """Check HISTORY (a kspec history folder, a .parquet file or a Jepsen history.edn)."""
    if remote is not None and not remote.startswith("sc://"):
        _bad_input(f"--remote {remote}: expected a Spark Connect URL, sc://HOST:PORT")
    where = remote or master

    def new_session() -> SparkSession:
        if remote is None:
            return spark_session(master)
        try:
            return connect_session(remote)
        except ConnectionError as e:
            _bad_input(str(e))

    chosen = tuple(c.strip() for c in checks.split(",") if c.strip())
    unknown = [c for c in chosen if c not in CHECKS]
    if unknown or not chosen:
        _bad_input(f"unknown check(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(CHECKS)}")
    out_dir = out_dir or _default_out(history)
    if is_mirror_history(history):  # `kspec mirror record`: both clusters of one flow
        sys.exit(check_mirror_history(history, new_session(), out_dir, json_path))
    with CheckProgress() as progress:
        def session() -> SparkSession:
            spark = new_session()
            progress.stages(spark)
            return spark

        announced = []

        def follow(spark: SparkSession, parquet_path: Path) -> None:
            """Once a history is found: say what is checked where, and show the stages of its check."""
            if not announced:
                click.echo(f"checking {history} on {where} ({len(chosen)} checks)", err=True)
                announced.append(history)
            progress.stages(spark, history_rows(parquet_path))

        try:
            # a Jepsen history.edn is imported beside the results, and reused by the next check of the same file
            if is_lanes_run(history):  # `kspec faults run --workload all`: every lane, one merged verdict
                result = check_lanes(history, out_dir, session, chosen, progress.check, follow,
                                     lambda line: click.echo(line, err=True))
            else:
                result = check_folder(history, out_dir, session, chosen, progress.check, follow)
        except HistoryError as e:
            _bad_input(str(e))
    write_result(result, out_dir)
    if json_path:
        json_path.write_text((out_dir / "verdict.json").read_text())
    v = result.verdict
    for anomaly, n in sorted(v["anomalies"].items()):
        marker = "VIOLATION" if anomaly in v["violations"] else "allowed"
        click.echo(f"  {anomaly:28} {n:8d}  {marker}")
    held = [g for g, e in v["guarantees"].items() if e["status"] == "held"]
    violated = [g for g, e in v["guarantees"].items() if e["status"] == "violated"]
    worst = v["realtime-lag"]["worst"]
    click.echo(f"worst realtime lag {worst['lag_s']:.3f} s" + (f" ({worst['topic']}-{worst['partition']}, process "
                                                              f"{worst['process']})" if "topic" in worst else "")
               + f"; consume counts {v['consume-counts']['distribution'] or 'none (no subscribed reads)'}")
    click.echo(f"{v['ops']} ops checked in {v['seconds']['total']:.1f} s "
               f"({v['ops'] / max(v['seconds']['total'], 1e-3):,.0f} ops/s); "
               f"guarantees held: {', '.join(held) or '-'}; violated: {', '.join(violated) or '-'}")
    for guarantee_id, entry in v["guarantees"].items() if "lanes" in v else ():  # which lanes checked what
        click.echo(f"{guarantee_id:7} {entry['status']:9} lanes {', '.join(entry['lanes'])}"
                   + (f"; violated in {', '.join(entry['violated_in'])}" if entry["violated_in"] else ""))
    for guarantee_id, reason in v.get("unchecked", {}).items():
        click.echo(f"{guarantee_id} not checked: {reason}")
    click.echo(f"{'VALID' if result.valid else 'INVALID'}: results in {out_dir}")
    sys.exit(EXIT_VALID if result.valid else EXIT_VIOLATION)


def _bad_input(message: str) -> None:
    click.echo(f"kspec check: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)
