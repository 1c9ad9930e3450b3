"""`kspec check RUN` of a lanes run (`kspec faults run --workload all`, faults/lanes.py): every
lane checked as its own history, in one Spark session, and one verdict merged from theirs.

A lane's history is a complete run (the main lane's is RUN itself, the others' RUN/lanes/<lane>),
so each is checked exactly as `kspec check` checks any run (`check_folder`), its outputs going to
RUN/check/lanes/<lane>/. The merged verdict, in RUN/check/, is by guarantee id:

- violated when any lane violated it;
- held when some lane checked it and none violated it;
- not checked only when no lane checked it, with the reason: the lane meant for it was skipped
  (and why), a guarantee no fault run checks (none today: FAULT_RUN_UNCHECKED), or what
  the lanes' own verdicts said. So the acks1 lane's "DUR-1 not checked: acks=1" does not hide
  the main lane's DUR-1.

Each guarantee names the lanes that checked it ("lanes") and those that violated it
("violated_in"); each anomaly row keeps its lane (column "lane"), so the report finds its
evidence in that lane's history.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from faults.connect_workload import CONNECT_DIR
from faults.lanes import LANES_FILE, MAIN
from spark_validation.auth import check_auth, is_auth_history
from spark_validation.checker import CHECKS, CheckResult, Progress, resolve_history, run_checks, write_result
from spark_validation.connect import add_to_verdict as add_connect_to_verdict
from spark_validation.connect import check_connect, is_connect_history
from spark_validation.eos import add_to_verdict as add_eos_to_verdict
from spark_validation.eos import check_eos, is_streams_history
from spark_validation.lag import LAG_SCHEMA
from spark_validation.mirror import is_mirror_history
from spark_validation.mirror_lane import check_mirror_lane
from spec.catalogue import CATALOGUE

LANES_CHECK_DIR = "lanes"         # RUN/check/lanes/<lane>/: each lane's own verdict and anomalies
LANE_COLUMN = "lane"
# guarantees no lane of a fault run checks, and what does: none since the auth and mirror lanes
FAULT_RUN_UNCHECKED: dict[str, str] = {}


def is_lanes_run(path: Path) -> bool:
    return path.is_dir() and (path / LANES_FILE).exists()


def check_folder(history: Path, out_dir: Path, session: Callable[[], SparkSession], checks: tuple[str, ...] = CHECKS,
                 progress: Progress | None = None, on_session: Callable[[SparkSession, Path], None] = lambda s, p: None
                 ) -> CheckResult:
    """What `kspec check` does with one history: the history checks, and EOS-1/2 and CON-1..3 when
    the folder holds a stream processor's (eos.json) or a Connect pipeline's (connect/) output.
    Raises checker.HistoryError for a folder that holds no history."""
    if is_auth_history(history):  # the auth lane: AUTH-1..3 from its probes (spark_validation/auth.py)
        return CheckResult(*check_auth(history), LAG_SCHEMA.empty_table())
    if is_mirror_history(history):  # the mirror lane (faults/lane_mirror.py): MIR-1..3
        return check_mirror_lane(session(), history)
    parquet_path, options = resolve_history(history, out_dir, session)
    spark = session()
    on_session(spark, parquet_path)
    result = run_checks(spark, parquet_path, options, checks, progress=progress)
    if is_streams_history(history):  # `kspec faults run --workload quixstreams`: EOS-1, EOS-2 too
        result = CheckResult(*add_eos_to_verdict(result.anomalies, result.verdict, *check_eos(spark, history)),
                             result.lag)
    if is_connect_history(history / CONNECT_DIR):  # `kspec faults run --workload connect`: CON-1..3 too
        result = CheckResult(*add_connect_to_verdict(result.anomalies, result.verdict,
                                                     *check_connect(spark, history / CONNECT_DIR)), result.lag)
    return result


def check_lanes(run_dir: Path, out_dir: Path, session: Callable[[], SparkSession], checks: tuple[str, ...] = CHECKS,
                progress: Progress | None = None, on_session: Callable[[SparkSession, Path], None] = lambda s, p: None,
                announce: Callable[[str], None] = lambda line: None) -> CheckResult:
    """Check every lane of run_dir (each lane's outputs in out_dir/lanes/<lane>/) and merge."""
    started = time.monotonic()
    lanes = json.loads((run_dir / LANES_FILE).read_text())["lanes"]
    results: dict[str, CheckResult] = {}
    skipped = {name: lane["skipped"] for name, lane in lanes.items() if lane.get("skipped")}
    for name, lane in lanes.items():
        if name in skipped:
            announce(f"lane {name}: skipped in the run ({skipped[name]})")
            continue
        announce(f"lane {name}: {run_dir / lane['dir']}")
        result = check_folder(run_dir / lane["dir"], out_dir / LANES_CHECK_DIR / name, session, checks, progress,
                              on_session)
        write_result(result, out_dir / LANES_CHECK_DIR / name)
        results[name] = result
    verdict = merge({name: r.verdict for name, r in results.items()},
                    {name: lane["checks"] for name, lane in lanes.items()}, skipped)
    verdict["history"] = str(run_dir)
    verdict["seconds"]["total"] = round(time.monotonic() - started, 3)
    anomalies = pa.concat_tables([r.anomalies.append_column(LANE_COLUMN, pa.array([name] * r.anomalies.num_rows,
                                                                                  pa.string()))
                                  for name, r in results.items()])
    lags = [r.lag.append_column(LANE_COLUMN, pa.array([name] * r.lag.num_rows, pa.string()))
            for name, r in results.items()]
    return CheckResult(anomalies, verdict, pa.concat_tables(lags) if lags else LAG_SCHEMA.empty_table())


def merge(verdicts: dict[str, dict], meant_for: dict[str, list[str]], skipped: dict[str, str]) -> dict:
    """One verdict from the lanes' verdicts (see the module docstring). meant_for: lane -> the
    guarantees it runs for; skipped: lane -> why it did not run."""
    guarantees, unchecked = {}, {}
    for guarantee_id in CATALOGUE:
        entries = {lane: v["guarantees"][guarantee_id] for lane, v in verdicts.items()
                   if guarantee_id in v["guarantees"]}
        if entries:
            violated_in = [lane for lane, e in entries.items() if e["status"] == "violated"]
            anomalies: dict[str, int] = {}
            for lane in violated_in:
                for anomaly, n in entries[lane]["anomalies"].items():
                    anomalies[anomaly] = anomalies.get(anomaly, 0) + n
            guarantees[guarantee_id] = {"status": "violated" if violated_in else "held", "anomalies": anomalies,
                                        "lanes": list(entries), "violated_in": violated_in}
            continue
        unchecked[guarantee_id] = _why_unchecked(guarantee_id, verdicts, meant_for, skipped)
    lag = max((v["realtime-lag"]["worst"] | {"lane": lane} for lane, v in verdicts.items() if "realtime-lag" in v),
              key=lambda worst: worst["lag_s"], default={"time_s": 0.0, "lag_s": 0.0})
    merged = {
        "valid": all(v["valid"] for v in verdicts.values()),
        "ops": sum(v["ops"] for v in verdicts.values()),
        "rows": sum(v.get("rows", 0) for v in verdicts.values()),
        "checks": list(dict.fromkeys(c for v in verdicts.values() for c in v["checks"])),
        "anomalies": _summed(v["anomalies"] for v in verdicts.values()),
        "violations": _summed(v["violations"] for v in verdicts.values()),
        "guarantees": guarantees,
        "unchecked": unchecked,
        "seconds": {"lanes": {lane: v["seconds"]["total"] for lane, v in verdicts.items()}},
        "realtime-lag": {"worst": lag, "points": sum(v.get("realtime-lag", {}).get("points", 0)
                                                     for v in verdicts.values())},
        "consume-counts": {
            "distribution": {str(c): n for c, n in sorted(
                (int(c), n) for c, n in _summed(v.get("consume-counts", {}).get("distribution", {})
                                                for v in verdicts.values()).items())},
            "dup-counts": {tp: counts for v in verdicts.values()
                           for tp, counts in v.get("consume-counts", {}).get("dup-counts", {}).items()}},
        "lanes": {lane: {"valid": v["valid"], "ops": v["ops"], "options": v.get("options"),
                         "held": [g for g, e in v["guarantees"].items() if e["status"] == "held"],
                         "violated": [g for g, e in v["guarantees"].items() if e["status"] == "violated"]}
                  for lane, v in verdicts.items()}
        | {lane: {"skipped": why} for lane, why in skipped.items()},
    }
    unlisted = _summed(v.get("unlisted", {}) for v in verdicts.values())
    if unlisted:  # rows a lane counted but left out of its anomalies.parquet (judgement.ROWS_PER_KIND_MAX)
        merged["unlisted"] = unlisted
    for summary in ("eos", "connect", "mirror"):  # the stream processor's and the Connect pipeline's figures
        for v in verdicts.values():
            if summary in v:
                merged[summary] = v[summary]
    return merged


def _why_unchecked(guarantee_id: str, verdicts: dict[str, dict], meant_for: dict[str, list[str]],
                   skipped: dict[str, str]) -> str:
    for lane, why in skipped.items():
        if guarantee_id in meant_for.get(lane, ()):
            return f"the {lane} lane was skipped: {why}"
    if guarantee_id in FAULT_RUN_UNCHECKED:
        return FAULT_RUN_UNCHECKED[guarantee_id]
    reasons = [f"{lane} lane: {v['unchecked'][guarantee_id]}" for lane, v in verdicts.items()
               if guarantee_id in v.get("unchecked", {})]
    return "; ".join(reasons) or "no lane checks it"


def _summed(counts) -> dict:
    total: dict = {}
    for c in counts:
        for k, n in c.items():
            total[k] = total.get(k, 0) + n
    return dict(sorted(total.items()))


def lane_of(anomalies: pa.Table) -> list[str]:
    """Each anomaly row's lane (MAIN for a table without the column: a single run's)."""
    if LANE_COLUMN not in anomalies.column_names:
        return [MAIN] * anomalies.num_rows
    return pc.fill_null(anomalies[LANE_COLUMN], MAIN).to_pylist()
