"""The index of runs: REPORTS/latest/index.html, linking every run under REPORTS/runs/, newest first.

A run is a folder under runs/ with a fault run (history.parquet, see reports/run.py) or a
conformance run (conformance/conformance.json), or both, as `kspec demo` writes them.
Each row says what ran, its verdict, and links its report and conformance matrix; above
the table the newest conformance matrix gets its own link, and the matrices committed
under REPORTS/conformance/ are listed for comparison. Layout: reports/index_template.html.
"""
from __future__ import annotations

import html
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from string import Template

from reports.run import CHECK_DIR, CONFORMANCE_DIR, HISTORY_FILE, LATEST_DIR, REPORT_DIR, RESULTS_FILE, RUNS_DIR

TEMPLATE_PATH = Path(__file__).with_name("index_template.html")
COMMITTED_MATRICES_DIR = "conformance"


@dataclass(frozen=True)
class RunEntry:
    name: str
    modified_s: float
    results: dict | None
    verdict: dict | None
    conformance: dict | None
    has_report: bool
    has_history: bool


def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def find_runs(reports_dir: Path) -> list[RunEntry]:
    """Every run under reports_dir/runs, newest first."""
    entries = []
    for folder in (reports_dir / RUNS_DIR).glob("*/"):
        parts = [folder / HISTORY_FILE, folder / CONFORMANCE_DIR / "conformance.json"]
        if not any(p.exists() for p in parts):
            continue
        written = [p.stat().st_mtime for p in (*parts, folder / RESULTS_FILE, folder / CHECK_DIR / "verdict.json")
                   if p.exists()]
        entries.append(RunEntry(folder.name, max(written), _json(folder / RESULTS_FILE),
                                _json(folder / CHECK_DIR / "verdict.json"),
                                _json(folder / CONFORMANCE_DIR / "conformance.json"),
                                (folder / REPORT_DIR / "index.html").exists(), parts[0].exists()))
    return sorted(entries, key=lambda e: (e.modified_s, e.name), reverse=True)


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _row(entry: RunEntry) -> str:
    base = f"../{RUNS_DIR}/{html.escape(entry.name)}"
    if entry.results:
        options = entry.results["options"]
        what = (f"{options['target']}, {options['nodes']} node(s), {options['time_limit_s']:g} s, faults: "
                f"{', '.join(options['nemeses']) or 'none'}")
        ops = f"{sum(entry.results['completions'].values()):,}"
    else:
        what, ops = ("fault run" if entry.has_history else "conformance only"), ""
    if entry.verdict is not None:
        violated = [g for g, e in entry.verdict["guarantees"].items() if e["status"] == "violated"]
        verdict = (f'<td class="{"valid" if entry.verdict["valid"] else "invalid"}">'
                   f'{"VALID" if entry.verdict["valid"] else "INVALID: " + ", ".join(violated)}</td>')
    else:
        verdict = '<td class="unchecked">not checked</td>' if entry.has_history else "<td></td>"
    if entry.conformance is not None:
        totals = entry.conformance["totals"]
        conformance = (f'<td class="{"invalid" if totals["failed"] else "valid"}"><a href="{base}/{CONFORMANCE_DIR}/'
                       f'conformance.html">{totals["passed"]} passed, {totals["failed"]} failed, '
                       f'{totals["skipped"]} skipped</a></td>')
    else:
        conformance = "<td></td>"
    name = (f'<a href="{base}/{REPORT_DIR}/index.html">{html.escape(entry.name)}</a>' if entry.has_report
            else html.escape(entry.name))
    return (f"<tr><td>{name}</td><td>{_when(entry.modified_s)}</td><td>{html.escape(what)}</td>"
            f"<td class=num>{ops}</td>{verdict}{conformance}</tr>")


def _latest_conformance(entries: list[RunEntry]) -> str:
    newest = next((e for e in entries if e.conformance is not None), None)
    if newest is None:
        return "<p>No conformance run yet: <code>kspec demo</code> runs one.</p>"
    totals = newest.conformance["totals"]
    return (f'<p>Latest conformance matrix: <a href="../{RUNS_DIR}/{html.escape(newest.name)}/{CONFORMANCE_DIR}/'
            f'conformance.html">{html.escape(newest.name)}</a> against '
            f'<code>{html.escape(str(newest.conformance["target"]["bootstrap_servers"]))}</code>: '
            f'{totals["passed"]} passed, {totals["failed"]} failed, {totals["skipped"]} skipped.</p>')


def _committed_matrices(reports_dir: Path) -> str:
    matrices = sorted((reports_dir / COMMITTED_MATRICES_DIR).glob("*/conformance.html"))
    if not matrices:
        return ""
    links = ", ".join(f'<a href="../{COMMITTED_MATRICES_DIR}/{html.escape(m.parent.name)}/conformance.html">'
                      f"{html.escape(m.parent.name)}</a>" for m in matrices)
    return f"<p>Reference matrices kept with the sources: {links}.</p>"


def write_index(reports_dir: Path) -> Path:
    """Write reports_dir/latest/index.html; returns its path."""
    reports_dir = Path(reports_dir)
    entries = find_runs(reports_dir)
    page = Template(TEMPLATE_PATH.read_text(encoding="utf-8")).substitute(
        latest_conformance=_latest_conformance(entries),
        committed_matrices=_committed_matrices(reports_dir),
        runs="\n".join(_row(e) for e in entries) or '<tr><td colspan="6">no runs yet</td></tr>',
        count=len(entries),
        rendered_at=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
    )
    path = reports_dir / LATEST_DIR / "index.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path
