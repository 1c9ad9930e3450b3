"""The mirror lane of a lanes run (faults/lane_mirror.py) checked as a lane: spark_validation/mirror.py's
findings (MIR-1, MIR-2, MIR-3) in the shape of any lane's verdict, so spark_validation/lanes.py merges
them with the other lanes' by guarantee id.

A guarantee the mirror check did not reach is listed under "unchecked" with the reason: MIR-2 when
the flow ran at least once, MIR-3 when the target held no checkpoint of the group.
"""
from __future__ import annotations

import time
from pathlib import Path

from pyspark.sql import SparkSession

from spark_validation.checker import CheckResult
from spark_validation.lag import LAG_SCHEMA
from spark_validation.mirror import check_mirror

CHECK_NAME = "mirror"
UNCHECKED = {"MIR-2": "the mirror ran at least once (exactly.once.support not enabled): a record copied twice is allowed",
             "MIR-3": "the target held no checkpoint of the lane's group at the end",
             "MIR-1": "the mirror never committed progress while the run lasted (it did not get to copy)"}


def check_mirror_lane(spark: SparkSession, history: Path) -> CheckResult:
    started = time.monotonic()
    anomalies, found = check_mirror(spark, history)
    rows = anomalies.to_pylist()
    counts = {a: n for a, n in found["anomalies"].items() if n}
    violations = {r["anomaly"]: counts[r["anomaly"]] for r in rows if r["violation"]}
    guarantees = {g: {"status": e["status"],
                      "anomalies": {a: n for a, n in violations.items() if any(
                          r["anomaly"] == a and r["guarantee"] == g for r in rows)}}
                  for g, e in found["guarantees"].items() if e["status"] != "not checked"}
    verdict = {
        "valid": not violations,
        "ops": found["records"]["source"],  # the source records the check followed
        "rows": sum(found["records"].values()),
        "checks": [CHECK_NAME],
        "anomalies": counts,
        "violations": violations,
        "guarantees": guarantees,
        "unchecked": {g: UNCHECKED[g] for g, e in found["guarantees"].items() if e["status"] == "not checked"},
        "seconds": {"total": round(time.monotonic() - started, 3)},
        "mirror": {"flow": found["flow"], "records": found["records"]},
    }
    return CheckResult(anomalies, verdict, LAG_SCHEMA.empty_table())
