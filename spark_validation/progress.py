"""Progress of `kspec check` for a person watching: Spark's stages (tasks done of total, each
stage a bar as it starts), the checks done of total, and ops per second, drawn with rich on
stderr. When stderr is not a terminal nothing is drawn and each finished check is one plain
line ("[3/16] lost-write: 0 row(s) in 0.4 s"), which logs and CI keep.
"""
from __future__ import annotations

import sys
import threading
import time

from pyspark.sql import SparkSession
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from spark_validation.session import is_connect

POLL_S = 0.5  # how often Spark's status tracker is read


class CheckProgress:
    """A context manager around a check; `stages(spark)` follows Spark's stages, `check(...)` the checks."""

    def __init__(self):
        self.console = Console(stderr=True)
        self.live = self.console.is_terminal
        self.bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), console=self.console,
                             transient=False) if self.live else None
        self.spark: SparkSession | None = None
        self.stage_bars: dict[int, int] = {}
        self.checks_bar: int | None = None
        self.stages_bar: int | None = None
        self.history_rows = 0
        self.started = time.monotonic()
        self.stopping = threading.Event()
        self.poller = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> "CheckProgress":
        if self.live:
            self.bars.start()
            self.poller.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.live:
            self.stopping.set()
            self.poller.join()
            self._poll_once()
            self.bars.stop()

    def stages(self, spark: SparkSession, history_rows: int = 0) -> None:
        """Follow spark's stages; history_rows (when known) gives a rate. A Spark Connect session has no
        status tracker: only the checks are shown."""
        if not is_connect(spark):
            self.spark, self.history_rows = spark, history_rows

    def check(self, name: str, position: int, total: int, rows: int, seconds: float) -> None:
        if not self.live:
            print(f"[{position}/{total}] {name}: {rows} row(s) in {seconds:.1f} s", file=sys.stderr, flush=True)
            return
        if self.checks_bar is None:
            self.checks_bar = self.bars.add_task("checks", total=total, rate="")
        self.bars.update(self.checks_bar, completed=position, description=f"checks ({name})")

    def _poll(self) -> None:
        while not self.stopping.wait(POLL_S):
            self._poll_once()

    def _poll_once(self) -> None:
        if self.spark is None:
            return
        tracker = self.spark.sparkContext.statusTracker()
        active = set(tracker.getActiveStageIds())
        for stage_id in active:
            info = tracker.getStageInfo(stage_id)
            if info is None:
                continue
            if stage_id not in self.stage_bars:
                self.stage_bars[stage_id] = self.bars.add_task(f"spark stage {stage_id}", total=info.numTasks,
                                                               rate="")
            self.bars.update(self.stage_bars[stage_id], completed=info.numCompletedTasks)
        for stage_id, bar in self.stage_bars.items():
            if stage_id not in active:  # finished
                self.bars.update(bar, completed=self.bars.tasks[bar].total)
        if self.history_rows:
            done = sum(self.bars.tasks[bar].completed for bar in self.stage_bars.values())
            total = sum(self.bars.tasks[bar].total or 0 for bar in self.stage_bars.values())
            if self.stages_bar is None:
                self.stages_bar = self.bars.add_task("spark stages done", total=None, rate="")
            elapsed_s = time.monotonic() - self.started
            self.bars.update(self.stages_bar, completed=len(self.stage_bars) - len(active), total=len(self.stage_bars),
                             rate=f"{self.history_rows * done / max(total, 1) / elapsed_s:,.0f} rows/s")
