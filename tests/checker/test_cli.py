"""`kspec check`: exit 0 when valid, 1 on a violation, 2 on bad input; Parquet and JSON out."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
from click.testing import CliRunner

from spark_validation.anomalies import ANOMALY_SCHEMA
from spark_validation.cli import check
from spec.history import ops_table, write_history

from . import synth

KSPEC = [sys.executable, "-m", "kspec.cli", "check"]


def _history_folder(folder: Path, builder: synth.Builder) -> Path:
    write_history(ops_table(builder.ops), folder / "history.parquet")
    (folder / "run.json").write_text(json.dumps({"sub_via": ["assign"], "ww_deps": True}))
    return folder


def test_bad_input_exits_2_with_one_line(tmp_path):
    missing = subprocess.run([*KSPEC, str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2
    assert missing.stderr.strip().count("\n") == 0 and "does not exist" in missing.stderr
    (tmp_path / "history.parquet").write_text("not parquet")
    unknown = subprocess.run([*KSPEC, str(tmp_path), "--checks", "lost-write,teleport"], capture_output=True,
                             text=True, timeout=60)
    assert unknown.returncode == 2 and "teleport" in unknown.stderr
    broken = subprocess.run([*KSPEC, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert broken.returncode == 2 and "history.parquet" in broken.stderr


def test_violation_exits_1_and_writes_anomalies_and_verdict(spark, tmp_path):
    folder = _history_folder(tmp_path / "run", synth.injected_history())
    verdict_copy = tmp_path / "verdict-copy.json"
    result = CliRunner().invoke(check, [str(folder), "--checks", "lost-write,unseen", "--json", str(verdict_copy)])
    assert result.exit_code == 1, result.output
    assert "lost-write" in result.output and "INVALID" in result.output
    assert "[1/2] lost-write" in result.stderr and "[2/2] unseen" in result.stderr  # the progress line
    anomalies = pq.read_table(folder / "check" / "anomalies.parquet")
    assert anomalies.schema.equals(ANOMALY_SCHEMA)
    assert sorted(anomalies.column("anomaly").to_pylist()) == ["lost-write", "lost-write", "unseen", "unseen", "unseen"]
    verdict = json.loads(verdict_copy.read_text())
    assert verdict == json.loads((folder / "check" / "verdict.json").read_text())
    assert verdict["guarantees"]["DUR-1"] == {"status": "violated", "anomalies": {"lost-write": 2, "unseen": 3}}
    assert verdict["valid"] is False and verdict["checks"] == ["lost-write", "unseen"]


def test_clean_history_exits_0(spark, tmp_path):
    folder = _history_folder(tmp_path / "run", synth.clean_history())
    out = tmp_path / "out"
    result = CliRunner().invoke(check, [str(folder / "history.parquet"), "--checks", "duplicate,G1a", "--out", str(out)])
    assert result.exit_code == 0, result.output
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["valid"] and verdict["guarantees"] == {"IDM-1": {"status": "held", "anomalies": {}},
                                                          "TXN-2": {"status": "held", "anomalies": {}}}
