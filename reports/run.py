"""The run report: a run folder rendered as RUN/report/index.html with PNG plots.

A run folder is what `kspec faults run --out RUN` writes (history.parquet, nemesis.jsonl,
results.json, node logs), optionally with the Spark check's output in RUN/check
(`kspec check RUN --out RUN/check`: verdict.json, anomalies.parquet) and a conformance
run in RUN/conformance (conformance.json and its matrix, reports/conformance.py). The
page leads with the verdict by guarantee id, then the plots (latency, throughput,
realtime lag, each with the nemesis activity), then every anomaly with the operations
that prove it and an offset timeline of each partition involved. Layout:
reports/run_template.html (string.Template).
"""
from __future__ import annotations

import html
import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from string import Template

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from faults.lanes import LANES_DIR, MAIN
from reports import plots, series
from spark_validation.anomalies import ANOMALY_KINDS, EOS_KINDS
from spark_validation.auth import AUTH_KINDS
from spark_validation.connect import CONNECT_KINDS
from spark_validation.mirror import MIRROR_KINDS
from spark_validation.lag import LAG_FILE
from spec.catalogue import CATALOGUE
from spec.history import read_history

TEMPLATE_PATH = Path(__file__).with_name("run_template.html")
# every anomaly kind a check names, with the one-sentence definition the anomalies section opens with
KINDS = {**ANOMALY_KINDS, **EOS_KINDS, **AUTH_KINDS, **CONNECT_KINDS, **MIRROR_KINDS}
HISTORY_FILE = "history.parquet"
TIMELINE_FILE = "nemesis.jsonl"
RESULTS_FILE = "results.json"
CHECK_DIR = "check"
CONFORMANCE_DIR = "conformance"
REPORT_DIR = "report"
RUNS_DIR = "runs"             # REPORTS/runs/RUN: runs the index (reports/index.py) lists
LATEST_DIR = "latest"         # REPORTS/latest/index.html: the index
ANOMALIES_SHOWN_MAX = 20      # per anomaly kind; the rest are counted and left in anomalies.parquet
EVIDENCE_RECORDS_MAX = 16     # records of one op listed in its evidence row
PARTITION_PLOTS_MAX = 8
THROUGHPUT_BINS = 60          # bins across the run, at least one second each


class RunFolderError(ValueError):
    """The folder is not a run kspec can report; the message says what is missing."""


@dataclass(frozen=True)
class RunFolder:
    path: Path
    history: pa.Table
    timeline: list[dict]
    results: dict | None
    verdict: dict | None
    anomalies: pa.Table | None
    conformance: dict | None

    @property
    def name(self) -> str:
        return self.path.resolve().name


def load_run(path: Path) -> RunFolder:
    path = Path(path)
    if not (path / HISTORY_FILE).exists():
        raise RunFolderError(f"{path} has no {HISTORY_FILE}; pass a folder `kspec faults run --out` wrote")
    check = path / CHECK_DIR
    verdict = _json(check / "verdict.json")
    anomalies = pq.read_table(check / "anomalies.parquet") if (check / "anomalies.parquet").exists() else None
    return RunFolder(path, read_history(path / HISTORY_FILE), series.read_timeline(path / TIMELINE_FILE),
                     _json(path / RESULTS_FILE), verdict, anomalies,
                     _json(path / CONFORMANCE_DIR / "conformance.json"))


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def verdict_word(run: RunFolder) -> str:
    """VALID or INVALID from the check, NOT CHECKED when the history was never checked."""
    if run.verdict is None:
        return "NOT CHECKED"
    return "VALID" if run.verdict["valid"] else "INVALID"


def in_runs_folder(path: Path) -> bool:
    """Whether the run lives in REPORTS/runs/, so that the index lists it."""
    return Path(path).resolve().parent.name == RUNS_DIR


def render_run(path: Path) -> Path:
    """Render RUN/report/index.html and its PNGs; returns the page's path."""
    started = time.monotonic()
    run = load_run(path)
    out = run.path / REPORT_DIR
    out.mkdir(exist_ok=True)
    end_s = series.end_s(run.history, run.timeline)
    intervals = series.nemesis_intervals(run.timeline, end_s)
    done = series.completions(run.history)
    bin_s = max(1.0, round(end_s / THROUGHPUT_BINS))
    images = [
        plots.latency_plot(done, intervals, end_s, out / "latency.png"),
        plots.throughput_plot(series.throughput(done, bin_s, end_s), intervals, end_s, out / "throughput.png"),
        plots.lag_plot(series.read_lag(run.path / CHECK_DIR / LAG_FILE), intervals, end_s, out / "realtime-lag.png"),
    ]
    anomalies_html = _anomalies_section(run, intervals, end_s, out)
    word = verdict_word(run)
    page = Template(TEMPLATE_PATH.read_text(encoding="utf-8")).substitute(
        name=html.escape(run.name),
        index_link=(f'<a href="../../../{LATEST_DIR}/index.html">all runs</a>' if in_runs_folder(path) else ""),
        verdict=word,
        verdict_class=word.lower().replace(" ", ""),
        verdict_sentence=_verdict_sentence(run),
        figures=_figures(run, done),
        conformance=_conformance_section(run),
        guarantee_rows="\n".join(_guarantee_rows(run)),
        plots="\n".join(f'<img src="{p.name}" alt="{p.stem}">' for p in images),
        anomalies=anomalies_html,
        fault_rows="\n".join(f"<tr><td class=num>{i.start_s:.1f}</td><td class=num>{i.stop_s:.1f}</td>"
                             f"<td class=num>{i.stop_s - i.start_s:.1f}</td><td>{html.escape(i.label)}</td></tr>"
                             for i in intervals) or '<tr><td colspan="4">no faults</td></tr>',
        files="\n".join(_files(run)),
        run_dir=html.escape(str(path)),
        rendered_at=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        render_s=f"{time.monotonic() - started:.1f}",
    )
    page_path = out / "index.html"
    page_path.write_text(page, encoding="utf-8")
    return page_path


def _verdict_sentence(run: RunFolder) -> str:
    if run.verdict is None:
        return (f"The history was not checked: run <code>kspec check {html.escape(str(run.path))} --out "
                f"{html.escape(str(run.path / CHECK_DIR))}</code> and render again.")
    v = run.verdict
    violated = [g for g, e in v["guarantees"].items() if e["status"] == "violated"]
    allowed = {a: n for a, n in v["anomalies"].items() if a not in v["violations"]}
    sentence = (f"{v['ops']:,} operations checked in {v['seconds']['total']:.0f} s by {len(v['checks'])} checks. "
                + (f"Violated: <b>{', '.join(violated)}</b>. " if violated else "No guarantee was violated. "))
    if allowed:
        sentence += "Allowed anomalies (no guarantee promises otherwise): " + ", ".join(
            f"{a} &times; {n}" for a, n in sorted(allowed.items())) + "."
    return sentence


def _figures(run: RunFolder, done: series.Completions) -> str:
    outcomes = Counter(done.type.tolist())
    rows = [("client ops completed", ", ".join(f"{outcomes[o]:,} {o}" for o in series.OUTCOMES if outcomes[o])
             or "none")]
    if run.results:
        options = run.results["options"]
        rows += [
            ("target", f"{options['target']}, {options['nodes']} node(s), network {run.results['network_mode']} "
                       f"({run.results['network_mode_reason']})"),
            ("faults", ", ".join(options["nemeses"]) or "none"),
            ("workload", ", ".join(f"{k} {v}" for k, v in sorted(options["workload"].items()))),
            ("main phase", f"{options['time_limit_s']:g} s at {run.results['main_phase_ops_per_s']:g} ops/s"),
            ("final reads", "complete" if run.results["final_reads_complete"] else "INCOMPLETE"),
        ]
        rows += [("workload failure", failure) for failure in run.results["workload_failures"]]
        for lane, summary in run.results.get("lanes", {}).items():  # --workload all (faults/lanes.py)
            rows.append((f"lane {lane}", f"skipped: {summary['skipped']}" if summary.get("skipped") else
                         f"keys {summary['keys'][0]}..{summary['keys'][1] - 1}, checks {', '.join(summary['checks'])}"
                         + (f"; {', '.join(f'{n:,} {k}' for k, n in sorted(summary['completions'].items()))}, "
                            f"final reads {'complete' if summary['final_reads_complete'] else 'INCOMPLETE'}"
                            if "completions" in summary else " (the run's own figures above)")
                         + "".join(f"; {failure}" for failure in summary.get("workload_failures") or [])))
        if run.results.get("replica_audit"):  # faults/audit.py
            audit = run.results["replica_audit"]
            rows.append(("replica audit", f"{', '.join(audit.get('methods', [])) or 'none'}: {audit.get('reads', 0)} "
                                          f"replica reads, {audit.get('unread', 0)} failed"
                                          + (f" ({audit['error']})" if audit.get("error") else "")))
    if len(done.latency_ms):
        ok = done.type == "ok"
        if ok.any():
            quantiles = [float(q) for q in np.percentile(done.latency_ms[ok], [50, 99, 100])]
            rows.append(("ok latency", "p50 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms".format(*quantiles)))
    rows += _informational(run.verdict or {})
    return "\n".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>" for k, v in rows)


def _informational(verdict: dict) -> list[tuple[str, str]]:
    """Jepsen's informational outputs from the check: worst realtime lag and consume counts."""
    rows = []
    if "realtime-lag" in verdict:
        worst = verdict["realtime-lag"]["worst"]
        where = f" ({worst['topic']}-{worst['partition']}, process {worst['process']}, at {worst['time_s']:.1f} s)" \
            if "topic" in worst else ""
        rows.append(("worst realtime lag", f"{worst['lag_s']:.3f} s{where}"))
    if "consume-counts" in verdict:
        counts = verdict["consume-counts"]
        read_more_than_once = sum(len(values) for values in counts["dup-counts"].values())
        text = ", ".join(f"{n} read {c}x" for c, n in counts["distribution"].items()) or "no subscribed reads"
        if read_more_than_once:
            text += f"; {read_more_than_once} value(s) read more than once"
        rows.append(("consume counts (subscribed)", text))
    return rows


def _conformance_section(run: RunFolder) -> str:
    if run.conformance is None:
        return ""
    totals = run.conformance["totals"]
    mode = "quick" if run.conformance["target"].get("quick") else "full"
    return (f'<p>Conformance suite ({mode}) against <code>{html.escape(str(run.conformance["target"]["bootstrap_servers"]))}'
            f'</code>: <span class="badge {"failed" if totals["failed"] else "passed"}">{totals["passed"]} passed, '
            f'{totals["failed"]} failed, {totals["skipped"]} skipped</span>: '
            f'<a href="../{CONFORMANCE_DIR}/conformance.html">the guarantee &times; client matrix</a>.</p>')


def _guarantee_rows(run: RunFolder) -> list[str]:
    found = run.verdict["guarantees"] if run.verdict else {}
    by_kind: dict[str, Counter] = defaultdict(Counter)
    if run.anomalies is not None:
        for guarantee_id, anomaly in zip(run.anomalies["guarantee"].to_pylist(), run.anomalies["anomaly"].to_pylist()):
            by_kind[guarantee_id][anomaly] += 1
    rows = []
    for guarantee_id, guarantee in CATALOGUE.items():
        status = found.get(guarantee_id, {}).get("status", "unchecked")
        label = {"held": "held", "violated": "VIOLATED", "unchecked": "not checked"}[status]
        reason = (run.verdict or {}).get("unchecked", {}).get(guarantee_id)
        label += f" &mdash; {html.escape(reason)}" if status == "unchecked" and reason else ""
        lanes = found.get(guarantee_id, {}).get("lanes")  # a lanes run: where it was checked
        label += f"<br><small>lanes: {html.escape(', '.join(lanes))}</small>" if lanes else ""
        violated_in = found.get(guarantee_id, {}).get("violated_in")
        label += f"<br><small>violated in: {html.escape(', '.join(violated_in))}</small>" if violated_in else ""
        kinds = ", ".join(f'<a href="#{a}">{a}</a> &times; {n}' for a, n in sorted(by_kind[guarantee_id].items()))
        rows.append(f'<tr><th class="{status}">{guarantee_id}</th><td>{html.escape(guarantee.statement)}</td>'
                    f"<td>{html.escape(guarantee.holds_when)}</td><td class=\"{status}\">{label}</td>"
                    f"<td>{kinds or ('0' if status != 'unchecked' else '')}</td></tr>")
    return rows


def _anomalies_section(run: RunFolder, intervals: list[series.Interval], end_s: float, out: Path) -> str:
    if run.anomalies is None:
        return "<p>No check output: the history has not been checked yet.</p>"
    if run.anomalies.num_rows == 0:
        return "<p>None: every check found the history consistent.</p>"
    rows = run.anomalies.to_pylist()
    evidence = {lane: _ops_by_index(lane_history(run, lane), {i for r in rows if r.get("lane", MAIN) == lane
                                                               for i in (r["ops"] or [])})
                for lane in {r.get("lane", MAIN) for r in rows}}  # a lanes run's rows name their lane
    parts = []
    for anomaly, kind_rows in sorted(_group(rows, "anomaly").items(), key=lambda kv: (not kv[1][0]["violation"], kv[0])):
        kind = KINDS.get(anomaly)
        violation = kind_rows[0]["violation"]
        status = (f'violates <a href="#guarantees">{kind_rows[0]["guarantee"]}</a>' if violation
                  else "allowed: reported for the record")
        parts.append(f'<h3 id="{html.escape(anomaly)}">{html.escape(anomaly)} &times; {len(kind_rows)} '
                     f'<small class="badge {"violated" if violation else "allowed"}">{status}</small></h3>')
        parts.append(f'<p class="note">{html.escape(kind.definition if kind else "")}</p>')
        for row in kind_rows[:ANOMALIES_SHOWN_MAX]:
            parts.append(_anomaly_html(row, evidence[row.get("lane", MAIN)]))
        if len(kind_rows) > ANOMALIES_SHOWN_MAX:
            parts.append(f"<p class=note>{len(kind_rows) - ANOMALIES_SHOWN_MAX} more {html.escape(anomaly)} rows "
                         f"in <code>{CHECK_DIR}/anomalies.parquet</code>.</p>")
    parts.append("<h3>Offset timelines of the partitions involved</h3>")
    parts.extend(_partition_plots(run, rows, intervals, end_s, out))
    return "\n".join(parts)


def _group(rows: list[dict], column: str) -> dict:
    grouped: dict = defaultdict(list)
    for row in rows:
        grouped[row[column]].append(row)
    return grouped


def _anomaly_html(row: dict, evidence: dict[int, list[dict]]) -> str:
    where = f"{row['topic']}-{row['partition']}" if row["topic"] is not None else "across partitions"
    facts = [f"<b>{html.escape(where)}</b>"] + ([f"lane {html.escape(row['lane'])}"] if row.get("lane") else [])
    facts += [f"{name} {', '.join(map(str, row[name]))}" for name in ("values", "offsets") if row[name]]
    facts += [f"delta {row['delta']}"] if row["delta"] is not None else []
    table_rows = "".join(_evidence_row(index, evidence.get(index, []), row["topic"], row["partition"])
                         for index in row["ops"] or [])
    css = "anomaly" if row["violation"] else "anomaly allowed-kind"
    return (f'<div class="{css}"><p>{"; ".join(facts)}<br>{html.escape(row["detail"] or "")}</p>'
            + (f'<table class="evidence"><tr><th>op</th><th>process</th><th>what</th><th>invoked (s)</th>'
               f"<th>completed (s)</th><th>records (value@offset)</th><th>error</th></tr>{table_rows}</table>"
               if table_rows else "") + "</div>")


def lane_history(run: RunFolder, lane: str) -> pa.Table:
    """The history of a lane of a lanes run (`kspec faults run --workload all`): the main lane's is the run's."""
    if lane == MAIN:
        return run.history
    return read_history(run.path / LANES_DIR / lane / HISTORY_FILE)


def _ops_by_index(history: pa.Table, indexes: set[int]) -> dict[int, list[dict]]:
    """The history rows of the given records, by index, in seq order."""
    if not indexes:
        return {}
    rows = history.filter(pc.is_in(history["index"], pa.array(sorted(indexes), pa.int64())))
    return _group(rows.sort_by([("index", "ascending"), ("seq", "ascending")]).to_pylist(), "index")


def _evidence_row(index: int, rows: list[dict], topic: str | None, partition: int | None) -> str:
    if not rows:
        return f"<tr><td>{index}</td><td colspan=6>not in the history</td></tr>"
    first = rows[0]
    invoked_s = (first["invoke_time_ns"] if first["invoke_time_ns"] is not None else first["time_ns"]) / series.NS_PER_S
    completed = "" if first["type"] == "invoke" else f"{first['time_ns'] / series.NS_PER_S:.3f}"
    relevant = [r for r in rows if r["topic"] is not None and r["value"] is not None
                and (topic is None or (r["topic"], r["partition"]) == (topic, partition))]
    by_mop: dict = defaultdict(list)
    for r in relevant:
        by_mop[(r["mop_f"], r["topic"], r["partition"])].append(r)
    described, shown = [], 0
    for (mop_f, t, p), records in by_mop.items():
        taken = records[: max(0, EVIDENCE_RECORDS_MAX - shown)]
        shown += len(taken)
        text = " ".join(f"{r['value']}@{'?' if r['offset'] is None else r['offset']}" for r in taken)
        more = f" &hellip; {len(records) - len(taken)} more" if len(taken) < len(records) else ""
        described.append(f"{mop_f} {html.escape(t)}-{p}: {text}{more}")
    if not described and any(r["mop_f"] == "poll" for r in rows):
        described.append("poll: nothing" if topic is None else f"poll: nothing of {html.escape(topic)}-{partition}")
    extra = json.loads(first["extra"]) if first["extra"] else {}
    return (f"<tr><td>{index}</td><td>{first['process']}</td><td>{first['f']} {first['type']}</td>"
            f"<td class=num>{invoked_s:.3f}</td><td class=num>{completed}</td>"
            f"<td class=mono>{'<br>'.join(described)}</td><td>{html.escape(str(extra.get('error', '')))}</td></tr>")


def _partition_plots(run: RunFolder, rows: list[dict], intervals, end_s: float, out: Path) -> list[str]:
    by_partition = _group([r for r in rows if r["topic"] is not None], "topic")
    ranked = Counter({(r["topic"], r["partition"]): 0 for r in rows if r["topic"] is not None})
    for r in rows:
        if r["topic"] is not None:
            ranked[r["topic"], r["partition"]] += 1
    parts = []
    for (topic, partition), count in ranked.most_common(PARTITION_PLOTS_MAX):
        lane = next((r.get("lane", MAIN) for r in by_partition[topic]), MAIN)  # a lane's topics are its own
        timeline = series.partition_timeline(lane_history(run, lane), topic, partition)
        marks = series.highlights(timeline, by_partition[topic])
        path = plots.partition_plot(timeline, marks, intervals, end_s,
                                    out / f"offsets-{_safe(topic)}-{partition}.png")
        parts.append(f'<p>{html.escape(topic)}-{partition}: {count} anomal{"y" if count == 1 else "ies"}</p>'
                     f'<img src="{path.name}" alt="offsets of {html.escape(topic)}-{partition}">')
    if len(ranked) > PARTITION_PLOTS_MAX:
        parts.append(f"<p class=note>{len(ranked) - PARTITION_PLOTS_MAX} more partitions with anomalies "
                     "are not plotted.</p>")
    if not ranked:
        parts.append("<p class=note>The anomalies span partitions (cycles); their evidence is above.</p>")
    return parts


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _files(run: RunFolder) -> list[str]:
    candidates = [HISTORY_FILE, TIMELINE_FILE, RESULTS_FILE, "run.json", "clients.log",
                  f"{CHECK_DIR}/verdict.json", f"{CHECK_DIR}/anomalies.parquet",
                  f"{CONFORMANCE_DIR}/conformance.html", f"{CONFORMANCE_DIR}/conformance.json",
                  f"{CONFORMANCE_DIR}/junit.xml"]
    candidates += sorted(p.name for p in run.path.glob("node-*.log"))
    return [f'<li><a href="../{name}">{name}</a></li>' for name in candidates if (run.path / name).exists()]

