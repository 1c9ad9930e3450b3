"""Large produced batches are validated off the event loop.

Kafka validates produced records (LogValidator) on its request handler threads, never on the
network threads that serve other clients; here one event loop is both, and raft's timers and
every other connection wait while it runs. A batch is walked record by record and a compressed
one is decompressed first (protocol/validator.py): a zstd batch of a few KiB can hold half a
million records and take a second. So Produce hands each large batch to one worker thread
(`VALIDATOR`) before it appends; the append then takes the ValidatedBatch without walking it
again (storage/log.py). Large means either of:
- records_count of at least OFF_LOOP_RECORDS_MIN (the walk costs about a microsecond per
  record, so below it the walk is shorter than the hand-over is worth), or
- compressed, with max.message.bytes above OFF_LOOP_DECOMPRESSED_BYTES_MIN: only then can
  decompression itself (bounded by max.message.bytes) take long.
The walk is Python and holds the GIL, but the interpreter hands the GIL to the loop's thread
every switch interval (5 ms), so the loop keeps answering. One thread: validations queue
behind each other, holding only the request bytes already bounded by queued.max.request.bytes.
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from reference.node.broker import TopicPartition
from reference.node.interface import BrokerNode
from reference.protocol.compression import CompressionType
from reference.protocol.errors import KafkaError
from reference.protocol.records import RecordBatch, iter_batches
from reference.protocol.validator import ValidatedBatch, ValidationRules, validate_batch
from reference.storage.log_validator import validation_rules

OFF_LOOP_RECORDS_MIN = 10_000
OFF_LOOP_DECOMPRESSED_BYTES_MIN = 4 << 20
VALIDATOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kspec-validator")


def large_batches(broker: BrokerNode, request, api_version: int) -> dict[int, tuple[bytes, ValidationRules]]:
    """The request's large batches, by id() of their partition_data, with the rules of the
    partition they go to. A partition this broker cannot append to is left to the append,
    which refuses it."""
    found = {}
    for topic_data in request.topic_data:
        try:
            name = topic_data.name if api_version < 13 else broker.topic_name_by_id(topic_data.topic_id)
        except KafkaError:
            continue
        for partition_data in topic_data.partition_data:
            batch = next(iter_batches(partition_data.records or b""), None)
            if not isinstance(batch, RecordBatch):
                continue
            try:
                rules = validation_rules(broker.partition(TopicPartition(name, partition_data.index)).log.config)
            except KafkaError:
                continue
            if batch.records_count >= OFF_LOOP_RECORDS_MIN or (
                    batch.compression != CompressionType.NONE and rules.max_message_bytes > OFF_LOOP_DECOMPRESSED_BYTES_MIN):
                found[id(partition_data)] = (partition_data.records, rules)
    return found


async def validate_off_loop(batches: dict[int, tuple[bytes, ValidationRules]], now_ms: int) -> dict[int, ValidatedBatch]:
    loop = asyncio.get_running_loop()
    keys = list(batches)
    validated = await asyncio.gather(*(loop.run_in_executor(VALIDATOR, validate_batch, *batches[key], now_ms)
                                       for key in keys))
    return dict(zip(keys, validated))
