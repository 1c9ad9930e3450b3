"""The fetch purgatory: long-polling fetches wait here until an append lands on a partition
they read, or their max_wait_ms runs out (Kafka's DelayedFetch, keyed by partition)."""
from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable

from reference.node.broker import TopicPartition


class FetchPurgatory:
    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future]] = defaultdict(set)

    async def wait(self, partitions: Iterable[TopicPartition], timeout_s: float) -> None:
        """Return when any of `partitions` had an append, or after `timeout_s`."""
        partitions = list(partitions)
        woken = asyncio.get_running_loop().create_future()
        for partition in partitions:
            self._waiters[partition].add(woken)
        try:
            await asyncio.wait_for(woken, timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            for partition in partitions:
                self._waiters[partition].discard(woken)
                if not self._waiters[partition]:
                    del self._waiters[partition]

    def notify(self, partitions: Iterable[TopicPartition]) -> None:
        for partition in partitions:
            for woken in self._waiters.get(partition, ()):
                if not woken.done():
                    woken.set_result(None)

    def wake_all(self) -> None:
        self.notify(list(self._waiters))
