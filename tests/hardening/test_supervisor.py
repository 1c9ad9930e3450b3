"""The supervisor: a failed task is logged with its traceback and restarted with a growing,
bounded backoff, or stops the node; a task that returns or is cancelled just ends."""
from __future__ import annotations

import asyncio
import logging

from reference.server import supervisor
from reference.server.supervisor import Policy, Supervisor


def test_a_failing_restart_task_is_logged_and_started_again_with_backoff(caplog, monkeypatch):
    monkeypatch.setattr(supervisor, "RESTART_BACKOFF_MS_MIN", 10)
    runs: list[float] = []

    async def flaky() -> None:
        runs.append(asyncio.get_running_loop().time())
        if len(runs) < 4:
            raise RuntimeError(f"run {len(runs)} broke")

    async def scenario() -> Supervisor:
        watcher = Supervisor()
        await asyncio.wait_for(watcher.start("flaky", flaky, Policy.RESTART), 5)
        return watcher

    with caplog.at_level(logging.WARNING, logger="kspec.supervisor"):
        watcher = asyncio.run(scenario())
    assert len(runs) == 4 and watcher.restarts == {"flaky": 3} and not watcher.failed.is_set()
    gaps = [later - earlier for earlier, later in zip(runs, runs[1:])]
    assert gaps[0] >= 0.009 and gaps[1] >= 0.019 and gaps[2] >= 0.039, f"the backoff doubles: {gaps}"
    failures = [r for r in caplog.records if r.getMessage().startswith("task flaky failed")]
    assert len(failures) == 3 and all("run " in r.exc_text and "broke" in r.exc_text for r in failures)


def test_a_failing_stop_node_task_fails_the_node_once_with_its_reason(caplog):
    async def broken() -> None:
        raise OSError(5, "Input/output error")

    async def scenario() -> Supervisor:
        watcher = Supervisor()
        await watcher.start("raft", broken, Policy.STOP_NODE)
        await asyncio.wait_for(watcher.failed.wait(), 5)
        return watcher

    with caplog.at_level(logging.CRITICAL, logger="kspec.supervisor"):
        watcher = asyncio.run(scenario())
    assert watcher.failure.startswith("task raft failed: OSError(5") and watcher.restarts == {}
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL] == [
        f"stopping the node: {watcher.failure}"]


def test_a_cancelled_task_ends_without_a_restart():
    async def scenario() -> Supervisor:
        watcher = Supervisor()
        task = watcher.start("idle", lambda: asyncio.sleep(60), Policy.STOP_NODE)
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return watcher

    watcher = asyncio.run(scenario())
    assert watcher.restarts == {} and not watcher.failed.is_set()
