"""The conformance report: a conformance run's JSON (conformance/results.py) as one HTML page.

The page is a matrix guarantee x client (a column per client, plus "wire" for the raw
protocol layer): each cell says pass, fail or skip, with how many tests, and lists every
test behind it with its failure or skip reason and the command that reproduces it. A table
of every failure follows, then, when the run probed the APIs, the API coverage table: per API,
the versions the broker advertises against those it answered. The layout is
reports/conformance_template.html (string.Template).

    python -m reports.conformance RESULT.json [OUT_DIR]     # writes OUT_DIR/conformance.html
"""
from __future__ import annotations

import argparse
import html
from collections import defaultdict
from pathlib import Path
from string import Template

from spec.catalogue import CATALOGUE

TEMPLATE_PATH = Path(__file__).with_name("conformance_template.html")
COLUMN_ORDER = ("confluent-kafka", "kafka-python", "aiokafka", "kcat", "kafkajs", "wire")


def _verdict(outcomes: list[str]) -> str:
    if "failed" in outcomes:
        return "fail"
    return "pass" if "passed" in outcomes else "skip"


def _cell(tests: list[dict]) -> str:
    if not tests:
        return '<td class="none">–</td>'
    verdict = _verdict([t["outcome"] for t in tests])
    counts = ", ".join(f"{sum(t['outcome'] == o for t in tests)} {o}"
                       for o in ("passed", "failed", "skipped") if any(t["outcome"] == o for t in tests))
    lines = "".join(
        f'<li class="{t["outcome"]}"><b>{html.escape(t["test"])}</b> {t["outcome"]}'
        + (f': {html.escape(t["message"])}' if t["message"] else "") + "</li>" for t in tests)
    return (f'<td class="{verdict}"><details><summary>{verdict} <small>({counts})</small></summary>'
            f"<ul>{lines}</ul></details></td>")


def _versions(versions) -> str:
    """[0, 1, 2, 5] as v0-v2, v5."""
    runs: list[list[int]] = []
    for version in sorted(int(v) for v in versions):
        if runs and version == runs[-1][-1] + 1:
            runs[-1].append(version)
        else:
            runs.append([version])
    return ", ".join(f"v{r[0]}" if len(r) == 1 else f"v{r[0]}-v{r[-1]}" for r in runs) or "none"


def _api_coverage(rows: list[dict]) -> str:
    if not rows:
        return ""
    body = []
    for row in rows:
        verdict = "fail" if row["failed"] else "pass" if row["answered"] else "skip"
        findings = "".join(f"<li>{html.escape(m)}</li>" for m in row["failed"].values())
        not_probed = sorted(set(row["not_probed"].values()))
        body.append(
            f'<tr><th class="{verdict}">{html.escape(row["name"])} ({row["api_key"]})</th>'
            f'<td>v{row["advertised"][0]}-v{row["advertised"][1]}</td><td>{_versions(row["answered"])}</td>'
            f'<td>{_versions(row["failed"]) if row["failed"] else ""}<ul>{findings}</ul></td>'
            f'<td>{_versions(row["not_probed"]) + ": " + html.escape("; ".join(not_probed)) if not_probed else ""}'
            "</td></tr>")
    return ("<h2>API coverage: advertised &times; answered</h2>\n<p>One minimal valid request per version the "
            "broker lists in ApiVersions; answered means a response at that version, with the request's correlation "
            "id, on an open connection (an error code is an answer).</p>\n<table>\n<tr><th>API</th><th>advertised</th>"
            "<th>answered</th><th>not answered</th><th>not probed</th></tr>\n" + "\n".join(body) + "\n</table>")


def render(document: dict) -> str:
    tests = document["tests"]
    columns = [c for c in COLUMN_ORDER if any(t["client"] == c for t in tests)]
    columns += sorted({t["client"] for t in tests} - set(columns))
    by_cell: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for test in tests:
        for guarantee_id in test["guarantees"]:
            by_cell[guarantee_id, test["client"]].append(test)
    rows = []
    for guarantee_id, guarantee in CATALOGUE.items():
        cells = [by_cell.get((guarantee_id, c), []) for c in columns]
        if not any(cells):
            continue
        verdict = _verdict([t["outcome"] for cell in cells for t in cell])
        rows.append(f'<tr><th class="{verdict}" title="holds when: {html.escape(guarantee.holds_when)}">'
                    f"{guarantee_id}</th><td class=\"statement\">{html.escape(guarantee.statement)}</td>"
                    + "".join(_cell(cell) for cell in cells) + "</tr>")
    failures = [
        f"<tr><td>{' '.join(t['guarantees'])}</td><td>{html.escape(t['client'])}</td><td>{html.escape(t['test'])}</td>"
        f"<td>{html.escape(t['message'])}</td><td><code>{html.escape(t['reproduce'])}</code></td></tr>"
        for t in tests if t["outcome"] == "failed"]
    totals = document["totals"]
    target = document["target"]
    return Template(TEMPLATE_PATH.read_text(encoding="utf-8")).substitute(
        bootstrap=html.escape(str(target.get("bootstrap_servers"))),
        mode="quick" if target.get("quick") else "full",
        started_at=html.escape(document["started_at"]),
        duration_s=f"{document['duration_s']:.0f}",
        passed=totals["passed"], failed=totals["failed"], skipped=totals["skipped"],
        verdict="FAIL" if totals["failed"] else "PASS",
        header="".join(f"<th>{html.escape(c)}</th>" for c in columns),
        rows="\n".join(rows),
        failures="\n".join(failures) or '<tr><td colspan="5">none</td></tr>',
        api_coverage=_api_coverage(document.get("api_coverage", [])),
    )


def write_report(document: dict, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "conformance.html"
    path.write_text(render(document), encoding="utf-8")
    return path


def main() -> None:
    from conformance.results import load

    parser = argparse.ArgumentParser(description="Render a conformance result as an HTML matrix.")
    parser.add_argument("result", type=Path)
    parser.add_argument("out_dir", type=Path, nargs="?")
    args = parser.parse_args()
    print(write_report(load(args.result), args.out_dir or args.result.parent))


if __name__ == "__main__":
    main()
