"""Run the checks on one history and produce anomaly rows and a verdict by guarantee id.

Input is a kspec history (a folder with history.parquet and optional run.json, or a
Parquet file) or a Jepsen history.edn (imported to Parquet first). Output is
anomalies.parquet (ANOMALY_SCHEMA), realtime-lag.parquet (lag.LAG_SCHEMA) and
verdict.json in the output folder: the verdict is valid only when no anomaly violates a
guarantee. The per-partition checks' rows are judged in the Spark pass (judgement.py); the
verdict counts every anomaly, and anomalies.parquet lists the first ROWS_PER_KIND_MAX of each
(verdict "unlisted": how many it left out), so the driver holds no more for a longer history. Jepsen's informational outputs ride along in the same pass and never make a
history invalid: the worst realtime lag and the consume counts are in the verdict.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_validation import (acks, cycle_search, cycles, durability, epoch_bumps, groups, hanging, isolation, offsets,
                              ordering, power_loss, realtime, replicas, resends, retention)
from spark_validation.judgement import (COUNTED, COUNTS_SCHEMA, LISTED, ROWS_PER_KIND_MAX, PartitionJudge, Windows,
                                        explain_allowed, listed_rows, listing_budget)
from spark_validation.consume_counts import CONSUME_SCHEMA, DUP_COUNTS_MAX, consume_counts
from spark_validation.lag import LAG_FILE, LAG_SCHEMA, realtime_lag
from spark_validation.anomalies import ANOMALY_KINDS, ANOMALY_SCHEMA, ROW_SCHEMA
from spark_validation.frames import (BUILD, JUDGED, HistoryFrames, RowGroupReader, history_files, read_filtered,
                                     read_ipc, row_groups)
from spark_validation.partition_log import PartitionLog
from spark_validation.linearizability import NONLINEARIZABLE_CAUSES
from spark_validation.jepsen import JepsenError
from spark_validation.options import SUB_VIA, RunOptions
from spark_validation.session import spark_session
from spec.history import ASSIGNMENT_FS, HISTORY_SCHEMA

HISTORY_FILE = "history.parquet"
OPTIONS_FILE = "run.json"
ANOMALIES_FILE = "anomalies.parquet"
VERDICT_FILE = "verdict.json"

# check name -> the per-partition check returning anomaly rows; each is one family of anomalies
PARTITION_CHECKS = {
    "inconsistent-offsets": offsets.inconsistent_offsets,
    "duplicate": offsets.duplicate,
    "lost-write": durability.lost_write,
    "unseen": durability.unseen,
    "phantom-read": durability.phantom_read,
    "G1a": isolation.g1a,
    "precommitted-read": isolation.precommitted_read,
    "G1b": isolation.g1b,
    "poll-order": ordering.poll_order,
    "internal-poll-order": ordering.internal_poll_order,
    "send-order": ordering.send_order,
    "internal-send-order": ordering.internal_send_order,
    "realtime-order": realtime.realtime_order,
    "future-read": realtime.future_read,
}
DRIVER_CHECKS = ("linearizability", "cycles", "replicas")
# check name -> a module of driver-side checks of the few ops they read (pyarrow): check(path, options)
# gives anomaly rows, or None when the history has nothing it checks (then its GUARANTEES stay
# unchecked, NOT_APPLICABLE saying why); its rows name its ANOMALIES
RUN_CHECKS = {"groups": groups, "acks": acks, "retention": retention, "power": power_loss,
              "hanging": hanging}
CHECKS = (*PARTITION_CHECKS, *DRIVER_CHECKS, *RUN_CHECKS)
EDGES = "dependency-edges"  # the per-partition part of the cycle search
# informational outputs, computed in every pass: name -> (per-partition job, its table's schema)
OUTPUTS = {"realtime-lag": (realtime_lag, LAG_SCHEMA), "consume-counts": (consume_counts, CONSUME_SCHEMA)}


class HistoryError(ValueError):
    """The input is not a history the checker can read; the message says how to fix it."""


@dataclass(frozen=True)
class CheckResult:
    anomalies: pa.Table
    verdict: dict
    lag: pa.Table            # LAG_SCHEMA

    @property
    def valid(self) -> bool:
        return self.verdict["valid"]


Progress = Callable[[str, int, int, int, float], None]  # check, position, total, rows, seconds


def resolve_history(path: Path, work_dir: Path,
                    session: Callable[[], SparkSession] = spark_session) -> tuple[Path, RunOptions]:
    """The Parquet file (or folder of parts) of a history and its run options. A Jepsen .edn is
    imported with Spark (session) into work_dir/history.parquet, or taken from there when it
    already holds this file."""
    if not path.exists():
        raise HistoryError(f"{path} does not exist; pass a kspec history folder, a .parquet file or a history.edn")
    options_path = None
    if path.is_dir():
        options_path = path / OPTIONS_FILE
        path = path / HISTORY_FILE
        if not path.exists():
            raise HistoryError(f"{path.parent} has no {HISTORY_FILE}; pass the folder a kspec run wrote")
    elif path.suffix == ".edn":
        from spark_validation.jepsen_import import import_edn
        try:
            path = import_edn(session(), path, work_dir / HISTORY_FILE)
        except JepsenError as e:
            raise HistoryError(f"{path}, line {e.line}: {e.problem}") from None
    elif path.suffix == ".parquet":
        options_path = path.with_name(OPTIONS_FILE)
    else:
        raise HistoryError(f"{path}: expected a folder, a .parquet file or a Jepsen .edn file")
    files = history_files(path)
    if not files:
        raise HistoryError(f"{path} holds no ops; pass a history with at least one op")
    try:
        schemas = [pq.read_schema(file) for file in files]
    except (OSError, pa.ArrowInvalid) as e:
        raise HistoryError(f"{path} is not readable Parquet ({e}); pass a history written by spec.history") from None
    missing = [name for name in HISTORY_SCHEMA.names if any(name not in schema.names for schema in schemas)]
    if missing:
        raise HistoryError(f"{path} lacks history column(s) {', '.join(missing)}; see spec/history.py")
    if options_path is not None and options_path.exists():
        try:
            return path, RunOptions.from_json(options_path)
        except (ValueError, json.JSONDecodeError) as e:
            raise HistoryError(f"{options_path}: {e}") from None
    return path, infer_options(path)


def infer_options(path: Path) -> RunOptions:
    """Options implied by the history: the assignment modes its consumers used (read one row group at a time)."""
    assignments = read_filtered(path, ["f"], lambda rows: pc.is_in(rows["f"], pa.array(ASSIGNMENT_FS)))
    used = set(pc.unique(assignments["f"]).to_pylist()) if assignments is not None else set()
    return RunOptions(sub_via=frozenset(used & set(SUB_VIA)) or frozenset({"assign"}))


def run_checks(spark: SparkSession, parquet_path: Path, options: RunOptions, checks: tuple[str, ...] = CHECKS,
               progress: Progress | None = None, rows_per_kind_max: int = ROWS_PER_KIND_MAX) -> CheckResult:
    """Every check asked for on one history. The verdict counts every anomaly; anomalies lists at most
    rows_per_kind_max rows of each (judgement.py), the verdict's "unlisted" counting the rest."""
    unknown = set(checks) - set(CHECKS)
    assert not unknown, f"unknown checks {unknown}"
    started = time.monotonic()
    partition_checks = [c for c in PARTITION_CHECKS if c in checks
                        or ("linearizability" in checks and c in NONLINEARIZABLE_CAUSES)]
    plan = partition_checks + [c for c in DRIVER_CHECKS if c in checks]
    run_found, run_seconds = {}, {}
    for check in (c for c in RUN_CHECKS if c in checks):
        t0 = time.monotonic()
        run_found[check] = RUN_CHECKS[check].check(parquet_path, options)
        run_seconds[check] = round(time.monotonic() - t0, 3)
    plan += [c for c, found in run_found.items() if found is not None]
    windows = [r for found in run_found.values() for r in found or ()]
    jobs = {c: _as_table(PARTITION_CHECKS[c], options) for c in partition_checks}
    if "cycles" in checks:
        jobs[EDGES] = cycles.dependency_edges
    jobs.update({name: job for name, (job, _) in OUTPUTS.items()})
    judge = PartitionJudge(tuple(partition_checks), frozenset(checks), options, str(parquet_path),
                           Windows.of(windows), rows_per_kind_max)
    h = HistoryFrames(spark, str(parquet_path.resolve()), int(spark.conf.get("spark.sql.shuffle.partitions")))
    results = h.per_partition(jobs, h.proven_ops(), judge)
    edge_blobs = results.where(F.col("check") == EDGES)  # searched in Spark: they grow with the history
    # the judged rows stay in Spark too, until the listing takes its few (judgement.listed_rows)
    collected = results.select("check", "seconds", F.when(~F.col("check").isin(EDGES, LISTED), F.col("rows"))
                               .alias("rows")).toArrow()
    h.unpersist()
    pass_s = time.monotonic() - started
    found = _by_check(collected)
    outputs = {name: pa.concat_tables(found.pop(name, []) or [schema.empty_table()]).combine_chunks()
               for name, (_, schema) in OUTPUTS.items()}
    counted = pa.concat_tables(found.pop(COUNTED, []) or [COUNTS_SCHEMA.empty_table()])
    worker_seconds = {check: sum(_seconds(collected, check)) for check in (*jobs, BUILD, JUDGED)}
    del collected  # the payloads: only the decoded tables are needed now
    seconds = {"partition-pass": round(pass_s, 3), BUILD: round(worker_seconds[BUILD], 3),
               JUDGED: round(worker_seconds[JUDGED], 3),
               **{name: round(worker_seconds[name], 3) for name in OUTPUTS}}
    t0 = time.monotonic()
    listed = listed_rows(results, listing_budget(counted, plan, rows_per_kind_max), plan)
    seconds["listing"] = round(time.monotonic() - t0, 3)
    found_by_check = Counter()
    for check, n in zip(counted["check"].to_pylist(), counted["rows"].to_pylist()):
        found_by_check[check] += n
    cycles_counted: dict[tuple[str, bool], int] = {}
    driver_rows: list[dict] = []  # the cycles', the replica audit's and the run checks' rows, as planned
    unchecked: dict[str, str] = {}
    for position, check in enumerate(plan, 1):
        t0 = time.monotonic()
        rows_found: list[dict] = []
        if check in PARTITION_CHECKS or check == "linearizability":  # found and judged in the pass
            seconds[check] = round(worker_seconds.get(check, 0.0), 3)
        elif check in RUN_CHECKS:
            rows_found = run_found[check]
            seconds[check] = run_seconds[check]
        elif check == "replicas":  # the replica audit, leader epochs, malformed traffic (spark_validation/replicas.py)
            rows_found, unchecked = replicas.check(parquet_path, options.compacted)
            seconds[check] = round(time.monotonic() - t0, 3)
        else:
            rows_found, cycles_counted = cycle_search.search(spark, edge_blobs, parquet_path, options)
            seconds[check] = round(time.monotonic() - t0 + worker_seconds[EDGES], 3)
        driver_rows.extend(rows_found)
        if progress:
            progress(check, position, len(plan), found_by_check[check] + len(rows_found), seconds[check])
    results.unpersist()
    explain_allowed(driver_rows, windows, options)
    counts = Counter()
    for anomaly, violation, n in zip(*(counted[c].to_pylist() for c in ("anomaly", "violation", "rows"))):
        counts[(anomaly, violation)] += n
    counts.update((r["anomaly"], r["violation"]) for r in driver_rows)
    # cycles found beyond the rows the search listed (cycle_search.CYCLE_ROWS_MAX) count too
    cycles_listed = Counter((r["anomaly"], r["violation"]) for r in driver_rows)
    for key, n in cycles_counted.items():
        counts[key] += max(n - cycles_listed[key], 0)
    listed += _first_of_each_kind(driver_rows, rows_per_kind_max, Counter(r["anomaly"] for r in listed))
    for r in listed:
        r["guarantee"] = ANOMALY_KINDS[r["anomaly"]].guarantee_id
    table = pa.Table.from_pylist(listed, schema=ANOMALY_SCHEMA)
    reported = [c for c in plan if c in checks]
    verdict = _verdict(parquet_path, options, reported, counts, table, seconds, time.monotonic() - started)
    # a guarantee the history holds nothing to check is not held but unchecked, and the verdict says why
    for guarantee_id in unchecked:
        if verdict["guarantees"].get(guarantee_id, {}).get("status") == "held":
            del verdict["guarantees"][guarantee_id]
    verdict["unchecked"] = {g: RUN_CHECKS[c].NOT_APPLICABLE for c, found in run_found.items() if found is None
                            for g in RUN_CHECKS[c].GUARANTEES if g not in verdict["guarantees"]}
    verdict["unchecked"].update(unchecked)
    if options.acks == "1" and verdict["guarantees"].pop("DUR-1", None) is not None:
        verdict["unchecked"]["DUR-1"] = acks.DUR_1_UNCHECKED
    verdict["realtime-lag"] = _worst_lag(outputs["realtime-lag"])
    verdict["consume-counts"] = _consume_counts(outputs["consume-counts"])
    return CheckResult(table, verdict, outputs["realtime-lag"])


def _first_of_each_kind(rows: list[dict], rows_per_kind_max: int, listed: Counter) -> list[dict]:
    """The rows the listing keeps, in order: of each anomaly, the first until rows_per_kind_max are
    listed (listed: how many of each the listing holds already)."""
    kept = []
    for r in rows:
        if listed[r["anomaly"]] < rows_per_kind_max:
            listed[r["anomaly"]] += 1
            kept.append(r)
    return kept


def _worst_lag(lag: pa.Table) -> dict:
    """Jepsen's worst-realtime-lag: the poll with the highest lag (seconds), or lag 0."""
    if lag.num_rows == 0:
        return {"worst": {"time_s": 0.0, "lag_s": 0.0}, "points": 0}
    row = lag.slice(pc.index(lag["lag_ns"], pc.max(lag["lag_ns"])).as_py(), 1).to_pylist()[0]
    return {"worst": {"time_s": row["time_ns"] / 1e9, "lag_s": row["lag_ns"] / 1e9, "process": row["process"],
                      "topic": row["topic"], "partition": row["partition"]}, "points": lag.num_rows}


def _consume_counts(counts: pa.Table) -> dict:
    """Jepsen's consume-counts: {distribution: {count: triples}, dup-counts: {topic-partition: {value: count}}}."""
    distribution: dict[int, int] = {}
    dup_counts: dict[str, dict[int, int]] = {}
    for r in counts.sort_by([("topic", "ascending"), ("partition", "ascending"), ("value", "ascending")]).to_pylist():
        if r["value"] is None:
            distribution[r["count"]] = distribution.get(r["count"], 0) + r["triples"]
        elif sum(map(len, dup_counts.values())) < DUP_COUNTS_MAX:
            dup_counts.setdefault(f"{r['topic']}-{r['partition']}", {})[r["value"]] = r["count"]
    return {"distribution": {str(c): n for c, n in sorted(distribution.items())}, "dup-counts": dup_counts}


def _as_table(check: Callable[[PartitionLog, RunOptions], list[dict]], options: RunOptions):
    def rows(p: PartitionLog) -> pa.Table:
        return pa.Table.from_pylist(check(p, options), schema=ROW_SCHEMA)
    return rows


def _by_check(results: pa.Table) -> dict[str, list[pa.Table]]:
    """The tables the pass gave back, by check (the dependency edges and listed rows stayed in Spark)."""
    found: dict[str, list[pa.Table]] = {}
    for check, payload in zip(results.column("check").to_pylist(), results.column("rows")):
        if not payload.is_valid or not payload.as_py():  # the edges, and checks whose rows were judged
            continue
        table = read_ipc(payload.as_buffer())
        if table.num_rows:
            found.setdefault(check, []).append(table)
    return found


def _seconds(results: pa.Table, check: str) -> list[float]:
    return [s for c, s in zip(results.column("check").to_pylist(), results.column("seconds").to_pylist())
            if c == check]


def _completions(parquet_path: Path) -> int:
    """The history's ops (completions), counted one row group at a time: the driver never holds
    a whole column of a long history."""
    history = RowGroupReader(["type"])
    count = 0
    for file, group in row_groups(parquet_path):
        rows = history.read(file, group, ["seq", "type"])
        count += pc.sum(pc.and_(pc.equal(rows["seq"], 0), pc.not_equal(rows["type"], "invoke"))).as_py() or 0
    return count


def history_rows(parquet_path: Path) -> int:
    """The history's rows, from the Parquet footers."""
    return sum(pq.ParquetFile(file).metadata.num_rows for file in history_files(parquet_path))


def _verdict(parquet_path: Path, options: RunOptions, plan: list[str], counts: Counter, table: pa.Table,
             seconds: dict[str, float], total_s: float) -> dict:
    """counts: every anomaly found, by (anomaly, violation); table: the rows listed (those not are "unlisted")."""
    listed = Counter(table["anomaly"].to_pylist())
    kinds = list(dict.fromkeys([*listed, *sorted(a for a, _ in counts)]))  # in the listing's order
    anomalies = {a: sum(counts[(a, v)] for v in (False, True)) for a in kinds}
    violations = {a: counts[(a, True)] for a in kinds if counts[(a, True)]}
    by_guarantee: dict[str, dict] = {}
    for anomaly, n in violations.items():
        entry = by_guarantee.setdefault(ANOMALY_KINDS[anomaly].guarantee_id, {"status": "violated", "anomalies": {}})
        entry["anomalies"][anomaly] = n
    for kind in ANOMALY_KINDS.values():
        if kind.guarantee_id and kind.guarantee_id not in by_guarantee and _checked(kind.name, plan):
            by_guarantee[kind.guarantee_id] = {"status": "held", "anomalies": {}}
    verdict = {
        "valid": not violations,
        "history": str(parquet_path),
        "ops": _completions(parquet_path),
        "rows": history_rows(parquet_path),
        "options": options.to_json(),
        "checks": plan,
        "anomalies": {a: n for a, n in anomalies.items() if n},
        "violations": violations,
        "guarantees": dict(sorted(by_guarantee.items())),
        "seconds": {**seconds, "total": round(total_s, 3)},
    }
    unlisted = {a: n - listed[a] for a, n in anomalies.items() if n > listed[a]}
    if unlisted:  # beyond ROWS_PER_KIND_MAX rows of a kind, or cycle_search.CYCLE_ROWS_MAX cycles
        verdict["unlisted"] = unlisted
    return verdict


FAMILY_OF = {
    "inconsistent-offsets": "inconsistent-offsets", "duplicate": "duplicate",
    resends.ANOMALY: "duplicate", epoch_bumps.ANOMALY: "duplicate", "lost-write": "lost-write",
    "unseen": "unseen", "phantom-read": "phantom-read", "G1a": "G1a", "precommitted-read": "precommitted-read",
    "G1b": "G1b", "poll-skip": "poll-order", "nonmonotonic-poll": "poll-order",
    "int-poll-skip": "internal-poll-order", "int-nonmonotonic-poll": "internal-poll-order",
    "nonmonotonic-send": "send-order", "send-skip": "send-order", "int-send-skip": "internal-send-order",
    "int-nonmonotonic-send": "internal-send-order", "realtime-order": "realtime-order",
    "future-read": "future-read", "nonlinearizable": "linearizability",
    **{anomaly: name for name, module in RUN_CHECKS.items() for anomaly in module.ANOMALIES},
    **{kind: "replicas" for kind in ("replica-divergence", "replica-read-mismatch", "epoch-regression",
                                     "epoch-two-leaders", "stored-unsent", "malformed-crash")},
}


def _checked(anomaly: str, plan: list[str]) -> bool:
    return FAMILY_OF.get(anomaly, "cycles") in plan


def write_result(result: CheckResult, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(result.anomalies, out_dir / ANOMALIES_FILE)
    pq.write_table(result.lag, out_dir / LAG_FILE)
    (out_dir / VERDICT_FILE).write_text(json.dumps(result.verdict, indent=2) + "\n")


assert set(FAMILY_OF.values()) <= set(CHECKS)