"""Two single-node `kspec broker` clusters for the mirror tests, shared by the module: each test
uses its own cluster aliases and topics, so the mirror's internal topics never overlap. A failed
test's report ends with the last lines of both brokers' logs and of the mirror's (tests/log_tails.py)."""
from __future__ import annotations

import pytest

from reference.process import BrokerProcess
from tests import log_tails


class Clusters(tuple):
    """(source bootstrap, target bootstrap); `brokers` are their two processes, for their logs."""
    brokers: tuple[BrokerProcess, BrokerProcess]


@pytest.fixture(scope="package")
def clusters(tmp_path_factory):
    base = tmp_path_factory.mktemp("mirror-clusters")
    source, target = BrokerProcess(str(base / "source")), BrokerProcess(str(base / "target"))
    source.start()
    try:
        target.start()
        try:
            started = Clusters((source.bootstrap, target.bootstrap))
            started.brokers = (source, target)
            yield started
        finally:
            target.stop()
    finally:
        source.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    log_tails.attach(item, outcome.get_result())
