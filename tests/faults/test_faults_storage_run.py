"""A whole fault run with the power and clock nemeses: each starts and heals, the power cuts
record what they dropped, nothing acked is lost when every record is fsynced
(log.flush.interval.messages=1), and nothing stays mounted. (Disk and io faults are left out:
an fsync that fails under them leaves the record in the log, an idempotent retry of it is then
acked as a duplicate, and a later cut drops it; see faults/README.md.)"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from faults import clock, disk, net
from faults.run import RunOptions, run
from faults.workload import WorkloadOptions

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("fusermount3") is None,
                                reason="the storage nemeses need root and fusermount3 (Debian: fuse3)")


@pytest.mark.timeout(150)
def test_a_run_under_power_and_clock_faults_with_flush_per_message_loses_nothing_acked(
        namespaces_available, tmp_path):
    try:
        clock.libfaketime()
    except clock.ClockUnavailable as e:
        pytest.skip(str(e))
    out_dir = tmp_path / "faults-run"
    result = run(RunOptions(nodes=1, nemeses=("power", "clock"), time_limit_s=20, interval_s=3,
                            quiet_s=2, network="netns", seed=3,
                            broker_properties={"log.flush.interval.messages": "1"},
                            workload=WorkloadOptions(concurrency=4, rate_hz=100)), out_dir)

    assert result.final_reads_complete and result.acked_missing == 0
    timeline = [json.loads(line) for line in (out_dir / "nemesis.jsonl").read_text().splitlines()]
    started = {flip["package"] for flip in timeline if flip["action"] == "start" and "error" not in flip["value"]}
    assert started == {"power", "clock"}
    cuts = [flip["value"] for flip in timeline if flip["action"] == "start" and flip["package"] == "power"]
    assert all(set(cut["dropped_bytes"]) == {"0"} for cut in cuts)
    assert not os.path.ismount(out_dir / "node-0") and (out_dir / "node-0" / "meta.properties").exists()
    assert not (out_dir / "node-0.disk").exists()
    run_name = f"ksf{os.getpid() % 100000}"  # faults/run.py names a run's state after its process
    assert not disk.state_path(run_name).exists()
    assert not list((net.STATE_DIR / clock.STATE_SUBDIR).glob(f"{run_name}-*"))
