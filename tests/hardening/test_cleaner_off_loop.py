"""Compaction runs off the event loop: while the cleaner compacts a large log, a timer on the
loop that ticks the broker (as the shell's tick loop does; a cluster node's raft election timer
sits on the same loop) is never late by more than a small share of the pass. Run on the loop,
the pass held the timer back for all of its length (about 3.5 s for this log on an idle 2-core
machine); the bound is relative because a loaded machine slows the pass and the timer alike."""
from __future__ import annotations

import asyncio
import os
import time

from reference.config import BrokerConfig
from reference.node.broker import Broker, TopicPartition
from reference.protocol.records import Record, build_batch
from reference.storage.cleaner import CHECKPOINT_FILE

TIMER_INTERVAL_MS = 10
TICK_INTERVAL_MS = 100  # as the shell's tick loop
LATENESS_SHARE_OF_PASS_MAX = 0.5  # on the loop the pass made the timer late by all of it (share ~1); a loaded
                                  # machine makes a timer late by whole scheduling slices, off the loop too
RECORDS = 150_000
RECORDS_PER_BATCH = 1000
KEYS = 1000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_the_loop_timers_fire_on_time_while_the_cleaner_compacts_a_large_log(tmp_path):
    broker = Broker(BrokerConfig(log_dirs=str(tmp_path), log_cleaner_backoff_ms=0), now_ms())
    broker.create_topic("compacted", 1, 1, {"cleanup.policy": "compact", "segment.bytes": str(1 << 20),
                                            "min.cleanable.dirty.ratio": "0.01"}, validate_only=False, now_ms=now_ms())
    partition = TopicPartition("compacted", 0)
    for first in range(0, RECORDS, RECORDS_PER_BATCH):
        records = [Record(timestamp=now_ms(), key=b"key-%d" % ((first + i) % KEYS), value=b"v" * 50)
                   for i in range(RECORDS_PER_BATCH)]
        broker.append(partition, build_batch(records), now_ms())
    log = broker.partition(partition).log
    size_before = sum(segment.size_bytes for segment in log.segments)

    async def scenario() -> tuple[float, float]:
        lateness_ms = [0.0]

        async def timer() -> None:  # stands for raft's election timer on a cluster node's loop
            while True:
                due = time.monotonic() + TIMER_INTERVAL_MS / 1000
                await asyncio.sleep(TIMER_INTERVAL_MS / 1000)
                lateness_ms.append((time.monotonic() - due) * 1000)

        timing = asyncio.create_task(timer())
        started = time.monotonic()
        while not os.path.exists(os.path.join(log.dir_path, CHECKPOINT_FILE)):
            await asyncio.sleep(TICK_INTERVAL_MS / 1000)
            broker.tick(now_ms())
            assert time.monotonic() - started < 120, "the cleaner finishes"
        await asyncio.sleep(2 * TIMER_INTERVAL_MS / 1000)  # a timer overdue after the last tick records it
        timing.cancel()
        return max(lateness_ms), (time.monotonic() - started) * 1000

    lateness_ms_max, compaction_ms = asyncio.run(scenario())
    broker.close()
    assert sum(segment.size_bytes for segment in log.segments) < size_before / 4, "the log was compacted"
    assert lateness_ms_max < LATENESS_SHARE_OF_PASS_MAX * compaction_ms, (lateness_ms_max, compaction_ms)
