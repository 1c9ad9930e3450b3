"""Jepsen history.edn imported with Spark, in ranges read in parallel: the same table, verdicts and
evidence as the in-process reader; one map a line or spread over lines; reused on a second check;
bad input named by file and line, with nothing left behind."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from spark_validation.checker import resolve_history, run_checks
from spark_validation.cli import check
from spark_validation.frames import history_files
from spark_validation.jepsen import JepsenError, read_edn_rows
from spark_validation.jepsen_import import import_edn

FIXTURES = Path(__file__).parent / "fixtures"
SMALL_RANGE_BYTES = 1000  # about ten lines a range: invocations and completions fall in different ranges


def _imported_table(history_dir: Path) -> pa.Table:
    return pa.concat_tables(pq.read_table(f) for f in history_files(history_dir))


def findings(result) -> tuple[list[str], dict]:
    """A check's anomaly rows (in a fixed order) and its verdict, less where the history was and the timings."""
    rows = sorted(json.dumps(r, sort_keys=True) for r in result.anomalies.to_pylist())
    verdict = {k: v for k, v in json.loads(json.dumps(result.verdict)).items() if k not in ("history", "seconds")}
    return rows, verdict


def _pretty(text: str) -> str:
    """The same history with every op map spread over several lines."""
    return text.replace(", :", ",\n   :")


@pytest.mark.parametrize("fixture", ["jepsen-anomalies.edn", "jepsen-clean.edn"])
def test_ranges_read_in_parallel_give_the_in_process_table(spark, tmp_path, fixture):
    edn = FIXTURES / fixture
    history_dir = import_edn(spark, edn, tmp_path / "out" / "history.parquet", SMALL_RANGE_BYTES)
    assert len(history_files(history_dir)) > 1
    assert _imported_table(history_dir).equals(read_edn_rows(edn))


def test_ranges_read_in_parallel_give_the_in_process_verdict_and_evidence(spark, tmp_path, jepsen_anomalies):
    in_process, expected = jepsen_anomalies
    history_dir = import_edn(spark, FIXTURES / "jepsen-anomalies.edn", tmp_path / "out" / "history.parquet",
                             SMALL_RANGE_BYTES)
    options = resolve_history(in_process, tmp_path)[1]
    assert findings(run_checks(spark, history_dir, options)) == findings(expected)
    assert expected.anomalies.num_rows > 10


def test_maps_spread_over_lines_read_as_one_range_give_the_same_table(spark, tmp_path):
    edn = tmp_path / "pretty.edn"
    edn.write_text(_pretty((FIXTURES / "jepsen-anomalies.edn").read_text()))
    history_dir = import_edn(spark, edn, tmp_path / "out" / "history.parquet", SMALL_RANGE_BYTES)
    assert len(history_files(history_dir)) == 1  # a map crossed a range boundary: read again as one range
    expected = read_edn_rows(FIXTURES / "jepsen-anomalies.edn")
    assert _imported_table(history_dir).equals(expected)


def test_a_second_check_of_the_same_file_reuses_the_import_and_a_changed_file_is_read_again(spark, tmp_path):
    edn = tmp_path / "history.edn"
    edn.write_text((FIXTURES / "jepsen-anomalies.edn").read_text())
    out = tmp_path / "history-check"
    path, _ = resolve_history(edn, out)
    parts = {f: os.stat(f).st_mtime_ns for f in history_files(path)}
    assert resolve_history(edn, out)[0] == path
    assert {f: os.stat(f).st_mtime_ns for f in history_files(path)} == parts
    edn.write_text((FIXTURES / "jepsen-clean.edn").read_text())
    resolve_history(edn, out)
    assert _imported_table(path).equals(read_edn_rows(edn))


LINE_7 = '{:index 6, :time 7000, :process 2, :type :invoke, :f :send, :value [[:send 4 10] [:send 4 11]]}'
BAD_LINES = {
    "a line that is not an op map": ("[:send 4 10]", "expected an op map"),
    "an unknown :f": (LINE_7.replace(":f :send", ":f :teleport"), "unknown :f :teleport"),
    "a value of the wrong type": (LINE_7.replace("[:send 4 11]", '[:send 4 "eleven"]'),
                                  "a record value must be an integer, got 'eleven'"),
    "a bad :time": (LINE_7.replace(":time 7000", ":time :later"), ":time must be an integer"),
}


def _with_line_11(tmp_path: Path, line: str) -> Path:
    lines = (FIXTURES / "jepsen-anomalies.edn").read_text().splitlines()
    assert lines[10] == LINE_7
    lines[10] = line
    edn = tmp_path / "history.edn"
    edn.write_text("\n".join(lines) + "\n")
    return edn


@pytest.mark.parametrize("case", BAD_LINES)
def test_a_bad_line_is_named_by_its_line_and_problem(tmp_path, case):
    line, problem = BAD_LINES[case]
    with pytest.raises(JepsenError) as raised:
        read_edn_rows(_with_line_11(tmp_path, line))
    assert raised.value.line == 11 and problem in raised.value.problem


def test_a_bad_line_in_a_later_range_is_named_by_its_line_in_the_file_and_leaves_nothing(spark, tmp_path):
    edn = _with_line_11(tmp_path, BAD_LINES["an unknown :f"][0])
    with pytest.raises(JepsenError) as raised:
        import_edn(spark, edn, tmp_path / "out" / "history.parquet", SMALL_RANGE_BYTES)
    assert raised.value.line == 11 and "unknown :f :teleport" in raised.value.problem
    assert not (tmp_path / "out").exists()


def test_a_truncated_file_exits_2_with_one_line_naming_the_last_line(spark, tmp_path):
    text = (FIXTURES / "jepsen-anomalies.edn").read_text()
    edn = tmp_path / "history.edn"
    edn.write_text(text[:len(text) - 40])
    out = tmp_path / "results"
    result = CliRunner().invoke(check, [str(edn), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().count("\n") == 0
    assert f"kspec check: {edn}, line {len(text.splitlines())}: the file ends inside this form (truncated?)" \
        in result.stderr
    assert not out.exists()
