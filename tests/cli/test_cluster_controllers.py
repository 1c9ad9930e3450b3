"""`kspec cluster --nodes N --controllers M`: KRaft's separate layout from the command line:
which node is what, node control by id for controllers too, and one-line errors."""
from __future__ import annotations

import shlex
import signal
import subprocess

import pytest

from .helpers import CLI_TIMEOUT_S, KSPEC, kspec


@pytest.mark.parametrize("args, error", [
    (["--controllers", "2"], "--controllers needs --nodes"),
    (["--nodes", "2", "--controllers", "0"], "Invalid value for '--controllers': 0 is not in the range x>=1"),
    (["--nodes", "2", "--controllers", "three"], "Invalid value for '--controllers'"),
])
def test_a_bad_controllers_value_is_one_line(args, error):
    run = kspec("cluster", *args)
    assert run.returncode == 2 and error in run.error_line()


def test_separate_controllers_are_listed_and_controlled_by_id(tmp_path):
    command = [*KSPEC, "cluster", "--nodes", "1", "--controllers", "1", "--data-dir", str(tmp_path)]
    cluster = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               stdin=subprocess.DEVNULL, text=True)
    try:
        printed = []
        while not printed or "bootstrap=" not in printed[-1]:
            line = cluster.stdout.readline()
            assert line, f"kspec cluster ended early after {printed}"
            printed.append(line.strip())
        assert [line.split()[1] for line in printed if line.startswith("node ") and "pid=" in line] == ["3001", "1"]
        assert "brokers (process.roles=broker): 1  controllers (process.roles=controller): 3001" in printed
        ready = printed[-1].split()
        assert ready[:5] == ["kspec", "cluster", "ready", "nodes=1", "controllers=1"]
        bootstrap = ready[5].removeprefix("bootstrap=")
        control = shlex.split(next(line for line in printed if line.startswith("node control: ")))
        for template in (control[3], control[5]):  # stop (kill -9) the controller, then start it again
            subprocess.run(shlex.split(template.replace("{node_id}", "3001")), check=True, timeout=CLI_TIMEOUT_S)
        created = kspec("topics", "create", "after-controller-restart", "-b", bootstrap)
        assert created.returncode == 0, created.stderr
    finally:
        cluster.send_signal(signal.SIGTERM)
        assert cluster.wait(CLI_TIMEOUT_S) == 0
