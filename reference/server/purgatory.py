"""Purgatories, keyed by partition. FetchPurgatory: long-polling fetches wait here until an
append lands on a partition they read, or their max_wait_ms runs out (Kafka's DelayedFetch).
AcksPurgatory: acks=all produces wait until their partition's replica settles them (Kafka's
DelayedProduce), re-checked whenever the partition's high watermark, ISR or role changes.

`before_wait` is the shell's way to deliver the broker's pending wake-ups before anything
waits: an acks=all produce has just appended, and waits on followers whose fetches are
parked here; a follower's fetch has just moved the high watermark, and then waits for more
data while the produce it settles is parked in the AcksPurgatory. Delivered only later (on
a timer), each replication round trip would cost a timer period."""
from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

from reference.node.broker import TopicPartition
from reference.protocol.errors import ErrorCode


class FetchPurgatory:
    def __init__(self, before_wait: Callable[[], None] = lambda: None) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future]] = defaultdict(set)
        self._before_wait = before_wait

    async def wait(self, partitions: Iterable[TopicPartition], timeout_s: float) -> None:
        """Return when any of `partitions` had an append, or after `timeout_s`."""
        partitions = list(partitions)
        self._before_wait()
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


class AcksPurgatory:
    def __init__(self, before_wait: Callable[[], None] = lambda: None) -> None:
        self._changes = FetchPurgatory(before_wait)

    async def wait_for_replication(self, broker, topic_partition: TopicPartition, required_offset: int,
                                   timeout_ms: int, leader_epoch: int | None = None) -> ErrorCode:
        """Wait until the ISR has every record below required_offset, appended in leader_epoch."""
        deadline_s = time.monotonic() + timeout_ms / 1000
        while True:
            replica = broker.partitions.get(topic_partition)
            status = (replica.acks_all_status(required_offset, leader_epoch) if replica
                      else ErrorCode.NOT_LEADER_OR_FOLLOWER)
            if status is not None:
                return status
            remaining_s = deadline_s - time.monotonic()
            if remaining_s <= 0:
                return ErrorCode.REQUEST_TIMED_OUT
            await self._changes.wait([topic_partition], remaining_s)

    def notify(self, partitions: Iterable[TopicPartition]) -> None:
        self._changes.notify(partitions)

    def wake_all(self) -> None:
        self._changes.wake_all()
