"""The harness itself dies: after Ctrl-C it has torn everything down; after kill -9 the
history recorded so far is readable and `kspec faults clean` removes what was left."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from faults import net
from faults.recorder import PARTS_DIR, merge_parts
from faults_helpers import brokers_of, wait_until
from spec.history import read_history

KSPEC = str(Path(sys.executable).parent / "kspec")


def start_run(out_dir: Path, state_dir: Path, network: str) -> subprocess.Popen:
    env = {**os.environ, "KSPEC_FAULTS_STATE_DIR": str(state_dir)}
    return subprocess.Popen([KSPEC, "faults", "run", "--nemesis", "pause", "--interval", "2", "--time-limit", "120",
                             "--rate", "100", "--concurrency", "2", "--network", network, "--out", str(out_dir)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def recording(out_dir: Path) -> bool:
    return len(list((out_dir / PARTS_DIR).glob("part-*.parquet"))) >= 2


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(90)
def test_ctrl_c_tears_down_nodes_and_namespaces(namespaces_available, tmp_path):
    out_dir, state_dir = tmp_path / "run", tmp_path / "state"
    harness = start_run(out_dir, state_dir, "netns")
    try:
        assert wait_until(lambda: recording(out_dir), 45.0), harness.stderr.read1().decode()
        brokers = brokers_of(out_dir)
        assert brokers
        harness.send_signal(signal.SIGINT)
        assert harness.wait(60) == 130
    finally:
        if harness.poll() is None:
            harness.kill()
        leftover = net.clean_all(state_dir)
    assert leftover == []
    assert not any(alive(pid) for pid in brokers)


@pytest.mark.timeout(90)
def test_after_kill_9_of_the_harness_the_history_so_far_is_readable_and_clean_removes_the_rest(tmp_path):
    out_dir, state_dir = tmp_path / "run", tmp_path / "state"
    harness = start_run(out_dir, state_dir, "proxy")
    try:
        assert wait_until(lambda: recording(out_dir), 45.0), harness.stderr.read1().decode()
        brokers = brokers_of(out_dir)
        harness.kill()
        harness.wait()
        assert brokers and all(alive(pid) for pid in brokers), "the broker outlives its harness"
        recorded = pq.read_table(out_dir / PARTS_DIR)
        assert recorded.num_rows > 0
    finally:
        env = {**os.environ, "KSPEC_FAULTS_STATE_DIR": str(state_dir)}
        cleaned = subprocess.run([KSPEC, "faults", "clean"], env=env, capture_output=True, text=True)
    assert cleaned.returncode == 0 and all(f"removed process {pid}" in cleaned.stdout for pid in brokers), cleaned
    assert wait_until(lambda: not any(alive(pid) for pid in brokers), 5.0)
    history = read_history(merge_parts(out_dir))
    assert history.num_rows == recorded.num_rows
