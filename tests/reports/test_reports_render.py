"""A run folder rendered as a report: the page's sections, its PNGs, the index of runs, `kspec report`."""
from __future__ import annotations

import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import pytest
from reports_synthetic import write_run

from reports.index import write_index
from reports.run import RunFolderError, render_run
from spec.catalogue import CATALOGUE

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTS = ("latency.png", "throughput.png", "realtime-lag.png", "offsets-t0-0.png")


class Page(HTMLParser):
    """The parts of a page the tests look at: links, images, ids, and the text of each table row."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.links, self.images, self.ids, self.rows, self.row = [], [], set(), [], None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and "href" in attrs:
            self.links.append(attrs["href"])
        elif tag == "img":
            self.images.append(attrs["src"])
        elif tag == "tr":
            self.row = []

    def handle_endtag(self, tag):
        if tag == "tr" and self.row is not None:
            self.rows.append(" ".join(" ".join(self.row).split()))
            self.row = None

    def handle_data(self, data):
        if self.row is not None:
            self.row.append(data)

    def row_starting(self, first: str) -> str:
        return next(r for r in self.rows if r.startswith(first + " "))


def assert_links_resolve(page_path: Path, page: Page) -> None:
    for link in page.links + page.images:
        if not link.startswith("#"):
            assert (page_path.parent / link).resolve().exists(), f"{page_path} links to missing {link}"


def test_the_report_leads_with_the_verdict_by_guarantee_id(synthetic_run):
    page_path = render_run(synthetic_run.path)
    assert page_path == synthetic_run.path / "report" / "index.html"
    text = page_path.read_text()
    page = Page(text)
    assert "<title>kspec run run-a: INVALID</title>" in text
    for guarantee_id in CATALOGUE:
        assert any(r.startswith(guarantee_id + " ") for r in page.rows), f"{guarantee_id} missing from the table"
    assert page.row_starting("ORD-3").endswith("VIOLATED nonmonotonic-poll × 1")
    assert page.row_starting("DUR-1").endswith("held 0")
    assert "not checked" in page.row_starting("GRP-1")
    assert {"guarantees", "plots", "anomalies", "faults", "files", "nonmonotonic-poll", "G0"} <= page.ids
    assert page.row_starting("worst realtime lag") == "worst realtime lag 0.750 s (t0-0, process 1, at 2.5 s)"
    assert page.row_starting("consume counts") == ("consume counts (subscribed) 12 read 1x, 1 read 2x; "
                                                   "1 value(s) read more than once")


def test_each_anomaly_comes_with_the_operations_that_prove_it(synthetic_run):
    page = Page(render_run(synthetic_run.path).read_text())
    first = page.row_starting(str(synthetic_run.first_poll))
    reread = page.row_starting(str(synthetic_run.reread_poll))
    # op, process, what, invoked (s), completed (s), the records of the anomaly's partition as value@offset
    assert first == f"{synthetic_run.first_poll} 1 poll ok 4.804 4.805 poll t0-0: 45@22 47@23"
    assert reread.endswith("poll t0-0: 1@0 3@1 5@2 7@3 9@4 11@5 13@6 15@7 17@8 19@9 21@10 23@11 25@12 27@13 29@14 31@15 … 9 more"), \
        "a long poll is cut at EVIDENCE_RECORDS_MAX, with the count of the rest"
    text = (synthetic_run.path / "report" / "index.html").read_text()
    assert "allowed: reported for the record" in text, "G0 has no guarantee: shown, but not as a violation"


def test_the_plots_are_real_pngs_a_person_can_read(synthetic_run):
    page_path = render_run(synthetic_run.path)
    page = Page(page_path.read_text())
    assert sorted(page.images) == sorted(PLOTS)
    for name in PLOTS:
        data = (page_path.parent / name).read_bytes()
        assert data.startswith(PNG_MAGIC), name
        height, width, _ = matplotlib.image.imread(page_path.parent / name).shape
        assert width >= 1000 and 350 <= height <= 700, (name, width, height)
    write_index(synthetic_run.path.parent.parent)  # the page's "all runs" link
    assert_links_resolve(page_path, page)


def test_the_fault_timeline_lists_every_fault_with_its_duration(synthetic_run):
    page = Page(render_run(synthetic_run.path).read_text())
    assert "1.0 3.0 2.0 partition one" in page.rows
    assert any(r.startswith("4.0 ") and r.endswith("kill leader node 1") for r in page.rows), page.rows


def test_an_unchecked_run_says_how_to_check_it(tmp_path):
    run = write_run(tmp_path / "run", checked=False)
    text = render_run(run.path).read_text()
    assert "<title>kspec run run: NOT CHECKED</title>" in text
    assert f"kspec check {run.path} --out {run.path / 'check'}" in text
    assert "all runs" not in text, "a run outside a runs/ folder has no index to link to"


def test_a_folder_without_a_history_is_refused(tmp_path):
    with pytest.raises(RunFolderError, match="has no history.parquet"):
        render_run(tmp_path)


def test_the_index_lists_runs_newest_first_with_the_latest_conformance_matrix(tmp_path):
    reports = tmp_path / "reports"
    older = write_run(reports / "runs" / "older", checked=False, conformance=True)
    newer = write_run(reports / "runs" / "newer")
    for run in (older, newer):
        render_run(run.path)
    index_path = write_index(reports)
    assert index_path == reports / "latest" / "index.html"
    page = Page(index_path.read_text())
    runs = [r for r in page.rows if r.startswith(("older", "newer"))]
    assert [r.split()[0] for r in runs] == ["newer", "older"]
    assert "INVALID: ORD-3" in runs[0] and "not checked" in runs[1] and "1 passed, 0 failed, 1 skipped" in runs[1]
    assert "../runs/older/conformance/conformance.html" in page.links
    assert "../runs/newer/report/index.html" in page.links
    assert_links_resolve(index_path, page)
    report = Page((newer.path / "report" / "index.html").read_text())
    assert "../../../latest/index.html" in report.links
    assert_links_resolve(newer.path / "report" / "index.html", report)


def test_kspec_report_renders_the_run_and_refreshes_the_index(synthetic_run):
    done = subprocess.run([sys.executable, "-m", "kspec.cli", "report", str(synthetic_run.path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    reports = synthetic_run.path.parent.parent
    assert done.stdout.split() == [str(synthetic_run.path / "report" / "index.html"),
                                   str(reports / "latest" / "index.html")]
    refused = subprocess.run([sys.executable, "-m", "kspec.cli", "report", str(reports)], capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 1 and "has no history.parquet" in refused.stderr


def test_every_anomaly_kind_a_lane_names_opens_with_its_definition(synthetic_run):
    """The auth, Connect and mirror lanes' kinds too, not only the queue checker's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from reports.run import KINDS
    from spark_validation.auth import AUTH_KINDS
    anomalies_path = synthetic_run.path / "check" / "anomalies.parquet"
    rows = pq.read_table(anomalies_path).to_pylist()
    rows.append({"anomaly": "auth-denied-served", "guarantee": "AUTH-2", "violation": True, "topic": None,
                 "partition": None, "process": None, "ops": [], "values": None, "offsets": None, "delta": None,
                 "detail": "probe produce-denied served by node 0"})
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(anomalies_path)), anomalies_path)
    text = render_run(synthetic_run.path).read_text()
    assert f'<p class="note">{AUTH_KINDS["auth-denied-served"].definition}</p>' in text
    assert all(kind.definition.strip() for kind in KINDS.values())
