"""Partitions the final reads could not read to their high watermark: where they stuck, and on what.

A read_committed consumer reads a partition only up to its last stable offset (LSO), the first
offset of the oldest transaction still open there. A transaction no marker ever ends (a hanging
transaction: a late transactional write that lands after its transaction's marker, KIP-890's
motivating bug) holds the LSO for good, and every record committed after it stays invisible:
the final reads then miss acknowledged records that are stored all the same. So when the final
reads time out, `record` writes one op, f "stuck-partitions" (ok, or info with the error), whose
extra lists, for each partition whose read_committed position stayed below its high watermark,
[topic, partition, position, last stable offset, high watermark, [[offset, value], ...]]: the
LSO as ListOffsets answers a read_committed client, and the first records at and above it as a
read_uncommitted consumer reads them (their values name the ops that sent them). The checker
(spark_validation/hanging.py) turns that into a hanging-transaction anomaly (TXN-1) and stops
counting the records hidden behind it as lost (DUR-1).
"""
from __future__ import annotations

import time
from typing import Callable

from faults.recorder import Recorder

STUCK_PARTITIONS = "stuck-partitions"
RECORDS_MAX = 4            # records read at and above the LSO, per stuck partition
READ_TIMEOUT_S = 10.0      # per stuck partition: its leader answers within this after the final heal
POLL_TIMEOUT_S = 0.5


def record(bootstrap: str, recorder: Recorder, process: int, stuck: list[tuple[str, int, int, int]],
           client_properties: dict, client_log: dict, decode_value: Callable[[bytes | None], int | None]) -> None:
    """stuck: (topic, partition, read_committed position, high watermark) of each partition the
    final reads did not finish. client_log: librdkafka's log_level and logger for the consumers;
    decode_value: the workload's record value decoding."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    invocation = recorder.invoke(process, STUCK_PARTITIONS)
    common = {"bootstrap.servers": bootstrap, "group.id": "kspec-faults-stuck", "enable.auto.commit": False,
              "enable.partition.eof": False, **client_log, **client_properties}
    committed = Consumer({**common, "isolation.level": "read_committed"})
    uncommitted = Consumer({**common, "isolation.level": "read_uncommitted"})
    found = []
    try:
        for topic, partition, position, high in stuck:
            _, stable = committed.get_watermark_offsets(TopicPartition(topic, partition), timeout=READ_TIMEOUT_S)
            records: list[list[int | None]] = []
            if stable < high:
                at = TopicPartition(topic, partition, stable)
                uncommitted.assign([at])
                deadline = time.monotonic() + READ_TIMEOUT_S
                # until RECORDS_MAX records or the high watermark (markers are not delivered: the position says)
                while len(records) < RECORDS_MAX and time.monotonic() < deadline:
                    for m in uncommitted.consume(num_messages=RECORDS_MAX, timeout=POLL_TIMEOUT_S):
                        if not m.error() and m.offset() >= stable:
                            records.append([m.offset(), decode_value(m.value())])
                    if uncommitted.position([at])[0].offset >= high:
                        break
            found.append([topic, partition, position, stable, high, records[:RECORDS_MAX]])
    except KafkaException as e:
        recorder.complete(invocation, "info", extra={"partitions": found, "error": str(e)})
        return
    finally:
        for consumer in (committed, uncommitted):
            consumer.close()
    recorder.complete(invocation, "ok", extra={"partitions": found})
