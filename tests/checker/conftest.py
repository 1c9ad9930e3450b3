"""One Spark session for the checker tests, and checked synthetic histories."""
from __future__ import annotations

from pathlib import Path

import pytest

from spark_validation.checker import run_checks
from spark_validation.jepsen import read_edn_rows
from spark_validation.options import RunOptions
from spark_validation.session import spark_session
from spec.history import ops_table, write_history
from . import synth


@pytest.fixture(scope="session")
def spark():
    session = spark_session("local[2]", "kspec-checker-tests")
    yield session
    session.stop()


def check_ops(spark, ops, path: Path, options: RunOptions = RunOptions()):
    write_history(ops_table(ops), path)
    return run_checks(spark, path, options)


@pytest.fixture(scope="session")
def injected(spark, tmp_path_factory):
    """The injected history and the checker's result on it."""
    b = synth.injected_history()
    return b, check_ops(spark, b.ops, tmp_path_factory.mktemp("injected") / "history.parquet")


@pytest.fixture(scope="session")
def jepsen_anomalies(spark, tmp_path_factory):
    """fixtures/jepsen-anomalies.edn read in this process, and the checker's result on it with local[2]."""
    edn = Path(__file__).parent / "fixtures" / "jepsen-anomalies.edn"
    parquet = write_history(read_edn_rows(edn), tmp_path_factory.mktemp("jepsen") / "history.parquet")
    return parquet, run_checks(spark, parquet, RunOptions(sub_via=frozenset({"assign"})))


@pytest.fixture(scope="session")
def clean(spark, tmp_path_factory):
    b = synth.clean_history()
    return b, check_ops(spark, b.ops, tmp_path_factory.mktemp("clean") / "history.parquet")
