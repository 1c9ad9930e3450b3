"""The partition side of transactions, told as stories: the last stable offset, the aborted
index, and late writes (KIP-890, KAFKA-17754) with the historical bugs switched on and off."""
from __future__ import annotations

import pytest

from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import (
    CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, Record, RecordBatch, build_batch, build_control_batch, iter_batches,
)
from reference.storage import AppendOrigin, Log, LogConfig
from reference.transaction.coordinator import TransactionCoordinator, TransactionCoordinatorConfig
from reference.transaction.partition import PartitionTransactions, TransactionBugs, committed_records

PID = 7
TP = ("t", 0)


class Partition:
    """A real log with its PartitionTransactions, written as the broker's shell writes it."""

    def __init__(self, path, bugs: TransactionBugs = TransactionBugs()) -> None:
        self.log = Log(str(path), LogConfig(), now_ms=0)
        self.transactions = PartitionTransactions(bugs)
        self.next_sequence = 0

    def produce(self, value: bytes, epoch: int = 0, guard=None) -> int:
        batch = build_batch([Record(timestamp=1, value=value)], producer_id=PID, producer_epoch=epoch,
                            base_sequence=self.next_sequence, is_transactional=True)
        self.transactions.check_transactional_append(RecordBatch(batch), guard)
        info = self.log.append_as_leader(batch, 0, now_ms=1)
        self.next_sequence += 1
        self.transactions.on_append(RecordBatch(batch), info.first_offset)
        return info.first_offset

    def marker(self, committed: bool, epoch: int = 0, coordinator_epoch: int = 0) -> int:
        """Append a transaction marker as the partition leader does for WriteTxnMarkers."""
        self.transactions.check_marker(PID, coordinator_epoch)
        batch = build_control_batch(CONTROL_TYPE_COMMIT if committed else CONTROL_TYPE_ABORT, producer_id=PID,
                                    producer_epoch=epoch, coordinator_epoch=coordinator_epoch, timestamp_ms=1)
        info = self.log.append_as_leader(batch, 0, now_ms=1, origin=AppendOrigin.COORDINATOR)
        self.transactions.on_append(RecordBatch(batch), info.first_offset)
        return info.first_offset

    def read_committed(self) -> list[bytes]:
        """What a read_committed consumer keeps: below the LSO, minus the aborted transactions."""
        lso = self.transactions.last_stable_offset(self.log.log_end_offset)
        aborted = self.transactions.aborted_transactions(0, lso)
        values = []
        for batch in _batches(self.log, lso):
            if batch.is_control:
                continue
            if any(a.producer_id == batch.producer_id and a.first_offset <= batch.base_offset <= a.last_offset
                   for a in aborted):
                continue
            values += [r.value for r in batch.records()]
        return values


def _batches(log: Log, max_offset: int):
    return list(iter_batches(log.read(0, 1 << 20, max_offset=max_offset).records)) if max_offset > 0 else []


def verified(partition: Partition, coordinator: TransactionCoordinator, epoch: int):
    """The leader starts verification, then asks the coordinator (KIP-890 part 1)."""
    guard = partition.transactions.start_verification(PID)
    if coordinator.verify_partitions("app", PID, epoch, [TP])[TP] != ErrorCode.NONE:
        raise KafkaError(ErrorCode.INVALID_TXN_STATE, "not in the transaction")
    return guard


def coordinator() -> TransactionCoordinator:
    c = TransactionCoordinator(TransactionCoordinatorConfig(), lambda: PID, now_ms=0)
    c.init_producer_id("app", 60_000, -1, -1, now_ms=0)
    return c


def test_open_transaction_holds_the_last_stable_offset_and_an_abort_is_indexed(tmp_path):
    p = Partition(tmp_path / "p")
    first = p.produce(b"a", guard=p.transactions.start_verification(PID))
    p.produce(b"b")
    assert p.transactions.last_stable_offset(p.log.log_end_offset) == first
    assert p.read_committed() == []
    p.marker(committed=False)
    assert p.transactions.last_stable_offset(p.log.log_end_offset) == p.log.log_end_offset
    (entry,) = p.transactions.aborted_transactions(0, p.log.log_end_offset)
    assert (entry.producer_id, entry.first_offset, entry.last_offset) == (PID, 0, 2)
    assert p.transactions.aborted_transactions(3, 10) == []  # a fetch past the abort needs no entry
    p.produce(b"c", guard=p.transactions.start_verification(PID))
    p.marker(committed=True)
    assert p.read_committed() == [b"c"]

    rebuilt = PartitionTransactions()
    rebuilt.rebuild(_batches(p.log, p.log.log_end_offset))
    assert rebuilt.aborted == p.transactions.aborted and rebuilt.ongoing == {}


def test_serving_aborted_records_to_read_committed_is_an_aborted_read(tmp_path):
    p = Partition(tmp_path / "p", TransactionBugs(serve_aborted_to_read_committed=True))
    p.produce(b"aborted", guard=p.transactions.start_verification(PID))
    p.marker(committed=False)
    assert p.read_committed() == [b"aborted"]  # TXN-2 violated: the bug the conformance suite must catch


@pytest.mark.parametrize("bug_on", [False, True])
def test_a_write_verified_before_the_abort_and_appended_after_it_cannot_join_the_next_transaction(tmp_path, bug_on):
    """KIP-890 part 1. The leader verified a write of transaction 1, then the write waited; the
    abort marker of transaction 1 and the AddPartitionsToTxn of transaction 2 (same epoch,
    transaction version 1) came in between. Without the guard the late write joins
    transaction 2, and when transaction 2 commits, a record the producer saw aborted is
    committed (an EOS violation)."""
    c = coordinator()
    p = Partition(tmp_path / "p", TransactionBugs(late_produce_joins_next_transaction=bug_on))
    c.add_partitions("app", PID, 0, [TP], now_ms=1)
    late_guard = verified(p, c, epoch=0)
    for markers in c.end_transaction("app", PID, 0, committed=False, now_ms=2).markers:
        p.marker(committed=False)
        c.complete(markers, now_ms=3)
    c.add_partitions("app", PID, 0, [TP], now_ms=4)  # transaction 2
    if not bug_on:
        with pytest.raises(KafkaError) as refused:
            p.produce(b"late write of transaction 1", guard=late_guard)
        assert refused.value.code == ErrorCode.INVALID_TXN_STATE
    else:
        p.produce(b"late write of transaction 1", guard=late_guard)
    p.produce(b"transaction 2", guard=verified(p, c, epoch=0) if not bug_on else None)
    c.end_transaction("app", PID, 0, committed=True, now_ms=5)
    p.marker(committed=True)
    expected = [b"late write of transaction 1", b"transaction 2"] if bug_on else [b"transaction 2"]
    assert p.read_committed() == expected


def test_kafka_17754_late_write_is_stopped_by_the_epoch_bump_of_transaction_version_2(tmp_path):
    """A write of transaction 1 that reaches the leader only after transaction 2 added the
    partition passes a version-1 verification (same producer id and epoch): that is why
    KIP-890 part 2 bumps the epoch at every EndTxn. With version 2 the marker carries the
    new epoch, so the late write's old epoch is refused by the partition's producer state."""
    c = coordinator()
    p = Partition(tmp_path / "p")
    c.add_partitions("app", PID, 0, [TP], now_ms=1, transaction_version=2)
    ended = c.end_transaction("app", PID, 0, committed=False, now_ms=2)
    (markers,) = ended.markers
    p.marker(committed=False, epoch=markers.producer_epoch)
    c.complete(markers, now_ms=3)
    c.add_partitions("app", PID, ended.producer_epoch, [TP], now_ms=4, transaction_version=2)
    with pytest.raises(KafkaError) as refused:
        p.produce(b"late write of transaction 1", epoch=0, guard=verified(p, c, epoch=0))
    assert refused.value.code == ErrorCode.INVALID_TXN_STATE  # the coordinator no longer knows epoch 0
    guard = p.transactions.start_verification(PID)
    with pytest.raises(KafkaError) as fenced:  # even with a stale verification, the log refuses epoch 0
        p.produce(b"late write of transaction 1", epoch=0, guard=guard)
    assert fenced.value.code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_coordinator_replay_keeps_committed_transactional_records_only():
    def data(value: bytes, pid: int):
        return RecordBatch(build_batch([Record(timestamp=1, value=value)], producer_id=pid, producer_epoch=0,
                                       base_sequence=0, is_transactional=True))

    def marker(kind: int, pid: int):
        return RecordBatch(build_control_batch(kind, producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                                               timestamp_ms=1))
    plain = RecordBatch(build_batch([Record(timestamp=1, value=b"plain")]))
    batches = [data(b"kept", 1), data(b"dropped", 2), plain, marker(CONTROL_TYPE_COMMIT, 1),
               marker(CONTROL_TYPE_ABORT, 2), data(b"open", 3)]
    assert [r.value for r in committed_records(batches)] == [b"plain", b"kept"]


def test_a_client_may_not_write_a_marker_but_the_coordinator_origin_may(tmp_path):
    partition = Partition(tmp_path)
    partition.produce(b"a", guard=partition.transactions.start_verification(PID))
    marker = build_control_batch(CONTROL_TYPE_COMMIT, producer_id=PID, producer_epoch=0, coordinator_epoch=0,
                                 timestamp_ms=1)
    with pytest.raises(KafkaError) as refused:
        partition.log.append_as_leader(marker, 0, now_ms=1)
    assert refused.value.code == ErrorCode.INVALID_RECORD
    offset = partition.marker(committed=True)
    (stored,) = iter_batches(partition.log.read(offset, 1 << 20).records)
    assert (stored.base_offset, stored.is_control, stored.crc_is_valid()) == (1, True, True), \
        "the marker gets the next offset and a CRC over its patched header"
    assert partition.log.producer_state.producers[PID].producer_epoch == 0
    assert partition.read_committed() == [b"a"]


def test_a_marker_from_an_older_producer_epoch_is_refused(tmp_path):
    partition = Partition(tmp_path)
    partition.produce(b"a", epoch=1, guard=partition.transactions.start_verification(PID))
    with pytest.raises(KafkaError) as refused:
        partition.marker(committed=False, epoch=0)
    assert refused.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert partition.log.log_end_offset == 1, "nothing appended"


def test_a_marker_from_a_replaced_coordinator_is_fenced(tmp_path):
    """The coordinator of the producer's transactional id moved (coordinator epoch 3 -> 4) and
    the new one wrote its marker; the old one's late marker must not close a later transaction."""
    partition = Partition(tmp_path)
    partition.produce(b"first", guard=partition.transactions.start_verification(PID))
    partition.marker(committed=True, coordinator_epoch=4)
    partition.produce(b"second", guard=partition.transactions.start_verification(PID))
    with pytest.raises(KafkaError) as fenced:
        partition.marker(committed=False, coordinator_epoch=3)
    assert fenced.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert partition.transactions.first_unstable_offset() == 2, "the second transaction is still open"
    rebuilt = PartitionTransactions()
    rebuilt.rebuild(iter_batches(partition.log.read(0, 1 << 20).records))
    assert rebuilt.coordinator_epochs == {PID: 4}, "a new leader learns the coordinator epochs from the log"
