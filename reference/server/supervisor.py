"""The supervisor of a node's long-lived asyncio tasks: none of them may end silently.

Every loop of the shell (accept, tick, raft, raft senders, lifecycle, controller, replica
fetchers) is started with `Supervisor.start(name, loop, policy)`. A task that raises an
unexpected exception has it logged with its traceback, then, by its policy:
- RESTART: it is started again after a backoff that doubles from RESTART_BACKOFF_MS_MIN up
  to RESTART_BACKOFF_MS_MAX (and falls back to the minimum once a run lasted
  RESTART_BACKOFF_RESET_MS): work that can begin again from the cores' state, as Kafka's
  ShutdownableThread-based fetchers and managers do;
- STOP_NODE: the node stops with a non-zero exit (`failed` is set and `failure` says why):
  a loop whose failure leaves state no restart can trust, as Kafka halts on a fatal error
  in its Raft client or controller event queue. A storage error that must stop the node
  (the metadata log, the raft state) uses `stop_node` directly.
A task that returns ends; a cancelled one (the node stopping) ends without a word.
The table of which loop has which policy is in reference/server/README.md.
"""
from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Coroutine

log = logging.getLogger("kspec.supervisor")

RESTART_BACKOFF_MS_MIN = 100
RESTART_BACKOFF_MS_MAX = 10_000
RESTART_BACKOFF_RESET_MS = 60_000  # a run this long counts as healthy: the next backoff starts low again


class Policy(enum.Enum):
    RESTART = "restart"
    STOP_NODE = "stop the node"


class Supervisor:
    def __init__(self) -> None:
        self.failed = asyncio.Event()  # set when the node must stop with a non-zero exit
        self.failure: str | None = None  # why, in one line
        self.restarts: dict[str, int] = {}  # task name -> restarts so far

    def start(self, name: str, loop: Callable[[], Coroutine], policy: Policy) -> asyncio.Task:
        """Run loop() under supervision; `loop` is called again for each restart."""
        return asyncio.create_task(self._supervise(name, loop, policy), name=name)

    def stop_node(self, reason: str) -> None:
        """Fail-stop: the node's process ends with a non-zero exit (the first reason is kept)."""
        if self.failure is None:
            self.failure = reason
            log.critical("stopping the node: %s", reason)
        self.failed.set()

    async def _supervise(self, name: str, loop: Callable[[], Coroutine], policy: Policy) -> None:
        backoff_ms = RESTART_BACKOFF_MS_MIN
        while True:
            started_s = time.monotonic()
            try:
                await loop()
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if self.failed.is_set():
                    return  # the node is stopping for a reason already logged (e.g. its raft storage failed)
                log.exception("task %s failed (policy: %s)", name, policy.value)
                if policy is Policy.STOP_NODE:
                    self.stop_node(f"task {name} failed: {error!r}")
                    return
            if (time.monotonic() - started_s) * 1000 >= RESTART_BACKOFF_RESET_MS:
                backoff_ms = RESTART_BACKOFF_MS_MIN
            self.restarts[name] = self.restarts.get(name, 0) + 1
            log.warning("restarting task %s in %d ms (restart %d)", name, backoff_ms, self.restarts[name])
            await asyncio.sleep(backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, RESTART_BACKOFF_MS_MAX)
