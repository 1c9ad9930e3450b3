"""A source partition that holds a value at two offsets (spark_validation/mirror.py,
mirror-source-repeats): the lane's idempotent source producer appended a batch whose answer was
lost, then bumped its epoch and sent it again at sequence 0 (librdkafka issue 4953), as in a lanes
fault run where source offsets 411-502 and 503-594 of mirrored-0 held the same 92 values. Those
are two source records each; an exactly-once mirror copying each once holds MIR-1 and MIR-2, a
third copy is still a duplicate and a missing one still lost. Small written histories, checked
with Spark."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from faults.mirror_workload import PROGRESS_SCHEMA
from mirror.history import MIRROR_FILE, PROGRESS_FILE, RECORDS_SCHEMA, SOURCE_FILE, TARGET_FILE
from spark_validation.mirror import check_mirror

# Values 0..9, then 6..9 appended again by the producer's resend, then 10..11.
SOURCE_VALUES = [*range(10), *range(6, 10), 10, 11]
RESENT = {6, 7, 8, 9}


def write_history(folder, copied_values: list[int]) -> None:
    (folder / MIRROR_FILE).write_text(json.dumps({"source": "primary", "target": "backup", "exactly_once": True}))
    source = [{"topic": "mirrored", "partition": 0, "offset": o, "value": v, "source_topic": "mirrored"}
              for o, v in enumerate(SOURCE_VALUES)]
    target = [{"topic": "primary.mirrored", "partition": 0, "offset": 100 + i, "value": v, "source_topic": "mirrored"}
              for i, v in enumerate(copied_values)]
    pq.write_table(pa.Table.from_pylist(source, schema=RECORDS_SCHEMA), folder / SOURCE_FILE)
    pq.write_table(pa.Table.from_pylist(target, schema=RECORDS_SCHEMA), folder / TARGET_FILE)
    progress = [{"time_ms": 1, "topic": "mirrored", "partition": 0, "last_copied": len(SOURCE_VALUES) - 1}]
    pq.write_table(pa.Table.from_pylist(progress, schema=PROGRESS_SCHEMA), folder / PROGRESS_FILE)


def found(anomalies: pa.Table) -> dict[str, dict]:
    return {r["anomaly"]: r for r in anomalies.to_pylist()}


def test_a_value_the_source_holds_twice_copied_once_per_source_record_holds_mir_1_and_mir_2(spark, tmp_path):
    write_history(tmp_path, SOURCE_VALUES)  # each source offset copied once, in source order
    anomalies, verdict = check_mirror(spark, tmp_path)
    rows = found(anomalies)
    assert set(rows) == {"mirror-source-repeats"}
    repeats = rows["mirror-source-repeats"]
    assert repeats["violation"] is False and repeats["guarantee"] is None
    assert repeats["offsets"] == [6, 7, 8, 9, 10, 11, 12, 13] and set(repeats["values"]) == RESENT
    assert verdict["valid"] and verdict["guarantees"]["MIR-1"]["status"] == "held"
    assert verdict["guarantees"]["MIR-2"]["status"] == "held"


def test_a_third_copy_of_a_value_the_source_holds_twice_is_a_duplicate(spark, tmp_path):
    write_history(tmp_path, [*SOURCE_VALUES, 7])  # the copy of offset 7 or 11 made again
    rows = found(check_mirror(spark, tmp_path)[0])
    assert rows["mirror-duplicate"]["values"] == [7] and rows["mirror-duplicate"]["violation"] is True
    assert "mirror-reorder" not in rows and "mirror-lost" not in rows


def test_a_value_the_source_holds_twice_copied_once_has_one_source_record_lost(spark, tmp_path):
    copied = SOURCE_VALUES[:11] + SOURCE_VALUES[12:]  # the resent 7 (source offset 11) never copied
    write_history(tmp_path, copied)
    anomalies, verdict = check_mirror(spark, tmp_path)
    rows = found(anomalies)
    assert rows["mirror-lost"]["values"] == [7] and rows["mirror-lost"]["violation"] is True
    assert "mirror-duplicate" not in rows
    assert verdict["guarantees"]["MIR-1"]["status"] == "violated"
