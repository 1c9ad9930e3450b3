"""`kspec mirror record`: a history of one flow as both clusters hold it, for `kspec check`.

The folder gets `mirror.json` (the flow: source, target, exactly once) and two Parquet tables
read from the clusters: `mirror-source.parquet`, every record of the mirrored source topics,
and `mirror-target.parquet`, every record of their remote topics (read_committed with exactly
once), each row naming the source topic it mirrors. A record is known by its value: the
integer a workload wrote as text, or else a 64-bit hash of its key and value bytes.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mirror.clients import ConnectionLog, build, read_to_end
from mirror.config import FlowConfig

MIRROR_FILE, SOURCE_FILE, TARGET_FILE = "mirror.json", "mirror-source.parquet", "mirror-target.parquet"
# Written beside them by a fault run (faults/mirror_workload.py): a source group's polls and
# commits, and its checkpoints in the target; spark_validation/mirror.py checks MIR-3 with them.
GROUP_FILE, CHECKPOINTS_FILE = "mirror-group.parquet", "mirror-checkpoints.parquet"
PROGRESS_FILE = "mirror-progress.parquet"  # a fault run's samples of the mirror's committed progress (faults/mirror_workload.py)
RECORDS_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                            ("value", pa.int64()), ("source_topic", pa.string())])


def record_value(key: bytes | None, value: bytes | None) -> int:
    text = (value or b"").strip()
    if text.lstrip(b"-").isdigit() and len(text) < 19:
        return int(text)
    digest = hashlib.blake2b((key or b"") + b"\0" + (value or b""), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def record(config: FlowConfig, out_dir: Path) -> tuple[int, int]:
    """Write the flow's history into out_dir; (source records, target records)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    source_connection, target_connection = ConnectionLog(config.source), ConnectionLog(config.target)
    source_topics = {name: len(t.partitions) for name, t in
                     build("admin", config.source_clients, source_connection).list_topics(timeout=10).topics.items()
                     if t.error is None and config.mirrors_topic(name)}
    target_metadata = build("admin", config.target_clients, target_connection).list_topics(timeout=10)
    source_rows, target_rows = [], []
    for topic, partitions in sorted(source_topics.items()):
        source_rows += _rows(config.source_clients, source_connection, topic, topic, partitions, config.exactly_once)
        remote = config.policy.format_remote_topic(config.source, topic)
        if remote in target_metadata.topics:
            target_rows += _rows(config.target_clients, target_connection, remote, topic,
                                 len(target_metadata.topics[remote].partitions), config.exactly_once)
    for rows, name in ((source_rows, SOURCE_FILE), (target_rows, TARGET_FILE)):
        pq.write_table(pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA), out_dir / name)
    (out_dir / MIRROR_FILE).write_text(json.dumps(
        {"source": config.source, "target": config.target, "exactly_once": config.exactly_once}, indent=2) + "\n")
    return len(source_rows), len(target_rows)


def _rows(configs, connection, topic: str, source_topic: str, partitions: int, read_committed: bool) -> list[dict]:
    return [{"topic": topic, "partition": m.partition(), "offset": m.offset(), "value": record_value(m.key(), m.value()),
             "source_topic": source_topic}
            for m in read_to_end(configs, connection, topic, partitions, read_committed=read_committed)]
