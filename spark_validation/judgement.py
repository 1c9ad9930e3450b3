"""Judge the per-partition anomaly rows where they are found, and bring back counts and a bounded listing.

A broken broker's long history can give millions of anomaly rows (every poll skipping, every
value duplicated): the driver must not hold them. So the rows of the per-partition checks are
judged one topic-partition at a time in the Spark pass (frames.HistoryFrames.per_partition calls
PartitionJudge after the checks), in this order:

1. resends (resends.py): a duplicate that an application's resend after a client timeout, or a
   client's resend after a producer epoch bump (epoch_bumps.py), explains is allowed (IDM-1), and
   so are the order rows that follow from it; the partition's own send mops show the resends.
2. linearizability (linearizability.py): one `nonlinearizable` row when the partition has a
   violation among NONLINEARIZABLE_CAUSES (judged again without the duplicates step 1 allowed).
   Rows of checks that ran only to decide this are then dropped, unless they were asked for.
3. the run checks' windows (explain_allowed): rows that an acks=1 window loss (acks.py), compaction
   (retention.py), a power-loss window (power_loss.py) or a hanging transaction (hanging.py)
   explain are allowed. Those checks ran in the driver before the pass; their rows are few, and
   each partition gets those of its own topic-partition (Windows).

Each partition then gives the exact count of its rows by (check, anomaly, violation) (COUNTS_SCHEMA)
and the first ROWS_PER_KIND_MAX rows of each anomaly (LISTED_SCHEMA). The driver adds up the
counts and takes, per anomaly, the first ROWS_PER_KIND_MAX rows in the listing's order (by check as
planned, topic, partition, then the order the check gave them): `listing_budget` says how many
from each partition, `listed_rows` fetches exactly those. So what reaches the driver is bounded
by the number of partitions and anomaly kinds, never by the history's length, and the listing is
the same whatever order Spark's tasks ran in. The driver judges its own few rows (cycles, the
replica audit, the run checks) with the same explain_allowed.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_validation import acks, hanging, power_loss, resends, retention
from spark_validation.anomalies import ROW_SCHEMA
from spark_validation.frames import read_ipc, to_ipc
from spark_validation.linearizability import nonlinearizable_rows
from spark_validation.options import RunOptions
from spark_validation.partition_log import PartitionLog

ROWS_PER_KIND_MAX = 10_000  # rows of one anomaly listed in anomalies.parquet; the verdict counts them all
COUNTED, LISTED = "anomaly-counts", "anomaly-rows"  # what the pass keeps of each partition's rows
LINEARIZABILITY = "linearizability"
COUNTS_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("check", pa.string()),
                           ("anomaly", pa.string()), ("violation", pa.bool_()), ("rows", pa.int64())])
# a listed row: the check that found it and its position among that check's rows of its partition
LISTED_SCHEMA = ROW_SCHEMA.append(pa.field("check", pa.string())).append(pa.field("position", pa.int64()))
WINDOW_KINDS = ("acks1-window-loss", *power_loss.ANOMALIES, *hanging.ANOMALIES)


def explain_allowed(rows: list[dict], windows: list[dict], options: RunOptions) -> None:
    """Allow the rows that the run checks' windows (rows among windows) or the run's options explain."""
    if options.acks == "1":
        acks.explain(rows, windows)
    if options.compacted:
        retention.explain(rows)
    power_loss.explain(rows, windows)
    hanging.explain(rows, windows)


@dataclass(frozen=True)
class Windows:
    """The run checks' rows that explain other rows (WINDOW_KINDS), by topic-partition."""
    by_partition: dict[tuple[str, int], list[dict]] = field(default_factory=dict)

    @classmethod
    def of(cls, rows: list[dict]) -> "Windows":
        by_partition: dict[tuple[str, int], list[dict]] = {}
        for r in rows:
            if r["anomaly"] in WINDOW_KINDS and r["topic"] is not None:
                by_partition.setdefault((r["topic"], r["partition"]), []).append(r)
        return cls(by_partition)

    def of_partition(self, topic: str, partition: int) -> list[dict]:
        return self.by_partition.get((topic, partition), [])


@dataclass(frozen=True)
class PartitionJudge:
    """Judges one topic-partition's rows of the per-partition checks (see the module docstring).
    checks: the per-partition checks that ran, as planned; asked: the checks asked for."""
    checks: tuple[str, ...]
    asked: frozenset[str]
    options: RunOptions
    history_path: str
    windows: Windows
    rows_per_kind_max: int = ROWS_PER_KIND_MAX

    def __call__(self, p: PartitionLog, tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
        """The counts and the listed rows in place of the checks' tables (the other tables pass through)."""
        rows = [{**r, "check": check, "position": position} for check in self.checks
                for position, r in enumerate(tables[check].to_pylist())]
        explained_resends = resends.explain(rows, p, Path(self.history_path))
        if LINEARIZABILITY in self.asked:
            causes = [r for r in rows if r["violation"]] if explained_resends else rows
            rows += [{**r, "check": LINEARIZABILITY, "position": 0} for r in nonlinearizable_rows(causes)]
        rows = [r for r in rows if r["check"] in self.asked]  # causes found only to decide linearizability
        explain_allowed(rows, self.windows.of_partition(p.topic, p.partition), self.options)
        counts = Counter((r["check"], r["anomaly"], r["violation"]) for r in rows)
        listed, per_kind = [], Counter()
        for r in rows:  # in listing order: by check, then as the check gave them
            per_kind[r["anomaly"]] += 1
            if per_kind[r["anomaly"]] <= self.rows_per_kind_max:
                listed.append(r)
        counted = pa.table({"topic": [p.topic] * len(counts), "partition": [p.partition] * len(counts),
                            "check": [c for c, _, _ in counts], "anomaly": [a for _, a, _ in counts],
                            "violation": [v for _, _, v in counts], "rows": list(counts.values())},
                           schema=COUNTS_SCHEMA)
        return {**{name: t for name, t in tables.items() if name not in self.checks},
                COUNTED: counted, LISTED: pa.Table.from_pylist(listed, schema=LISTED_SCHEMA)}


def listing_budget(counts: pa.Table, plan: list[str], rows_per_kind_max: int) -> dict[tuple, int]:
    """How many rows of each (anomaly, check, topic, partition) the listing takes: per anomaly the
    first rows_per_kind_max in listing order (check as planned, topic, partition)."""
    found = Counter()
    for r in counts.to_pylist():
        found[(r["anomaly"], r["check"], r["topic"], r["partition"])] += r["rows"]
    budget, left = {}, Counter()
    for key in sorted(found, key=lambda k: (k[0], plan.index(k[1]), k[2], k[3])):
        taken = min(found[key], rows_per_kind_max - left[key[0]])
        if taken > 0:
            budget[key] = taken
            left[key[0]] += taken
    return budget


def listed_rows(results: DataFrame, budget: dict[tuple, int], plan: list[str]) -> list[dict]:
    """The rows budget names, fetched from the pass's cached results, in listing order."""
    if not budget:
        return []

    def take(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for payload in batch.column("rows").to_pylist():
                taken, rows = Counter(), []
                for r in read_ipc(payload).to_pylist():
                    key = (r["anomaly"], r["check"], r["topic"], r["partition"])
                    taken[key] += 1
                    if taken[key] <= budget.get(key, 0):
                        rows.append(r)
                if rows:
                    yield pa.RecordBatch.from_pydict({"rows": [to_ipc(pa.Table.from_pylist(rows, LISTED_SCHEMA))]})

    found = results.where(F.col("check") == LISTED).select("rows").mapInArrow(take, "rows binary").toArrow()
    rows = [r for payload in found.column("rows") for r in read_ipc(payload.as_buffer()).to_pylist()]
    return sorted(rows, key=lambda r: (plan.index(r["check"]), r["topic"], r["partition"], r["position"]))
