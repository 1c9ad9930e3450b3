"""spec/models/mirror.py explored exhaustively with mirror crashes: MIR-1..3 hold for the
mirror as built (progress after the records, in one transaction with exactly once; syncs after
commits; translation one past the newest sync), and each of two mistakes is caught as a
shortest counterexample."""
from __future__ import annotations

import subprocess
import sys

import pytest

from spec.explorer import explore
from spec.model import Invariant
from spec.models.mirror import MirrorConfig, MirrorModel, no_record_twice


@pytest.mark.guarantee("MIR-1", "MIR-2", "MIR-3")
@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "at-least-once"])
def test_the_mirror_keeps_every_guarantee_through_two_crashes(exactly_once):
    result = explore(MirrorModel(MirrorConfig(records=3, crashes=2, exactly_once=exactly_once)))
    assert result.exhausted and result.counterexample is None and result.states > 5_000


def test_at_least_once_duplicates_so_mir_2_needs_exactly_once():
    model = MirrorModel(MirrorConfig(records=2, crashes=1, exactly_once=False))
    model.invariants += (Invariant("MIR-2", "no record copied twice", no_record_twice),)
    found = explore(model, guarantee_ids={"MIR-2"}).counterexample
    assert found is not None and "twice" in found.problem
    assert [step[0][0] for step in found.steps[1:]].count("Crash") == 1


@pytest.mark.guarantee("MIR-1")
def test_committing_progress_before_the_records_are_written_loses_them():
    model = MirrorModel(MirrorConfig(records=3, crashes=1, commit_before_write=True))
    found = explore(model).counterexample
    assert found is not None and found.guarantee_id == "MIR-1"
    assert found.invariant == "progress only past copied records" and len(found.steps) - 1 == 3
    assert "lost" in found.render(model)


@pytest.mark.guarantee("MIR-3")
def test_extrapolating_a_translation_skips_records_after_a_gap():
    found = explore(MirrorModel(MirrorConfig(records=3, crashes=0, extrapolate=True))).counterexample
    assert found is not None and found.guarantee_id == "MIR-3"
    # The source had a gap (a marker or a compacted record): the copies are denser than the source.
    assert ("Produce", "gap") in [step[0] for step in found.steps[1:]]


def test_kspec_spec_explore_runs_the_mirror_model():
    command = [sys.executable, "-m", "kspec.cli", "spec", "explore", "--model", "mirror", "--records", "3"]
    held = subprocess.run([*command, "--crashes", "1"], capture_output=True, text=True, timeout=120)
    assert held.returncode == 0 and "exhausted" in held.stdout, held.stdout + held.stderr
    caught = subprocess.run([*command, "--bug", "commit-before-write"], capture_output=True, text=True, timeout=120)
    assert caught.returncode == 1 and "MIR-1 (progress only past copied records) violated" in caught.stdout
