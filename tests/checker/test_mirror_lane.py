"""A lanes run's mirror lane (faults/lane_mirror.py) checked as a lane (spark_validation/mirror_lane.py):
`kspec check` dispatches a lane folder holding a mirror's history to the mirror check, and its
findings merge with the other lanes' by guarantee id. Here on a small written history of a
self-mirrored topic (mirrored -> primary.mirrored) with one record copied twice by an exactly-once
mirror; tests/faults/test_faults_lane_mirror.py runs a real mirror."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from mirror.history import MIRROR_FILE, RECORDS_SCHEMA, SOURCE_FILE, TARGET_FILE
from spark_validation.lanes import check_folder, merge
from spark_validation.mirror_lane import UNCHECKED
from tests.checker.test_lanes_merge import verdict as lane_verdict

RECORDS = 10
TWICE = 4


def write_history(folder, exactly_once: bool) -> None:
    folder.mkdir(parents=True)
    source = [{"topic": "mirrored", "partition": 0, "offset": o, "value": o, "source_topic": "mirrored"}
              for o in range(RECORDS)]
    copies = [*range(RECORDS), TWICE]  # the mirror killed after copying TWICE, before its progress was written
    target = [{"topic": "primary.mirrored", "partition": 0, "offset": o, "value": v, "source_topic": "mirrored"}
              for o, v in enumerate(copies)]
    pq.write_table(pa.Table.from_pylist(source, schema=RECORDS_SCHEMA), folder / SOURCE_FILE)
    pq.write_table(pa.Table.from_pylist(target, schema=RECORDS_SCHEMA), folder / TARGET_FILE)
    (folder / MIRROR_FILE).write_text(json.dumps({"source": "primary", "target": "backup",
                                                  "exactly_once": exactly_once}))


def test_a_record_copied_twice_by_an_exactly_once_mirror_lane_violates_mir_2_in_the_merged_verdict(spark, tmp_path):
    write_history(tmp_path / "mirror", exactly_once=True)
    result = check_folder(tmp_path / "mirror", tmp_path / "check", lambda: spark)
    v = result.verdict
    assert v["guarantees"] == {"MIR-1": {"status": "held", "anomalies": {}},
                               "MIR-2": {"status": "violated", "anomalies": {"mirror-duplicate": 1}}}
    assert v["unchecked"] == {"MIR-3": UNCHECKED["MIR-3"]} and v["valid"] is False and v["ops"] == RECORDS
    (row,) = result.anomalies.to_pylist()
    assert (row["anomaly"], row["values"], row["violation"]) == ("mirror-duplicate", [TWICE], True)

    merged = merge({"main": lane_verdict(held=["ORD-1"]), "mirror": v},
                   {"main": ["ORD-1"], "mirror": ["MIR-1", "MIR-2", "MIR-3"]}, {})
    assert merged["guarantees"]["MIR-2"] == {"status": "violated", "anomalies": {"mirror-duplicate": 1},
                                             "lanes": ["mirror"], "violated_in": ["mirror"]}
    assert merged["unchecked"]["MIR-3"] == f"mirror lane: {UNCHECKED['MIR-3']}"
    assert merged["valid"] is False and merged["mirror"]["flow"] == "primary->backup"


def test_an_at_least_once_mirror_lane_reports_the_copy_twice_as_allowed(spark, tmp_path):
    write_history(tmp_path / "mirror", exactly_once=False)
    v = check_folder(tmp_path / "mirror", tmp_path / "check", lambda: spark).verdict
    assert v["valid"] and v["anomalies"] == {"mirror-duplicate": 1} and v["violations"] == {}
    assert set(v["guarantees"]) == {"MIR-1"} and set(v["unchecked"]) == {"MIR-2", "MIR-3"}
