"""A run that ends before a Connect pipeline or a mirror caught up: the missing tail is pending,
reported and allowed, while a record missing below one that arrived is lost (a violation).
Small written histories, checked with Spark (spark_validation/connect.py, spark_validation/mirror.py)."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from faults.connect_workload import (CONNECT_FILE, SINK_FILE, SINK_SCHEMA, SOURCE_FILE, SOURCE_SCHEMA, TOPIC_FILE,
                                     TOPIC_SCHEMA)
from faults.mirror_workload import PROGRESS_SCHEMA
from mirror.history import MIRROR_FILE, PROGRESS_FILE, RECORDS_SCHEMA, TARGET_FILE
from mirror.history import SOURCE_FILE as MIRROR_SOURCE_FILE
from spark_validation.connect import check_connect
from spark_validation.mirror import check_mirror

LINES = 10


def found(anomalies: pa.Table) -> dict[str, tuple[set[int], bool]]:
    return {r["anomaly"]: (set(r["values"]), r["violation"]) for r in anomalies.to_pylist()}


def test_a_connect_pipeline_behind_at_the_end_has_a_pending_tail_and_its_gaps_are_lost(spark, tmp_path):
    (tmp_path / CONNECT_FILE).write_text(json.dumps({"topic": "lines", "exactly_once": True, "kills": [],
                                                     "lines": LINES}))
    in_topic = [v for v in range(7) if v != 3]   # line 3 lost by the source; 7..9 not reached
    in_sink = [v for v in in_topic[:5] if v != 2]  # line 2 lost by the sink; the topic's last record not reached
    pq.write_table(pa.Table.from_pylist([{"value": v, "appended_ms": v} for v in range(LINES)], schema=SOURCE_SCHEMA),
                   tmp_path / SOURCE_FILE)
    pq.write_table(pa.Table.from_pylist([{"partition": 0, "offset": o, "value": v} for o, v in enumerate(in_topic)],
                                        schema=TOPIC_SCHEMA), tmp_path / TOPIC_FILE)
    pq.write_table(pa.Table.from_pylist([{"position": p, "value": v} for p, v in enumerate(in_sink)],
                                        schema=SINK_SCHEMA), tmp_path / SINK_FILE)
    anomalies, verdict = check_connect(spark, tmp_path)
    assert found(anomalies) == {"connect-source-lost": ({3}, True), "connect-source-pending": ({7, 8, 9}, False),
                                "connect-sink-lost": ({2}, True), "connect-sink-pending": ({6}, False)}
    assert verdict["guarantees"]["CON-3"]["status"] == verdict["guarantees"]["CON-1"]["status"] == "violated"
    assert verdict["guarantees"]["CON-2"]["status"] == "held"


def test_a_mirror_behind_at_the_end_has_a_pending_tail_beyond_its_committed_progress(spark, tmp_path):
    (tmp_path / MIRROR_FILE).write_text(json.dumps({"source": "primary", "target": "backup", "exactly_once": True}))
    source = [{"topic": "mirrored", "partition": 0, "offset": o, "value": o, "source_topic": "mirrored"}
              for o in range(LINES)]
    copied = [o for o in range(6) if o != 2]  # offset 2 lost below the progress (5); 6..9 beyond it
    target = [{"topic": "primary.mirrored", "partition": 0, "offset": i, "value": v, "source_topic": "mirrored"}
              for i, v in enumerate(copied)]
    pq.write_table(pa.Table.from_pylist(source, schema=RECORDS_SCHEMA), tmp_path / MIRROR_SOURCE_FILE)
    pq.write_table(pa.Table.from_pylist(target, schema=RECORDS_SCHEMA), tmp_path / TARGET_FILE)
    progress = [{"time_ms": 1, "topic": "mirrored", "partition": 0, "last_copied": 3},
                {"time_ms": 2, "topic": "mirrored", "partition": 0, "last_copied": 5}]
    pq.write_table(pa.Table.from_pylist(progress, schema=PROGRESS_SCHEMA), tmp_path / PROGRESS_FILE)
    anomalies, verdict = check_mirror(spark, tmp_path)
    assert found(anomalies) == {"mirror-lost": ({2}, True), "mirror-pending": ({6, 7, 8, 9}, False)}
    assert verdict["guarantees"]["MIR-1"]["status"] == "violated"

    pq.write_table(PROGRESS_SCHEMA.empty_table(), tmp_path / PROGRESS_FILE)  # a mirror that never committed
    anomalies, verdict = check_mirror(spark, tmp_path)
    assert set(found(anomalies)) == {"mirror-pending"}
    assert verdict["guarantees"]["MIR-1"]["status"] == "not checked"
