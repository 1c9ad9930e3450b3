"""The node commands a run gets for a LocalCluster (`python -m conformance.nodes VERB DIR N`)
pause, resume and stop a real process through the pid file the cluster keeps for each node."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from conformance import nodes

NODE_ID = 1


@pytest.fixture
def node(tmp_path):
    """A long-running process recorded as node 1 of a cluster in tmp_path (nodes' own files)."""
    process = subprocess.Popen(["sleep", "600"])
    (tmp_path / f"node{NODE_ID}.pid").write_text(str(process.pid))
    yield process
    process.kill()
    process.wait()


def run_command(verb: str, base_dir) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance.nodes", verb, str(base_dir), str(NODE_ID)],
                          capture_output=True, text=True, timeout=60)


def test_pause_stops_the_process_and_resume_lets_it_run(node, tmp_path):
    assert run_command("pause", tmp_path).returncode == 0
    assert nodes._state(node.pid) == nodes.PAUSED_STATE
    assert run_command("resume", tmp_path).returncode == 0
    assert nodes._state(node.pid) not in (nodes.PAUSED_STATE, None)


def test_a_paused_node_is_stopped_by_sigterm_too(node, tmp_path):
    """LocalCluster.stop() sends SIGTERM, which a stopped process only acts on once continued."""
    assert run_command("pause", tmp_path).returncode == 0
    nodes.stop_node(tmp_path, NODE_ID, signal.SIGTERM, timeout_s=30)
    assert node.wait(timeout=30) == -signal.SIGTERM


def test_pausing_a_node_that_is_not_running_fails_with_a_reason(tmp_path):
    done = run_command("pause", tmp_path)
    assert done.returncode != 0 and "node 1 is not running" in done.stderr


def test_an_unknown_verb_is_a_usage_error(tmp_path):
    done = run_command("freeze", tmp_path)
    assert done.returncode == 2 and "stop|start|pause|resume" in done.stderr


def test_a_command_on_a_directory_without_a_cluster_says_so_in_one_line(tmp_path):
    for verb in ("pause", "start"):
        done = run_command(verb, tmp_path)
        assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "kspec cluster --nodes N --data-dir" in done.stderr
