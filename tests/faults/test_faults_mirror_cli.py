"""`kspec faults run --workload mirror`'s options: a bad --mirror-set key, a nemesis the mirror
run has not, or a mirror option without the mirror workload is one line, before anything starts."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from faults.cli import faults


@pytest.mark.parametrize("arguments, message, exit_code", [
    (["--workload", "mirror", "--mirror-set", "tasks.max=0"], "--mirror-set: tasks.max: '0' is not a whole number >= 1", 1),
    (["--workload", "mirror", "--mirror-set", "topics=("], "--mirror-set: topics: '(' is not a regular expression", 1),
    (["--workload", "mirror", "--mirror-set", "exactly.once.support=always"],
     "exactly.once.support: 'always' is not one of requested, required, enabled", 1),
    (["--workload", "mirror", "--mirror-set", "tasks.max"], "--mirror-set 'tasks.max' is not KEY=VALUE", 2),
    (["--workload", "mirror", "--nemesis", "power"], "takes the nemeses partition, kill, pause", 1),
    (["--workload", "mirror", "--network", "proxy"], "drop --network proxy", 1),
    (["--workload", "mirror", "--txn"], "drop --txn, --sub-via and --topic-config", 2),
    (["--mirror-set", "tasks.max=2"], "add --workload mirror", 2),
])
def test_a_bad_mirror_run_option_is_one_line(tmp_path, arguments, message, exit_code):
    result = CliRunner().invoke(faults, ["run", *arguments, "--out", str(tmp_path / "out")])
    assert result.exit_code == exit_code and message in result.output, result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: ") and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()
