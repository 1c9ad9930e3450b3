"""The transactions model: exhaustive with today's rules, each historical switch caught as a short story.

With KIP-890's epoch bump per transaction and the aborted-transaction filter, every invariant
holds in every reachable state of two partitions, two transactions and one fencing
InitProducerId. Each switch gives a shortest counterexample naming the invariant it breaks,
and the scenarios read as the stories of KAFKA-17754 and of zombie fencing.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import broken_guarantees, play
from spec.explorer import explore
from spec.models.transactions import ABORT, COMMIT, DATA, Entry, TransactionsConfig, TransactionsModel

pytestmark = pytest.mark.timeout(120)

KSPEC = [str(Path(sys.executable).with_name("kspec")), "spec", "explore", "--model", "transactions"]

# KAFKA-17754: a write is delayed past its transaction's abort marker, the producer adds the
# same partition to its next transaction, then the delayed write lands.
LATE_WRITE_STORY = [("Begin", 0), ("AddPartitionsToTxn", 0, 0), ("Produce", 0, 0), ("EndTxn", 0, ABORT),
                    ("WriteTxnMarker", 0), ("Begin", 0), ("AddPartitionsToTxn", 0, 0), ("Land", 0, 0)]


def test_every_invariant_holds_in_every_reachable_state_with_todays_rules():
    result = explore(TransactionsModel(TransactionsConfig()))
    assert result.exhausted and result.counterexample is None
    assert result.states > 100_000 and len(result.checked) == 4


def test_without_the_epoch_bump_a_late_write_joins_the_next_transaction():
    model = TransactionsModel(TransactionsConfig(late_produce_joins_next_transaction=True))
    found = explore(model).counterexample
    assert found is not None and (found.guarantee_id, found.invariant) == \
        ("TXN-1", "a late write never joins the next transaction")
    assert len(found.steps) - 1 == len(LATE_WRITE_STORY) == 8
    assert found.problem == "partition 0 holds records of transactions [0, 1] in one transaction"
    assert found.steps[-1][0][:3] == ("Land", 0, 0)


def test_the_late_write_is_fenced_once_the_marker_carries_the_bumped_epoch():
    model = TransactionsModel(TransactionsConfig())
    (*_, (_, state)) = play(model, LATE_WRITE_STORY)
    assert state.logs[0] == (Entry(ABORT, 1, 0),) and not state.in_flight
    assert broken_guarantees(model, state) == set()


def test_serving_aborted_records_breaks_read_committed():
    model = TransactionsModel(TransactionsConfig(serve_aborted_to_read_committed=True))
    found = explore(model).counterexample
    assert found is not None and (found.guarantee_id, found.invariant) == \
        ("TXN-2", "read_committed returns only committed records")
    assert found.steps[-1][0] == ("ReadCommitted", 0) and "aborted" in found.problem


def test_a_zombie_write_landing_after_the_fence_marker_is_refused():
    model = TransactionsModel(TransactionsConfig())
    path = play(model, [("Begin", 0), ("AddPartitionsToTxn", 0, 0), ("Produce", 0, 0), ("InitProducerId", 1),
                        ("WriteTxnMarker", 0), ("Land", 0, 0), ("ReadCommitted", 0)])
    state = path[-1][1]
    assert state.outcomes == (ABORT,) and state.producers[1].epoch == 1 and state.producers[0].epoch == 0
    assert state.logs[0] == (Entry(ABORT, 1, 0),) and state.read == ((), ())


def test_the_fence_and_outcome_invariants_flag_states_no_switch_reaches():
    model = TransactionsModel(TransactionsConfig())
    (*_, (_, state)) = play(model, [("Begin", 0), ("AddPartitionsToTxn", 0, 0), ("InitProducerId", 1),
                                    ("WriteTxnMarker", 0)])
    zombie_appended = state._replace(logs=(state.logs[0] + (Entry(DATA, 0, 0),), ()))
    assert model.no_append_after_fence(state) is None
    assert model.no_append_after_fence(zombie_appended) == "partition 0 appended epoch 0 at offset 1 after epoch 1"
    assert "TXN-1" in broken_guarantees(model, zombie_appended)
    decided_commit = state._replace(outcomes=(COMMIT,))
    assert model.one_outcome(decided_commit) == \
        "partition 0 ended transaction 0 with abort, but the coordinator decided commit"


def test_the_cli_exits_0_when_exhausted_and_1_with_the_kafka_17754_trace():
    holds = subprocess.run([*KSPEC, "--records", "1"], capture_output=True, text=True, timeout=120)
    assert holds.returncode == 0 and "exhausted" in holds.stdout, holds.stdout + holds.stderr
    broken = subprocess.run([*KSPEC, "--bug", "late-produce-joins-next-transaction"],
                            capture_output=True, text=True, timeout=120)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "TXN-1 (a late write never joins the next transaction) violated after 8 steps" in broken.stdout
    assert "  8. c0's write to partition 0 (epoch 0, transaction 0) lands" in broken.stdout
