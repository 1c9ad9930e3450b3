"""The pytest plugin of the conformance suite: options, fixtures, selection and results.

Registered as a pytest11 entry point, so both of these run the suite (conformance/suite/):

    pytest --pyargs conformance --bootstrap-servers HOST:PORT [--client kcat,aiokafka] [--quick]
    kspec conformance --bootstrap-servers HOST:PORT ...

It acts only on the suite's own tests. Each of them carries @pytest.mark.guarantee("ID", ...)
with ids from spec's catalogue; a test with a `client` argument runs once per selected client.
A test's column in the matrix is its client; else "wire" when it takes the `wire` fixture;
else its module's COLUMN; else confluent-kafka.
Results go to pytest's JUnit XML (with guarantee, client and reproduce properties), to a JSON
document (--conformance-json) and to an HTML matrix guarantee x client (--conformance-report),
with the API coverage table (advertised against answered) when the run probed the APIs.
A failure's message is one verdict line: its guarantee ids, then what the check found.
"""
from __future__ import annotations

import datetime
import json
import shlex
import time
from collections import Counter
from pathlib import Path

import pytest

from conformance.clients import CLIENTS, driver, unavailable_reason
from conformance.results import Outcome, RunResult
from conformance.target import Target
from conformance.wire import WireClient
from spec.catalogue import CATALOGUE

SUITE_PACKAGE = "conformance.suite"
API_COVERAGE_PROPERTY = "api_coverage"  # a test's user property holding the API coverage table (JSON)
WIRE_COLUMN = "wire"
DEFAULT_RDKAFKA_COLUMN = "confluent-kafka"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kspec-conformance", "kspec conformance suite")
    group.addoption("--bootstrap-servers", metavar="HOST:PORT[,...]", help="the broker under test")
    group.addoption("--client", metavar="NAMES", help=f"comma-separated clients (default all: {','.join(CLIENTS)})")
    group.addoption("--only", action="append", default=[], metavar="IDS",
                    help="run only these guarantee ids or test names (comma-separated, repeatable)")
    group.addoption("--quick", action="store_true", help="one client and no thorough tests (under 2 minutes)")
    group.addoption("--client-property", action="append", default=[], metavar="KEY=VALUE",
                    help="a client property in librdkafka's names (security.protocol, sasl.username, ...)")
    group.addoption("--conformance-json", metavar="FILE", help="write the run's result as JSON")
    group.addoption("--conformance-report", metavar="DIR",
                    help="write conformance.json and conformance.html (guarantee x client matrix) to DIR")
    group.addoption("--node-stop-command", metavar="CMD", help="stops broker {node_id} (enables leader kills)")
    group.addoption("--node-start-command", metavar="CMD", help="starts broker {node_id} again")
    group.addoption("--node-pause-command", metavar="CMD", help="freezes broker {node_id}, e.g. SIGSTOP")
    group.addoption("--node-resume-command", metavar="CMD", help="lets a paused broker {node_id} run again")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "guarantee(*ids): the catalogue ids a conformance test exercises")
    config.addinivalue_line("markers", "thorough: a conformance test left out of --quick runs")
    config.pluginmanager.register(Recorder(config), "kspec-conformance-recorder")


def _is_suite(item: pytest.Item) -> bool:
    module = getattr(item, "module", None)
    return module is not None and module.__name__.startswith(SUITE_PACKAGE + ".")


def _split(values: list[str] | str | None) -> list[str]:
    values = [values] if isinstance(values, str) else (values or [])
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def selected_clients(config: pytest.Config) -> tuple[str, ...]:
    clients = _split(config.getoption("--client")) or list(CLIENTS)
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown:
        raise pytest.UsageError(f"unknown client(s) {', '.join(unknown)}; choose from {', '.join(CLIENTS)}")
    if config.getoption("--quick"):
        available = [c for c in clients if unavailable_reason(c) is None]
        clients = (available or clients)[:1]
    return tuple(clients)


def _client_properties(config: pytest.Config) -> dict[str, str]:
    properties = {}
    for pair in config.getoption("--client-property"):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise pytest.UsageError(f"--client-property takes KEY=VALUE, got {pair!r}")
        properties[key.strip()] = value
    return properties


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "client" in metafunc.fixturenames and metafunc.module.__name__.startswith(SUITE_PACKAGE + "."):
        metafunc.parametrize("client", selected_clients(metafunc.config))


def _guarantees(item: pytest.Item) -> list[str]:
    ids = [guarantee_id for mark in item.iter_markers("guarantee") for guarantee_id in mark.args]
    if not ids:
        raise pytest.UsageError(f"{item.nodeid} has no @pytest.mark.guarantee(...)")
    unknown = [g for g in ids if g not in CATALOGUE]
    if unknown:
        raise pytest.UsageError(f"{item.nodeid} names unknown guarantee ids {unknown}; known: {', '.join(CATALOGUE)}")
    return sorted(set(ids), key=list(CATALOGUE).index)


def _column(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "client" in callspec.params:
        return callspec.params["client"]
    if "wire" in item.fixturenames:
        return WIRE_COLUMN
    return getattr(item.module, "COLUMN", DEFAULT_RDKAFKA_COLUMN)


def _reproduce(config: pytest.Config, item: pytest.Item, client: str) -> str:
    command = ["kspec", "conformance", "--bootstrap-servers", config.getoption("--bootstrap-servers") or "HOST:PORT",
               "--only", getattr(item, "originalname", item.name)]
    if client in CLIENTS:
        command += ["--client", client]
    command += [f"--client-property={pair}" for pair in config.getoption("--client-property")]
    return shlex.join(command)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    suite_items = [item for item in items if _is_suite(item)]
    if not suite_items:
        return
    if not config.getoption("--bootstrap-servers"):
        raise pytest.UsageError("the conformance suite needs --bootstrap-servers HOST:PORT[,...]")
    only = set(_split(config.getoption("--only")))
    quick = config.getoption("--quick")
    keep, drop = [], []
    for item in items:
        if not _is_suite(item):
            keep.append(item)
            continue
        guarantees = _guarantees(item)
        names = {item.name, getattr(item, "originalname", item.name), item.module.__name__.rsplit(".", 1)[1]}
        wanted = not only or bool(only & (set(guarantees) | names))
        if not wanted or (quick and item.get_closest_marker("thorough")):
            drop.append(item)
            continue
        client = _column(item)
        item.user_properties += [("guarantees", " ".join(guarantees)), ("client", client),
                                 ("reproduce", _reproduce(config, item, client))]
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def target(pytestconfig: pytest.Config) -> Target:
    return Target(
        bootstrap=pytestconfig.getoption("--bootstrap-servers"),
        quick=pytestconfig.getoption("--quick"),
        properties=_client_properties(pytestconfig),
        node_start_command=pytestconfig.getoption("--node-start-command"),
        node_stop_command=pytestconfig.getoption("--node-stop-command"),
        node_pause_command=pytestconfig.getoption("--node-pause-command"),
        node_resume_command=pytestconfig.getoption("--node-resume-command"),
    )


@pytest.fixture
def wire(target: Target):
    """A raw protocol connection to the first bootstrap broker."""
    with target.wire() as client:
        yield client


@pytest.fixture
def client_driver(client: str):
    """The driver module of the parametrized client, or a skip saying why it cannot run here."""
    reason = unavailable_reason(client)
    if reason:
        pytest.skip(reason)
    return driver(client)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not _is_suite(item) or not report.failed:
        return
    properties = dict(item.user_properties)
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and call.excinfo is not None:
        crash.message = verdict(properties["guarantees"], call.excinfo)  # the line JUnit and the matrix show
    lines = [f"{g}: {CATALOGUE[g].statement} (holds when: {CATALOGUE[g].holds_when})"
             for g in properties["guarantees"].split()]
    report.sections.append(("kspec conformance", "\n".join(lines + [f"reproduce: {properties['reproduce']}"])))


def verdict(guarantees: str, excinfo: pytest.ExceptionInfo) -> str:
    """A failure as one verdict: the guarantee ids, then what the check found. A check's
    AssertionError (a Finding of the wire layer, or an `expect`) already says what was expected
    and what was seen; any other exception escaped the suite's own checks, and is reported with
    the request it followed, so the verdict still says what the broker was asked."""
    error = excinfo.value
    if isinstance(error, AssertionError) and str(error):
        return f"{guarantees}: {error}"
    if isinstance(error, pytest.fail.Exception):
        return f"{guarantees}: {error.msg}"
    entry = excinfo.traceback[-1]
    return (f"{guarantees}: the check stopped on {excinfo.typename}: {error} at {Path(str(entry.path)).name}:"
            f"{entry.lineno + 1}, an answer it did not anticipate; the suite's last wire request: "
            f"{WireClient.last_exchange}")


def _message(report: pytest.TestReport) -> tuple[str, str]:
    """(one line, details) of a failed or skipped report."""
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2]).removeprefix("Skipped: ")
        return reason, ""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    first = next((line for line in text.splitlines() if line.strip()), "")
    return first, report.longreprtext


class Recorder:
    """Collects one Outcome per suite test and writes the run's results at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.started = time.monotonic()
        self.results: dict[str, Outcome] = {}
        self.api_coverage: list[dict] = []
        self.run: RunResult | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        properties = dict(report.user_properties)
        if "guarantees" not in properties or not (report.when == "call" or report.failed or report.skipped):
            return
        if API_COVERAGE_PROPERTY in properties:
            self.api_coverage = json.loads(properties[API_COVERAGE_PROPERTY])
        previous = self.results.get(report.nodeid)
        if previous is not None and previous.outcome == "failed":
            return  # a teardown problem never hides the test's own failure
        outcome = "failed" if report.failed else "skipped" if report.skipped else "passed"
        message, details = _message(report) if outcome != "passed" else ("", "")
        if report.failed and report.when != "call":
            message = f"{report.when} failed: {message}"
        path, _, name = report.nodeid.rpartition("::")
        self.results[report.nodeid] = Outcome(
            test=name, area=Path(path).stem.removeprefix("test_"), guarantees=properties["guarantees"].split(),
            client=properties["client"], outcome=outcome, message=message, details=details,
            duration_s=round(report.duration + (previous.duration_s if previous else 0.0), 3),
            reproduce=properties["reproduce"])

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.results:
            return
        config = self.config
        self.run = RunResult(
            target={"bootstrap_servers": config.getoption("--bootstrap-servers"),
                    "clients": list(selected_clients(config)), "quick": config.getoption("--quick"),
                    "only": _split(config.getoption("--only"))},
            started_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            duration_s=time.monotonic() - self.started, tests=list(self.results.values()),
            api_coverage=self.api_coverage)
        json_path = config.getoption("--conformance-json")
        report_dir = config.getoption("--conformance-report")
        if json_path:
            self.run.write(Path(json_path))
        if report_dir:
            from reports.conformance import write_report

            self.run.write(Path(report_dir) / "conformance.json")
            write_report(self.run.to_json(), Path(report_dir))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.run is None:
            return
        by_guarantee: dict[str, Counter] = {}
        for test in self.run.tests:
            for guarantee_id in test.guarantees:
                by_guarantee.setdefault(guarantee_id, Counter())[test.outcome] += 1
        terminalreporter.section("kspec conformance: results by guarantee")
        for guarantee_id in (g for g in CATALOGUE if g in by_guarantee):
            counts = by_guarantee[guarantee_id]
            verdict = "FAIL" if counts["failed"] else "pass" if counts["passed"] else "skip"
            terminalreporter.write_line(f"{guarantee_id:<6} {verdict:<4}  passed {counts['passed']:>3}  "
                                        f"failed {counts['failed']:>3}  skipped {counts['skipped']:>3}  "
                                        f"{CATALOGUE[guarantee_id].statement}")
        for test in self.run.tests:
            if test.outcome == "failed":
                terminalreporter.write_line(f"FAILED {' '.join(test.guarantees)} {test.test}: {test.message}")
        report_dir = self.config.getoption("--conformance-report")
        if report_dir:
            terminalreporter.write_line(f"report: {Path(report_dir) / 'conformance.html'}")
