"""Idempotent producer state through the log: dedup, sequence gaps, fencing, snapshots (IDM-1)."""
from __future__ import annotations

import os

import pytest

from .conftest import make_batch, read_all
from reference.protocol.errors import ErrorCode, KafkaError
from reference.storage import Log, LogConfig
from reference.storage.producer_state import SEQUENCE_MAX

PID = 4000


def produce(log, count: int, sequence: int, epoch: int = 0, producer_id: int = PID, now_ms: int = 0):
    return log.append_as_leader(make_batch(count, producer_id=producer_id, producer_epoch=epoch,
                                           base_sequence=sequence, tag=sequence), leader_epoch=0, now_ms=now_ms)


def error_of(call) -> ErrorCode:
    with pytest.raises(KafkaError) as error:
        call()
    return error.value.code


@pytest.mark.guarantee("IDM-1")
def test_a_retried_batch_gets_its_original_offsets_and_is_not_stored_twice(open_log):
    log = open_log()
    first = produce(log, 3, 0)
    produce(log, 2, 3)
    assert log.log_end_offset == 5
    retry = produce(log, 3, 0)
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset) == (0, 2)
    assert log.log_end_offset == 5 and len(read_all(log)) == 5


@pytest.mark.guarantee("IDM-1")
def test_only_the_last_five_batches_are_remembered(open_log):
    log = open_log()
    for sequence in range(0, 12, 2):
        produce(log, 2, sequence)
    assert produce(log, 2, 2).first_offset == 2  # fifth from last: a duplicate
    assert error_of(lambda: produce(log, 2, 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


@pytest.mark.guarantee("ORD-2")
def test_a_sequence_gap_is_out_of_order(open_log):
    log = open_log()
    produce(log, 2, 0)
    assert error_of(lambda: produce(log, 1, 3)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.log_end_offset == 2
    assert produce(log, 1, 2).first_offset == 2


def test_an_older_epoch_is_fenced_and_a_new_epoch_starts_at_zero(open_log):
    log = open_log()
    produce(log, 2, 0, epoch=5)
    assert error_of(lambda: produce(log, 1, 2, epoch=4)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert error_of(lambda: produce(log, 1, 7, epoch=6)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(log, 1, 0, epoch=6).first_offset == 2
    assert error_of(lambda: produce(log, 1, 1, epoch=5)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.producer_state.producers[PID].producer_epoch == 6


def test_an_unknown_producer_is_accepted_at_any_sequence(open_log):
    """KIP-360: the broker may have lost the state with the records (retention, DeleteRecords)."""
    log = open_log()
    assert produce(log, 2, 1234).first_offset == 0
    assert produce(log, 1, 1236).first_offset == 2


def test_sequences_wrap_at_int32_max(open_log):
    log = open_log()
    produce(log, 2, SEQUENCE_MAX - 1)
    assert log.producer_state.producers[PID].last_seq == SEQUENCE_MAX
    assert produce(log, 2, 0).first_offset == 2
    wrapping = produce(log, 3, SEQUENCE_MAX - 1, producer_id=PID + 1)
    assert log.producer_state.producers[PID + 1].last_seq == 0
    assert produce(log, 3, SEQUENCE_MAX - 1, producer_id=PID + 1).first_offset == wrapping.first_offset


@pytest.mark.guarantee("IDM-1")
@pytest.mark.parametrize("shutdown", ["clean", "crash"])
def test_producer_state_survives_reopen(open_log, log_dir, shutdown):
    config = LogConfig(segment_bytes=1_500)
    log = open_log(config)
    sequences = {}
    for i in range(60):
        producer_id = PID + i % 3
        sequence = sequences.get(producer_id, 0)
        produce(log, 2, sequence, producer_id=producer_id)
        sequences[producer_id] = sequence + 2
    assert len(log.segments) > 3 and any(name.endswith(".snapshot") for name in os.listdir(log_dir))
    last = produce(log, 1, sequences[PID], producer_id=PID)
    if shutdown == "clean":
        log.close()
    else:
        for segment in log.segments:
            segment.close()
    reopened = open_log(config)
    assert {pid: e.last_seq for pid, e in reopened.producer_state.producers.items()} == \
           {pid: e.last_seq for pid, e in log.producer_state.producers.items()}
    retry = produce(reopened, 1, sequences[PID], producer_id=PID)
    assert retry.first_offset == last.first_offset and reopened.log_end_offset == last.last_offset + 1
    assert error_of(lambda: produce(reopened, 1, sequences[PID] + 5, producer_id=PID)) == \
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_producer_state_is_rebuilt_when_snapshots_are_lost(open_log, log_dir):
    config = LogConfig(segment_bytes=3_000)
    log = open_log(config)
    for sequence in range(0, 80, 2):
        produce(log, 2, sequence)
    log.close()
    for name in os.listdir(log_dir):
        if name.endswith(".snapshot"):
            os.remove(os.path.join(log_dir, name))
    reopened = open_log(config)
    assert reopened.producer_state.producers[PID].last_seq == 79
    assert produce(reopened, 2, 78).first_offset == 78


def test_truncation_rolls_producer_state_back(open_log):
    log = open_log(LogConfig(segment_bytes=3_000))
    for sequence in range(0, 80, 2):
        produce(log, 2, sequence)
    log.truncate_to(40)
    assert log.producer_state.producers[PID].last_seq == 39
    assert produce(log, 2, 40).first_offset == 40


@pytest.mark.guarantee("IDM-1")
def test_a_retry_of_a_batch_a_follower_copied_is_a_duplicate_once_it_leads(open_log, tmp_path):
    """Leader change: the follower built its producer state from the leader's batches, so the
    retry of a batch the old leader appended (its answer lost) is a duplicate at the new leader."""
    leader = open_log()
    for sequence in range(0, 10, 2):
        produce(leader, 2, sequence)
    follower = Log(str(tmp_path / "follower" / "topic-0"), LogConfig(), now_ms=0)
    follower.append_as_follower(leader.read(0, 1 << 20).records, now_ms=0)
    assert follower.log_end_offset == leader.log_end_offset == 10
    for sequence in range(0, 10, 2):
        assert produce(follower, 2, sequence).first_offset == sequence
    assert follower.log_end_offset == 10
    assert error_of(lambda: produce(follower, 1, 11)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(follower, 1, 10).first_offset == 10
    follower.close()


@pytest.mark.guarantee("IDM-1")
def test_a_retry_split_differently_from_the_stored_batches_is_out_of_order(open_log):
    """Only an exact (first, last) sequence match is a duplicate, as in Kafka's
    ProducerStateEntry.findDuplicateBatch; anything else that does not continue the sequence
    is OUT_OF_ORDER_SEQUENCE_NUMBER, never appended."""
    log = open_log()
    produce(log, 4, 0)
    assert error_of(lambda: produce(log, 2, 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert error_of(lambda: produce(log, 4, 2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.log_end_offset == 4


def test_a_retry_from_before_an_epoch_bump_is_fenced_not_a_duplicate(open_log):
    """A duplicate must match the current epoch: the old epoch's retry is INVALID_PRODUCER_EPOCH,
    and the new epoch's batch from sequence 0 is new data (the producer chose to re-send it)."""
    log = open_log()
    produce(log, 2, 0, epoch=3)
    assert produce(log, 2, 0, epoch=4).first_offset == 2
    assert error_of(lambda: produce(log, 2, 0, epoch=3)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert produce(log, 2, 0, epoch=4).first_offset == 2
    assert log.log_end_offset == 4
