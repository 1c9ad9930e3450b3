"""Compaction (RET-1) in a run with cleanup.policy=compact (run.json topic_config).

The workload's records repeat Kafka keys: (key, value % COMPACTION_KEYS), and tombstones
(faults/compaction.py) delete some. The final reads (the last process's polls, tombstones in
their extra) are compared with the acknowledged writes:

- compaction-lost-latest: the latest acknowledged record of a Kafka key (the highest offset
  among its values and tombstones) is a value the final reads did not return at its offset,
  and they returned no later record of that key (a write whose acknowledgement was lost may
  have superseded it).
- compaction-offset-reuse: the final reads returned, at an offset, another value than the one
  acknowledged there, or offsets not strictly increasing (reordered or reused).
- tombstone-removed-early: a key's latest record is a tombstone the final reads did not see,
  though they ran before delete.retention.ms had passed since its acknowledgement.

Compaction removes offsets and the older values of a key, so in such a run the per-partition
poll-skip, lost-write and unseen rows are kept only as allowed (explain); the latest values
are what must survive, and this check looks at them. Not applicable (None) without compaction.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from spark_validation.anomalies import anomaly_row
from spark_validation.frames import read_filtered
from spark_validation.options import RunOptions

GUARANTEES = ("RET-1",)
NOT_APPLICABLE = "no compacted topics: a run with --topic-config cleanup.policy=compact checks it"
ANOMALIES = ("compaction-lost-latest", "compaction-offset-reuse", "tombstone-removed-early")
COMPACTION_KEYS = 4         # faults/workload.py: a record's sub-key is value % COMPACTION_KEYS
DELETE_RETENTION_MS_DEFAULT = 24 * 3600 * 1000
NS_PER_MS = 1_000_000


def explain(rows: list[dict]) -> None:
    """In a compacted run: the skips and missing values compaction makes are allowed, detail saying so."""
    for r in rows:
        if r["anomaly"] in ("lost-write", "unseen", "poll-skip", "int-poll-skip"):
            r["violation"], r["detail"] = False, f"compaction removes records, judged under RET-1: {r['detail']}"


def _read(parquet_path: Path, keep) -> list[dict]:
    columns = ["index", "seq", "process", "type", "f", "time_ns", "mop_f", "topic", "partition", "key", "value",
               "offset", "extra"]
    return read_filtered(parquet_path, columns, keep).to_pylist()


def check(parquet_path: Path, options: RunOptions) -> list[dict] | None:
    if not options.compacted:
        return None
    delete_retention_ms = int(dict(options.topic_config).get("delete.retention.ms", DELETE_RETENTION_MS_DEFAULT))
    rows = _read(parquet_path, lambda t: pc.and_(pc.not_equal(t["type"], "invoke"), pc.or_(
        pc.equal(t["f"], "tombstone"), pc.is_in(t["mop_f"], pa.array(["send", "poll"])))))
    # the final reads are the workload's last polls (f "poll"); the replica audit's reads ("replica-read") are not
    final_reader = max((r["process"] for r in rows if r["f"] == "poll"), default=None)
    final_polls = [r for r in rows if r["process"] == final_reader and r["f"] == "poll" and r["type"] == "ok"]
    if not final_polls:
        return [anomaly_row("compaction-lost-latest", "no final reads: the compacted logs could not be checked")]
    final_read_ns = min(r["time_ns"] for r in final_polls)
    read_at = defaultdict(dict)       # (topic, partition) -> offset -> value (None: tombstone)
    order = defaultdict(list)         # (topic, partition) -> offsets in read order
    newest_read: dict[tuple, int] = {}  # (topic, partition, sub-key) -> the highest offset read of that key
    for r in sorted(final_polls, key=lambda r: (r["index"], r["seq"])):
        if r["topic"] is not None:
            read_at[(r["topic"], r["partition"])][r["offset"]] = r["value"]
            order[(r["topic"], r["partition"])].append(r["offset"])
        for topic, partition, offset, sub_key in json.loads(r["extra"] or "{}").get("tombstones", ()) if r["seq"] == 0 \
                else ():
            read_at[(topic, partition)][offset] = None
            newest_read[(topic, partition, sub_key)] = max(newest_read.get((topic, partition, sub_key), -1), offset)
        if r["topic"] is not None:
            where = (r["topic"], r["partition"], r["value"] % COMPACTION_KEYS)
            newest_read[where] = max(newest_read.get(where, -1), r["offset"])
    latest: dict[tuple, dict] = {}    # (topic, partition, sub-key) -> the acked record at the highest offset
    acked_at: dict[tuple, int] = {}   # (topic, partition, offset) -> acked value
    for r in rows:
        if r["f"] == "tombstone" and r["type"] == "ok":
            extra = json.loads(r["extra"])
            record = {"op": r["index"], "offset": extra["offset"], "value": None, "time_ns": r["time_ns"]}
            where = (extra["topic"], extra["partition"], extra["sub_key"])
        elif r["mop_f"] == "send" and r["type"] == "ok" and r["offset"] is not None:
            record = {"op": r["index"], "offset": r["offset"], "value": r["value"], "time_ns": r["time_ns"]}
            where = (r["topic"], r["partition"], r["value"] % COMPACTION_KEYS)
            acked_at[(r["topic"], r["partition"], r["offset"])] = r["value"]
        else:
            continue
        if where not in latest or record["offset"] > latest[where]["offset"]:
            latest[where] = record
    found = []
    for (topic, partition, sub_key), record in sorted(latest.items()):
        got = read_at[(topic, partition)].get(record["offset"], "absent")
        if newest_read.get((topic, partition, sub_key), -1) > record["offset"]:
            continue  # a later record of the key (a send or tombstone whose ack was lost) may supersede it
        if record["value"] is not None and got != record["value"]:
            found.append(anomaly_row(
                "compaction-lost-latest", f"key ({topic}-{partition}, sub-key {sub_key}): its latest value "
                f"{record['value']} at offset {record['offset']} (op {record['op']}) is {got} in the final reads",
                topic=topic, partition=partition, ops=[record["op"]], values=[record["value"]],
                offsets=[record["offset"]]))
        elif record["value"] is None and got == "absent":
            age_ms = (final_read_ns - record["time_ns"]) / NS_PER_MS
            if age_ms < delete_retention_ms:
                found.append(anomaly_row(
                    "tombstone-removed-early", f"key ({topic}-{partition}, sub-key {sub_key}): its tombstone at "
                    f"offset {record['offset']} (op {record['op']}) was gone {age_ms:.0f} ms after its ack, "
                    f"delete.retention.ms is {delete_retention_ms}", topic=topic, partition=partition,
                    ops=[record["op"]], offsets=[record["offset"]]))
    for (topic, partition), offsets in sorted(order.items()):
        reordered = [(a, b) for a, b in zip(offsets, offsets[1:]) if b <= a]
        reused = [(o, v, acked_at[(topic, partition, o)]) for o, v in read_at[(topic, partition)].items()
                  if v is not None and (topic, partition, o) in acked_at and acked_at[(topic, partition, o)] != v]
        if reordered or reused:
            found.append(anomaly_row(
                "compaction-offset-reuse", f"{topic}-{partition}: offsets read out of order {reordered[:8]}; "
                f"offsets holding another value than acked there (offset, read, acked) {reused[:8]}",
                topic=topic, partition=partition, offsets=sorted({o for pair in reordered for o in pair}
                                                                 | {o for o, _, _ in reused})[:64]))
    return found
