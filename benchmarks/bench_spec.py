"""The executable specification's figures: explorer states/s, the largest replication
configuration exhausted within ten minutes, model and core simulator steps/s, and the long
profile of the refinement machines.

Run: .venv/bin/python benchmarks/bench_spec.py (or `make bench`).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

from spec.explorer import explore
from spec.models.replication import ReplicationConfig, ReplicationModel
from spec.simulator import simulate

EXHAUST_SECONDS_MAX = 600
# Ascending sizes: (replicas, records, leader epochs, crashes); the aim is 3, 3, 3 with crashes.
CONFIGURATIONS = [(2, 2, 3, 0), (2, 3, 4, 2), (3, 2, 3, 0), (3, 2, 3, 1), (3, 3, 3, 0), (3, 3, 3, 1)]
SIMULATION_STEPS = 200_000
CORE_SIMULATION_STEPS = 20_000


def explorer_figures() -> None:
    largest = None
    for replicas, records, epochs, crashes in CONFIGURATIONS:
        model = ReplicationModel(ReplicationConfig(replicas=replicas, records=records, max_epochs=epochs,
                                                   truncation="kip320", max_crashes=crashes))
        result = explore(model, max_seconds=EXHAUST_SECONDS_MAX)
        verdict = "exhausted" if result.exhausted else (
            "VIOLATION" if result.counterexample else f"not exhausted in {EXHAUST_SECONDS_MAX} s")
        print(f"explore kip320 replicas={replicas} records={records} epochs={epochs} crashes={crashes}: "
              f"{result.states:,} states, depth {result.depth}, {result.seconds:.1f} s, "
              f"{result.states_per_second:,.0f} states/s, {verdict}", flush=True)
        if result.counterexample is not None:
            print(result.counterexample.render(model))
        if not result.exhausted:
            break
        largest = (replicas, records, epochs, crashes)
    print(f"largest configuration exhausted within {EXHAUST_SECONDS_MAX} s: replicas, records, epochs, "
          f"crashes = {largest}", flush=True)


def simulator_figures() -> None:
    model = ReplicationModel(ReplicationConfig(replicas=3, records=5, max_epochs=8, truncation="kip320",
                                               max_crashes=3))
    result = simulate(model, seed=1, steps=SIMULATION_STEPS)
    print(f"simulate kip320 replicas=3 records=5 epochs=8 crashes=3 seed=1: {result.steps:,} steps in "
          f"{result.walks:,} walks, {result.steps_per_second:,.0f} steps/s, "
          f"{'VIOLATION' if result.counterexample else 'no violation'}", flush=True)


def core_simulation_figures() -> None:
    from spec.cluster_simulation import run

    started = time.monotonic()
    simulation, violation = run(seed=1, steps=CORE_SIMULATION_STEPS)
    seconds = time.monotonic() - started
    print(f"simulate --cores seed=1: {simulation.steps:,} steps, {simulation.steps / seconds:,.0f} steps/s, "
          f"{len(simulation.acked)} acked, {'VIOLATION ' + violation.problem if violation else 'no violation'}",
          flush=True)


def refinement_long_profile() -> int:
    started = time.monotonic()
    code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "tests/spec/test_refinement_storage.py",
                            "tests/spec/test_refinement_producer_state.py"],
                           env={**os.environ, "KSPEC_SPEC_PROFILE": "long"})
    print(f"storage refinement, long profile: exit {code} in {time.monotonic() - started:.0f} s", flush=True)
    return code


if __name__ == "__main__":
    explorer_figures()
    simulator_figures()
    core_simulation_figures()
    sys.exit(refinement_long_profile())
