"""The last lines of the logs of the processes a failed test ran (broker nodes, the mirror),
appended to its report: on a CI machine the test's directories are gone once the run ends, so a
failure has to explain itself. The test areas' conftest hooks call `attach`.

A process is found among the test's fixture values: a ClusterProcess (each node's stderr), a
BrokerProcess, anything with a `started` list of clusters (the start_cluster fixture), a tuple
of those (or with a `brokers` tuple of them: the mirror tests' clusters), and the test's tmp_path (the `*.log` files in it, e.g. a mirror's log; not those in
its subdirectories, where a broker's data directory keeps its segments as `*.log`).
"""
from __future__ import annotations

import pathlib

from reference.process import BrokerProcess, ClusterProcess

LOG_LINES_ON_FAILURE = 60


def attach(item, report) -> None:
    """Add a section per log to the report of a test that failed in its setup or its call (a
    fixture that starts a cluster and then fails is a setup failure)."""
    if report.when not in ("setup", "call") or not report.failed:
        return
    seen = set()
    for value in item.funcargs.values():
        for title, path in _logs_of(value):
            if path not in seen:
                seen.add(path)
                report.sections.append((f"{title}: {path}", last_lines(path)))


def _logs_of(value) -> list[tuple[str, str]]:
    if isinstance(value, ClusterProcess):
        return [(f"node {node_id}", node.stderr_path) for node_id, node in value.nodes.items()]
    if isinstance(value, BrokerProcess):
        return [(f"broker {value.node_id}", value.stderr_path)]
    if isinstance(value, pathlib.Path) and value.is_dir():
        return [("log", str(path)) for path in sorted(value.glob("*.log"))]
    if isinstance(value, tuple):
        return [log for member in (*value, *getattr(value, "brokers", ())) for log in _logs_of(member)]
    return [log for cluster in getattr(value, "started", ()) for log in _logs_of(cluster)]


def last_lines(path: str, count: int = LOG_LINES_ON_FAILURE) -> str:
    try:
        with open(path, errors="replace") as log:
            return "".join(log.readlines()[-count:])
    except OSError as error:
        return f"(no log: {error})"
