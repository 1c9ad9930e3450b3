"""`kspec demo`: the main job, end to end, with a summary a person can read.

1. start a 3-node reference cluster (one OS process per node, a KRaft-style quorum);
2. run the conformance suite against it through real clients (--quick, to fit the budget),
   with the cluster's node commands, so leader kills and pauses are part of it;
3. a fault run: a fresh 3-node cluster under partitions, leader kills, pauses and malformed
   traffic for FAULT_TIME_LIMIT_S while every workload runs side by side in its lane (`--workload
   all`, faults/lanes.py: the queue workload with a Connect pipeline, transactions, a consumer
   group, acks=1, compacted topics, a Quix Streams exactly-once application), each recording
   every operation;
4. check every lane's history with Spark and merge the verdicts (every anomaly family, by
   guarantee id: each guarantee a fault run can check is held or violated);
5. render the run's report and the index of runs, reports/latest/index.html.

Every step runs the same command a person would (`kspec conformance`, `kspec faults run`,
`kspec check`) as a child process, so its own progress shows and its exit status counts.
The run goes to reports/runs/<time>-demo/. The demo exits 0 only when every step passed.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from conformance.nodes import VERBS as NODE_VERBS
from conformance.nodes import LocalCluster
from reports.index import write_index
from reports.run import CHECK_DIR, CONFORMANCE_DIR, LATEST_DIR, RESULTS_FILE, RUNS_DIR, render_run

NODES = 3
FAULT_TIME_LIMIT_S = 60
FAULT_INTERVAL_S = 8          # mean seconds between a fault package's flips: several of each per run
NEMESES = "partition,kill,pause,malformed"  # malformed: PRO-1 is checked, not left out
REPORTS_DIR = Path(__file__).resolve().parent.parent / "reports"
# Time limits per step, so the whole demo ends within ten minutes even when a step hangs.
CONFORMANCE_TIMEOUT_S = 210
FAULT_RUN_TIMEOUT_S = FAULT_TIME_LIMIT_S + 300  # set-up, the lanes' start and catch-up, final reads, tear-down
CHECK_TIMEOUT_S = 600         # six lanes' histories, one Spark session
STOP_GRACE_S = 15             # after SIGTERM, before SIGKILL


@dataclass
class Step:
    name: str
    status: str               # passed, FAILED, not run
    figures: str
    where: str
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def _kspec(*arguments: str, timeout_s: float) -> int | None:
    """Run a kspec subcommand as a child process, its output on this terminal; its exit status,
    or None when it ran out of time. The child leads its own process group, so that it and
    every process it started are ended together on a timeout or Ctrl-C."""
    child = subprocess.Popen([sys.executable, "-m", "kspec.cli", *arguments], stdin=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        return child.wait(timeout_s)
    except subprocess.TimeoutExpired:
        _end(child)
        return None
    except BaseException:
        _end(child)
        raise


def _end(child: subprocess.Popen) -> None:
    """SIGTERM the child's process group (kspec commands tear down on it), SIGKILL what is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGTERM)
    try:
        child.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _exit(code: int | None, timeout_s: float) -> str:
    return f"timed out after {timeout_s:.0f} s" if code is None else f"exit {code}"


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def _conformance(cluster: LocalCluster, out: Path) -> Step:
    code = _kspec("conformance", "--bootstrap-servers", cluster.bootstrap, "--quick", "--report", str(out),
                  "--junit-xml", str(out / "junit.xml"),
                  *[f"--node-{verb}-command={cluster.command(verb)}" for verb in NODE_VERBS],
                  timeout_s=CONFORMANCE_TIMEOUT_S)
    document = _json(out / "conformance.json")
    if document is None:
        return Step("conformance suite (--quick)", "FAILED", f"no result ({_exit(code, CONFORMANCE_TIMEOUT_S)})",
                    "the output above")
    totals = document["totals"]
    return Step("conformance suite (--quick)", "passed" if code == 0 else "FAILED",
                f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped "
                f"({', '.join(document['target'].get('clients', [])) or 'clients'})",
                f"{CONFORMANCE_DIR}/conformance.html")


def _cluster_and_conformance(work: Path, conformance_out: Path, console: Console) -> list[Step]:
    started = time.monotonic()
    cluster = LocalCluster(str(work / "cluster"), NODES)
    try:
        cluster.start()
    except Exception as e:  # a cluster that did not come up is a failed step, reported with the reason
        cluster.stop()  # the nodes that did start run detached
        return [Step(f"{NODES}-node reference cluster", "FAILED", f"{type(e).__name__}: {e}",
                     f"{work / 'cluster'}/node*.log", time.monotonic() - started),
                Step("conformance suite (--quick)", "not run", "no cluster", "")]
    try:
        ready_s = time.monotonic() - started
        console.print(f"[bold]cluster[/] {NODES} nodes ready at {cluster.bootstrap} in {ready_s:.1f} s "
                      f"(controller: node {cluster.controller_id()})")
        steps = [Step(f"{NODES}-node reference cluster", "passed", f"ready in {ready_s:.1f} s at {cluster.bootstrap}",
                      "one `kspec broker` process per node", ready_s)]
        console.rule("conformance suite against the cluster (kspec conformance --quick)")
        started = time.monotonic()
        steps.append(_conformance(cluster, conformance_out))
        steps[-1].seconds = time.monotonic() - started
    finally:
        cluster.stop()
    return steps


def _fault_run(run_dir: Path) -> Step:
    name = f"fault run, every workload in its lane ({NEMESES}, {FAULT_TIME_LIMIT_S} s)"
    code = _kspec("faults", "run", "--target", "reference", "--nodes", str(NODES), "--nemesis", NEMESES,
                  "--workload", "all",
                  "--time-limit", str(FAULT_TIME_LIMIT_S), "--interval", str(FAULT_INTERVAL_S), "--out", str(run_dir),
                  timeout_s=FAULT_RUN_TIMEOUT_S)
    results = _json(run_dir / RESULTS_FILE)
    if results is None:
        from faults.run import THREADS_FILE, unfinished_steps
        where = unfinished_steps(run_dir)
        return Step(name, "FAILED", f"no results ({_exit(code, FAULT_RUN_TIMEOUT_S)}"
                    + (f", in: {', '.join(where)}" if where else "") + ")",
                    str(run_dir / THREADS_FILE) if (run_dir / THREADS_FILE).exists() else str(run_dir))
    completions = dict(results["completions"])
    lanes = results.get("lanes", {})
    for lane in lanes.values():  # the lanes beside the main one (the main lane's are the run's own)
        for kind, n in lane.get("completions", {}).items():
            completions[kind] = completions.get(kind, 0) + n
    faults = sum(1 for line in (run_dir / "nemesis.jsonl").read_text().splitlines() if '"start"' in line)
    failures = results["workload_failures"] + [f"lane {name}: {failure}" for name, lane in lanes.items()
                                               for failure in lane.get("workload_failures") or []]
    reads_complete = results["final_reads_complete"] and all(lane.get("final_reads_complete", True)
                                                             for lane in lanes.values())
    passed = code == 0 and reads_complete and not failures
    figures = (f"{sum(completions.values()):,} ops ({', '.join(f'{n:,} {k}' for k, n in sorted(completions.items()))}),"
               f" {results['main_phase_ops_per_s']:g} ops/s, {faults} faults injected, network "
               f"{results['network_mode']}, final reads {'complete' if reads_complete else 'INCOMPLETE'}")
    figures += f"; lanes {', '.join(lanes)}" if lanes else ""
    figures += "".join(f"; lane {name} skipped: {lane['skipped']}" for name, lane in lanes.items()
                       if lane.get("skipped"))
    figures += "".join(f"; {failure}" for failure in failures)
    return Step(name, "passed" if passed else "FAILED", figures,
                "history.parquet, lanes/*/history.parquet, nemesis.jsonl, node-*.log")


def _check(run_dir: Path) -> Step:
    code = _kspec("check", str(run_dir), "--out", str(run_dir / CHECK_DIR), timeout_s=CHECK_TIMEOUT_S)
    verdict = _json(run_dir / CHECK_DIR / "verdict.json")
    if verdict is None:
        return Step("Spark history check", "FAILED", f"no verdict ({_exit(code, CHECK_TIMEOUT_S)})", "the output above")
    held = [g for g, e in verdict["guarantees"].items() if e["status"] == "held"]
    violated = [g for g, e in verdict["guarantees"].items() if e["status"] == "violated"]
    figures = (f"{verdict['ops']:,} ops, {len(verdict['checks'])} checks in {verdict['seconds']['total']:.0f} s; "
               f"held {', '.join(held) or '-'}")
    if violated:
        figures += f"; VIOLATED {', '.join(violated)} (" + ", ".join(
            f"{a} x{n}" for a, n in sorted(verdict["violations"].items())) + ")"
    if verdict.get("unchecked"):
        figures += f"; not checked {', '.join(verdict['unchecked'])} (the report says why)"
    assert code != 0 or verdict["valid"], "kspec check exits 0 only on a valid history"
    return Step("Spark history check", "passed" if code == 0 else "FAILED", figures,
                f"{CHECK_DIR}/verdict.json, {CHECK_DIR}/anomalies.parquet")


def run_demo(console: Console) -> tuple[list[Step], Path]:
    run_dir = REPORTS_DIR / RUNS_DIR / (datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S") + "-demo")
    with tempfile.TemporaryDirectory(prefix="kspec-demo-") as tmp:
        work = Path(tmp)
        console.rule(f"{NODES}-node reference cluster")
        steps = _cluster_and_conformance(work, work / CONFORMANCE_DIR, console)
        console.rule(f"fault run: {NEMESES} for {FAULT_TIME_LIMIT_S} s on a fresh {NODES}-node cluster")
        started = time.monotonic()
        steps.append(_fault_run(run_dir))
        steps[-1].seconds = time.monotonic() - started
        if (work / CONFORMANCE_DIR).exists() and run_dir.exists():
            shutil.move(str(work / CONFORMANCE_DIR), str(run_dir / CONFORMANCE_DIR))
    if not (run_dir / "history.parquet").exists():
        steps += [Step("Spark history check", "not run", "no history", ""), Step("report", "not run", "no history", "")]
        return steps, run_dir
    console.rule("Spark history check (kspec check)")
    started = time.monotonic()
    steps.append(_check(run_dir))
    steps[-1].seconds = time.monotonic() - started
    started = time.monotonic()
    page = render_run(run_dir)
    index = write_index(REPORTS_DIR)
    steps.append(Step("report", "passed", f"{len(list(page.parent.glob('*.png')))} plots",
                      f"{page.relative_to(run_dir)}; index {index}", time.monotonic() - started))
    return steps, run_dir


@click.command()
def demo() -> None:
    """3-node cluster, conformance suite, fault run, Spark check, report; exit 0 only when all passed."""
    console = Console()
    started = time.monotonic()
    steps, run_dir = run_demo(console)
    table = Table(title=f"kspec demo: {run_dir}", title_justify="left", show_lines=True)
    for column in ("step", "result", "seconds", "figures", "where to look (in the run folder)"):
        table.add_column(column, overflow="fold")
    colour = {"passed": "green", "FAILED": "red", "not run": "yellow"}
    for step in steps:
        table.add_row(step.name, f"[{colour[step.status]}]{step.status}[/]", f"{step.seconds:.0f}", step.figures,
                      step.where)
    console.print(table)
    passed = all(step.passed for step in steps)
    console.print(f"[bold {'green' if passed else 'red'}]demo {'passed' if passed else 'FAILED'}[/] in "
                  f"{time.monotonic() - started:.0f} s; open {REPORTS_DIR / LATEST_DIR / 'index.html'}")
    raise SystemExit(0 if passed else 1)
