"""Fixtures for the Connect tests: a real `kspec broker` and the worker processes a test starts."""
from __future__ import annotations

import signal
import subprocess

import pytest

from connect_helpers import ConnectProcess
from reference.process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker per test module: each test uses its own topics and groups."""
    process = BrokerProcess(str(tmp_path_factory.mktemp("broker") / "data"),
                            overrides={"group.initial.rebalance.delay.ms": "0",
                                       # lets the workers notice a killed one in 3 s instead of 6
                                       "group.min.session.timeout.ms": "1000"})
    process.start()
    yield process
    if process.running:
        assert process.stop() == 0


@pytest.fixture
def workers():
    """Connect processes a test starts; all stopped (or killed) at its end."""
    started: list[ConnectProcess] = []
    yield started
    running = [worker for worker in started if worker.running]
    for worker in running:  # all at once: each stop commits offsets and leaves its group
        worker.process.send_signal(signal.SIGTERM)
    for worker in running:
        try:
            worker.stop()
        except subprocess.TimeoutExpired:
            worker.kill()
