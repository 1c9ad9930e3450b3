"""The checks a batch passes before the log takes it (Kafka's LogValidator and the follower's
checks in UnifiedLog.appendAsFollower): a produced batch validated record by record and
recompressed to the topic's compression.type, a coordinator's transaction marker, batches
fetched from the leader."""
from __future__ import annotations

from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import RecordBatch, iter_batches, recompress
from reference.protocol.validator import ValidatedBatch, ValidationRules, validate_batch
from reference.storage.config import LogConfig
from reference.storage.producer_state import ProducerStateManager


def validation_rules(config: LogConfig) -> ValidationRules:
    """What a topic's configs ask of a produced batch."""
    return ValidationRules(config.max_message_bytes, config.compact, config.log_append_time,
                           config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms)


def validate_produced_batch(records: bytes | memoryview | ValidatedBatch, config: LogConfig,
                            now_ms: int) -> RecordBatch:
    """One produced batch, every record walked against the topic's configs (read on each append:
    configs change), in the topic's compression.type codec. A batch validated ahead (in a worker
    thread, reference/runtime/produce_validation.py) under the same rules is not walked again.
    Raises KafkaError."""
    rules = validation_rules(config)
    if not (isinstance(records, ValidatedBatch) and records.rules == rules):
        records = validate_batch(records.records if isinstance(records, ValidatedBatch) else records, rules, now_ms)
    batch, records_body = records.batch_and_body()
    target = config.target_compression
    if target is None or target == batch.compression:
        return batch
    # Rebuilt as Kafka's LogValidator does; it must still fit max.message.bytes (MESSAGE_TOO_LARGE).
    rebuilt = RecordBatch(recompress(batch, records_body, target, config.compression_level))
    if rebuilt.size_bytes > config.max_message_bytes:
        raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE, f"the batch recompressed as compression.type="
                         f"{config.compression_type} is {rebuilt.size_bytes} bytes, over "
                         f"max.message.bytes={config.max_message_bytes}")
    return rebuilt


def check_marker(records: bytes | memoryview, producer_state: ProducerStateManager) -> RecordBatch:
    """A transaction marker: one transactional control batch with one record, CRC valid,
    from a producer epoch no older than the one this partition knows (INVALID_PRODUCER_EPOCH)."""
    batches = list(iter_batches(records))
    assert len(batches) == 1 and sum(b.size_bytes for b in batches) == len(records), "one marker batch"
    (batch,) = batches
    assert isinstance(batch, RecordBatch) and batch.crc_is_valid(), "a v2 marker batch with a valid CRC"
    assert batch.is_control and batch.is_transactional and batch.records_count == 1, "a control batch"
    known = producer_state.producers.get(batch.producer_id)
    if known is not None and batch.producer_epoch < known.producer_epoch:
        raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH, f"marker of producer {batch.producer_id} epoch "
                         f"{batch.producer_epoch} is older than epoch {known.producer_epoch}")
    return batch


def check_fetched_batches(records: bytes | memoryview, log_end_offset: int) -> list[RecordBatch]:
    """Batches fetched from the leader: whole v2 batches with valid CRCs whose offsets only
    increase from the log end offset on (gaps are fine: a compacted leader keeps its records'
    offsets); KafkaError CORRUPT_MESSAGE otherwise."""
    batches = list(iter_batches(records))
    if sum(batch.size_bytes for batch in batches) != len(records):
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "fetched records do not form whole batches")
    next_offset = log_end_offset
    for batch in batches:
        if not isinstance(batch, RecordBatch) or not batch.crc_is_valid():
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "a fetched batch is not a v2 batch with a valid CRC")
        if batch.base_offset < next_offset:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"fetched batch starts at {batch.base_offset}, "
                             f"below offset {next_offset}")
        next_offset = batch.next_offset
    return batches
