"""`kspec spec explore` and `kspec spec simulate` as a user runs them: real processes, exit codes."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

KSPEC = [str(Path(sys.executable).with_name("kspec")), "spec"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*KSPEC, *args], capture_output=True, text=True, timeout=120)


def test_explore_prints_the_shortest_counterexample_and_exits_1():
    done = run("explore", "--model", "replication", "--replicas", "2", "--records", "2", "--truncation", "hw")
    assert done.returncode == 1, done.stderr
    assert "DUR-1 (acked records on every ISR member) violated after 9 steps" in done.stdout
    assert "  9. r" in done.stdout and "states/s" in done.stdout


def test_explore_exits_0_when_the_bound_is_exhausted():
    done = run("explore", "--replicas", "2", "--records", "2", "--truncation", "kip320", "--max-epochs", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "exhausted" in done.stdout


def test_bad_arguments_get_one_line_and_exit_2():
    for args in (["explore", "--truncation", "kip999"], ["explore", "--replicas", "9"],
                 ["explore", "--max-states", "0"], ["simulate"]):
        done = run(*args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--help" in done.stderr, done.stderr


def test_simulate_reproduces_a_run_from_its_seed():
    args = ("simulate", "--seed", "11", "--steps", "3000", "--replicas", "3", "--records", "4",
            "--max-epochs", "6", "--truncation", "hw")
    first, second = run(*args), run(*args)
    assert first.returncode == second.returncode == 1
    trace = lambda out: out.split("\n", 1)[1]  # the first line carries the timing
    assert trace(first.stdout) == trace(second.stdout) and "violated" in first.stdout


def test_simulate_of_the_fixed_protocol_holds():
    done = run("simulate", "--seed", "3", "--steps", "5000", "--replicas", "3", "--records", "4",
               "--max-epochs", "6", "--crashes", "2")
    assert done.returncode == 0, done.stdout


def test_simulate_cores_runs_the_reference_replicas():
    done = run("simulate", "--seed", "1", "--steps", "500", "--cores")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "records acked" in done.stdout and "every invariant held" in done.stdout
