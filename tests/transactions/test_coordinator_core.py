"""The sans-IO transaction coordinator: state machine, fencing, KIP-360 bumps, timeouts, replay."""
from __future__ import annotations

import itertools

import pytest

from reference.protocol.errors import ErrorCode
from reference.transaction.coordinator import (
    VALID_PREVIOUS_STATES, TransactionCoordinator, TransactionCoordinatorConfig, TxnEffects,
)
from reference.transaction.records import TransactionLogValue, TransactionState, decode_value, encode_value

S = TransactionState
TIMEOUT_MS = 60_000


def coordinator() -> TransactionCoordinator:
    ids = itertools.count(1000)
    return TransactionCoordinator(TransactionCoordinatorConfig(transaction_abort_timed_out_transaction_cleanup_interval_ms=1),
                                  lambda: next(ids), now_ms=0)


def end(c: TransactionCoordinator, effects: TxnEffects, now_ms: int) -> TxnEffects:
    """Markers written at once: complete every transaction the effects prepared."""
    for markers in effects.markers:
        c.complete(markers, now_ms)
    return effects


def test_transition_table_is_kafkas():
    assert VALID_PREVIOUS_STATES[S.PREPARE_COMMIT] == {S.ONGOING}
    assert VALID_PREVIOUS_STATES[S.PREPARE_ABORT] == {S.ONGOING, S.PREPARE_EPOCH_FENCE}
    assert VALID_PREVIOUS_STATES[S.COMPLETE_COMMIT] == {S.PREPARE_COMMIT}
    assert S.ONGOING not in VALID_PREVIOUS_STATES[S.DEAD]


def test_commit_goes_through_prepare_then_complete_with_one_marker_set():
    c = coordinator()
    init = c.init_producer_id("app", TIMEOUT_MS, -1, -1, now_ms=1)
    assert (init.error, init.producer_epoch) == (ErrorCode.NONE, 0) and len(init.records) == 1
    assert c.add_partitions("app", init.producer_id, 0, [("t", 0), ("t", 1)], now_ms=2).error == ErrorCode.NONE
    ended = c.end_transaction("app", init.producer_id, 0, committed=True, now_ms=3)
    assert c.transactions["app"].state == S.PREPARE_COMMIT
    (markers,) = ended.markers
    assert markers.committed and markers.partitions == {("t", 0), ("t", 1)}
    assert c.end_transaction("app", init.producer_id, 0, True, 4).error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert c.add_partitions("app", init.producer_id, 0, [("t", 2)], 4).error == ErrorCode.CONCURRENT_TRANSACTIONS
    c.complete(markers, now_ms=5)
    assert c.transactions["app"].state == S.COMPLETE_COMMIT
    assert c.end_transaction("app", init.producer_id, 0, True, 6).error == ErrorCode.NONE  # a retry
    assert c.end_transaction("app", init.producer_id, 0, False, 6).error == ErrorCode.INVALID_TXN_STATE


def test_init_fences_the_older_instance_and_aborts_its_open_transaction():
    c = coordinator()
    old = c.init_producer_id("app", TIMEOUT_MS, -1, -1, 1)
    c.add_partitions("app", old.producer_id, old.producer_epoch, [("t", 0)], 2)
    fencing = c.init_producer_id("app", TIMEOUT_MS, -1, -1, 3)
    assert fencing.error == ErrorCode.CONCURRENT_TRANSACTIONS
    (abort,) = fencing.markers
    assert not abort.committed and abort.producer_epoch == old.producer_epoch + 1  # markers carry the fenced epoch
    end(c, fencing, 4)
    new = c.init_producer_id("app", TIMEOUT_MS, -1, -1, 5)
    assert new.error == ErrorCode.NONE and new.producer_epoch == old.producer_epoch + 2
    for call in (lambda: c.add_partitions("app", old.producer_id, old.producer_epoch, [("t", 0)], 6),
                 lambda: c.end_transaction("app", old.producer_id, old.producer_epoch, True, 6)):
        assert call().error == ErrorCode.PRODUCER_FENCED


def test_kip360_bump_of_own_epoch_is_retry_safe():
    c = coordinator()
    first = c.init_producer_id("app", TIMEOUT_MS, -1, -1, 1)
    bumped = c.init_producer_id("app", TIMEOUT_MS, first.producer_id, first.producer_epoch, 2)
    assert bumped.producer_epoch == first.producer_epoch + 1
    retried = c.init_producer_id("app", TIMEOUT_MS, first.producer_id, first.producer_epoch, 3)
    assert (retried.producer_id, retried.producer_epoch) == (bumped.producer_id, bumped.producer_epoch)
    assert retried.records == []
    assert c.init_producer_id("app", TIMEOUT_MS, first.producer_id, 7, 4).error == ErrorCode.PRODUCER_FENCED


def test_timeout_aborts_and_fences_the_producer():
    c = coordinator()
    init = c.init_producer_id("app", 100, -1, -1, 0)
    c.add_partitions("app", init.producer_id, 0, [("t", 0)], now_ms=10)
    assert c.tick(now_ms=50).markers == []
    timed_out = c.tick(now_ms=111)
    (abort,) = timed_out.markers
    assert not abort.committed and abort.producer_epoch == 1
    end(c, timed_out, 112)
    assert c.transactions["app"].state == S.COMPLETE_ABORT
    assert c.add_partitions("app", init.producer_id, 0, [("t", 0)], 113).error == ErrorCode.PRODUCER_FENCED


def test_the_timeout_check_is_due_every_cleanup_interval():
    """The shell's timer sleeps until next_deadline_ms: the check runs when due, not a tick later."""
    c = TransactionCoordinator(TransactionCoordinatorConfig(
        transaction_abort_timed_out_transaction_cleanup_interval_ms=10_000), lambda: 1000, now_ms=0)
    assert c.next_deadline_ms() == 10_000
    c.tick(now_ms=10_000)
    assert c.next_deadline_ms() == 20_000


def test_bad_timeout_and_unknown_ids_are_refused():
    c = coordinator()
    assert c.init_producer_id("app", 0, -1, -1, 0).error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert c.init_producer_id("app", 10**9, -1, -1, 0).error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert c.add_partitions("nobody", 1, 0, [("t", 0)], 0).error == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert c.describe_transaction("nobody")["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


def test_replay_restores_every_id_and_resumes_a_prepared_commit():
    c = coordinator()
    records = []
    for transactional_id in ("a", "b"):
        init = c.init_producer_id(transactional_id, TIMEOUT_MS, -1, -1, 1)
        records += init.records
        records += c.add_partitions(transactional_id, init.producer_id, 0, [("t", 0)], 2).records
    ended = c.end_transaction("a", c.transactions["a"].producer_id, 0, True, 3)
    records += ended.records  # PrepareCommit is in the log; the coordinator fails before the markers

    successor = coordinator()
    for record in records:
        successor.replay(record.key, record.value)
    assert {k: v.state for k, v in successor.transactions.items()} == {"a": S.PREPARE_COMMIT, "b": S.ONGOING}
    assert successor.pending_markers() == ended.markers
    end(successor, TxnEffects(markers=successor.pending_markers()), 4)
    assert successor.transactions["a"].state == S.COMPLETE_COMMIT
    assert [t["transactional_id"] for t in successor.list_transactions(states=["Ongoing"])] == ["b"]


@pytest.mark.parametrize("state", list(S))
def test_transaction_log_value_round_trips(state):
    value = TransactionLogValue(42, 3, 60_000, state, frozenset({("a", 0), ("a", 2), ("b", 1)}), 10, 5)
    assert decode_value(encode_value(value)) == value


def test_transaction_version_2_bumps_the_epoch_at_every_end():
    c = coordinator()
    init = c.init_producer_id("app", TIMEOUT_MS, -1, -1, 1)
    c.add_partitions("app", init.producer_id, 0, [("t", 0)], 2, transaction_version=2)
    ended = end(c, c.end_transaction("app", init.producer_id, 0, False, 3), 4)
    assert ended.producer_epoch == 1 and ended.markers[0].producer_epoch == 1
    assert c.end_transaction("app", init.producer_id, 0, False, 5).producer_epoch == 1  # a retry of the old end
    assert c.add_partitions("app", init.producer_id, 0, [("t", 0)], 6).error == ErrorCode.PRODUCER_FENCED


def test_a_new_coordinator_loads_its_partition_under_a_new_epoch_and_unloads_it():
    """Failover: the leader of the id's __transaction_state partition replays it, stamps its
    leader epoch on the markers it resumes, and forgets the partition when it stops leading."""
    old = coordinator()
    tid, tp = "moving", ("t", 0)
    effects = old.init_producer_id(tid, 60_000, -1, -1, 0)
    log = list(effects.records)
    effects = old.add_partitions(tid, effects.producer_id, effects.producer_epoch, [tp], 1)
    log += effects.records
    log += old.end_transaction(tid, effects.producer_id, effects.producer_epoch, True, 2).records
    new = coordinator()
    partition = new.partition_for(tid)
    new.load(partition, 5, [(record.key, record.value) for record in log])
    (markers,) = new.pending_markers()
    assert (markers.committed, markers.coordinator_epoch, markers.partitions) == (True, 5, frozenset({tp}))
    new.unload(partition)
    assert new.transactions == {} and new.pending_markers() == []
