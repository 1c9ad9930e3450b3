"""The replication-offset-checkpoint file: each replica's high watermark, written every
replica.high.watermark.checkpoint.interval.ms and on close, read on start so a restarted
leader does not expose less than it had (Kafka's OffsetCheckpointFile)."""
from __future__ import annotations

import os

from reference.node.base import TopicPartition
from reference.storage.atomic import replace_file

REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"


def write_hw_checkpoint(data_dir: str, partitions: dict) -> None:
    """Kafka's format: a version line (0), a count line, then `topic partition offset` lines."""
    lines = [f"{tp.topic} {tp.partition} {replica.high_watermark}" for tp, replica in sorted(partitions.items())]
    path = os.path.join(data_dir, REPLICATION_OFFSET_CHECKPOINT)
    replace_file(path, ("\n".join(["0", str(len(lines)), *lines]) + "\n").encode())


def read_hw_checkpoint(data_dir: str) -> dict[TopicPartition, int]:
    path = os.path.join(data_dir, REPLICATION_OFFSET_CHECKPOINT)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    assert lines[0] == "0", f"{path}: unknown version {lines[0]!r}"
    checkpoint = {}
    for line in lines[2:2 + int(lines[1])]:
        topic, partition, offset = line.split()
        checkpoint[TopicPartition(topic, int(partition))] = int(offset)
    return checkpoint
