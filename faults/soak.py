"""A soak: N fault runs, each checked, one summary table, going on across failures.

    kspec faults soak --runs 10 --time-limit 60 --nemesis mix --nodes 3 --out DIR

Run i uses seed + i and its own folder DIR/run-<i>; with `--nemesis mix` each run draws one
to three packages from MIX_PACKAGES (its seed decides). A run that fails to set up or
crashes is recorded as an error and the soak goes on. Every finished run is checked with
one Spark session for them all (spark_validation), and its verdict is written beside its
history as `kspec check` writes it. DIR/summary.json holds one row per run and the totals;
DIR/summary.md is the same table for people: runs, ops, anomalies by guarantee, the bytes
power cuts dropped and the acked values missing from the final reads.
"""
from __future__ import annotations

import dataclasses
import json
import random
import tempfile
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from faults.run import TIMELINE_FILE, RunOptions, run

MIX = "mix"
MIX_PACKAGES = ("partition", "kill", "pause", "power", "disk", "io", "clock")
MIX_PACKAGES_MAX = 3


@dataclass
class RunSummary:
    run: int
    seed: int
    nemeses: list[str]
    ops: int = 0
    dropped_bytes: int = 0
    acked_missing: int | None = None
    verdict: str = "ERROR"           # VALID, INVALID, ERROR (the run or its check failed)
    violated: dict[str, int] = field(default_factory=dict)  # guarantee id -> anomalies counted against it
    error: str = ""


def mixed_nemeses(run_seed: int) -> tuple[str, ...]:
    """The packages of one `--nemesis mix` run, drawn from its seed."""
    rng = random.Random(run_seed)
    return tuple(sorted(rng.sample(MIX_PACKAGES, rng.randint(1, MIX_PACKAGES_MAX))))


def soak(base: RunOptions, runs: int, mix: bool, out_dir: Path,
         report: Callable[[RunSummary], None] = lambda summary: None) -> list[RunSummary]:
    """Run and check `runs` runs (base's nemeses, or with `mix` drawn per run); write and return the summaries."""
    from spark_validation.checker import resolve_history, run_checks, write_result
    from spark_validation.session import spark_session
    out_dir.mkdir(parents=True, exist_ok=True)
    spark = None
    summaries = []
    for index in range(runs):
        seed = base.seed + index
        summary = RunSummary(index, seed, list(mixed_nemeses(seed) if mix else base.nemeses))
        run_dir = out_dir / f"run-{index:03d}"
        try:
            options = dataclasses.replace(base, seed=seed, nemeses=tuple(summary.nemeses))
            result = run(options, run_dir)
            summary.ops = sum(result.completions.values())
            summary.acked_missing = result.acked_missing
            summary.dropped_bytes = dropped_bytes(run_dir / TIMELINE_FILE)
            spark = spark or spark_session()
            with tempfile.TemporaryDirectory(prefix="kspec-soak-") as work_dir:
                parquet_path, check_options = resolve_history(run_dir, Path(work_dir))
                checked = run_checks(spark, parquet_path, check_options)
            write_result(checked, run_dir / "check")
            verdict = checked.verdict
            summary.verdict = "VALID" if verdict["valid"] else "INVALID"
            summary.violated = {g: sum(e["anomalies"].values()) for g, e in verdict["guarantees"].items()
                                if e["status"] == "violated"}
        except KeyboardInterrupt:
            raise
        except Exception as e:  # the soak goes on; the run folder keeps what it recorded
            summary.error = f"{type(e).__name__}: {e}"
            (out_dir / f"run-{index:03d}.error.txt").write_text(traceback.format_exc())
        summaries.append(summary)
        report(summary)
        write_summary(out_dir, summaries)
    return summaries


def dropped_bytes(timeline_path: Path) -> int:
    """The bytes every power cut of a run dropped, from its timeline."""
    if not timeline_path.exists():
        return 0
    total = 0
    for line in timeline_path.read_text().splitlines():
        event = json.loads(line)
        if event["package"] == "power" and event["action"] == "start":
            total += sum(event["value"].get("dropped_bytes", {}).values())
    return total


def totals(summaries: list[RunSummary]) -> dict:
    violated = Counter()
    for summary in summaries:
        violated.update(summary.violated)
    return {"runs": len(summaries), "valid": sum(s.verdict == "VALID" for s in summaries),
            "invalid": sum(s.verdict == "INVALID" for s in summaries),
            "errors": sum(s.verdict == "ERROR" for s in summaries), "ops": sum(s.ops for s in summaries),
            "dropped_bytes": sum(s.dropped_bytes for s in summaries),
            "acked_missing": sum(s.acked_missing or 0 for s in summaries),
            "anomalies_by_guarantee": dict(sorted(violated.items()))}


def write_summary(out_dir: Path, summaries: list[RunSummary]) -> None:
    total = totals(summaries)
    (out_dir / "summary.json").write_text(json.dumps(
        {"runs": [dataclasses.asdict(s) for s in summaries], "totals": total}, indent=2))
    lines = ["| run | seed | nemeses | ops | bytes dropped | acked missing | verdict | violated (anomalies) |",
             "|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        violated = ", ".join(f"{g} ({n})" for g, n in sorted(s.violated.items())) or s.error or "-"
        missing = "-" if s.acked_missing is None else s.acked_missing
        lines.append(f"| {s.run} | {s.seed} | {','.join(s.nemeses)} | {s.ops} | {s.dropped_bytes} | {missing} | "
                     f"{s.verdict} | {violated} |")
    by_guarantee = ", ".join(f"{g} {n}" for g, n in total["anomalies_by_guarantee"].items()) or "none"
    lines += ["", f"{total['runs']} runs: {total['valid']} valid, {total['invalid']} invalid, {total['errors']} "
                  f"errors; {total['ops']} ops; {total['dropped_bytes']} bytes dropped by power cuts; "
                  f"{total['acked_missing']} acked values missing from final reads; anomalies by guarantee: "
                  f"{by_guarantee}"]
    (out_dir / "summary.md").write_text("\n".join(lines) + "\n")
