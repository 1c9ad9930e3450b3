"""`kspec faults run` and `soak` options: --set passes checked broker properties, --nemesis
PACKAGE:VARIANT holds a package to one variant, and a bad value is one line and exit 2."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from faults.cli import broker_properties, faults, parse_nemeses


def test_set_passes_kafka_properties_through_checked():
    assert broker_properties(("log.flush.interval.messages=1", "log.flush.interval.ms = 50")) == {
        "log.flush.interval.messages": "1", "log.flush.interval.ms": "50"}


def test_nemesis_variants_hold_a_package_to_one_variant():
    assert parse_nemeses("partition, power:all,clock") == (("partition", "power", "clock"), {"power": "all"})
    assert parse_nemeses("none") == ((), {})


@pytest.mark.parametrize("arguments, message", [
    (["--set", "log.flush.interval.messages"], "is not KEY=VALUE"),
    (["--set", "log.flush.intervall.messages=1"], "unknown broker property 'log.flush.intervall.messages'"),
    (["--set", "log.flush.interval.messages=0"], "flush.messages=0 is outside [1,"),
    (["--nemesis", "power:half"], "power has no variant 'half'; choose from one, leader, minority, all"),
    (["--nemesis", "flood"], "unknown nemesis 'flood'"),
])
@pytest.mark.parametrize("command", ["run", "soak"])
def test_a_bad_option_is_one_line_and_exit_2(tmp_path, command, arguments, message):
    extra = ["--runs", "1"] if command == "soak" else []
    result = CliRunner().invoke(faults, [command, *extra, *arguments, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and message in result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: ") and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_topic_config_passes_kafka_topic_configs_through_checked():
    from faults.cli import topic_config
    assert topic_config(("cleanup.policy=compact", "segment.bytes = 2048")) == {
        "cleanup.policy": "compact", "segment.bytes": "2048"}


@pytest.mark.parametrize("arguments, message", [
    (["--topic-config", "cleanup.policy"], "is not KEY=VALUE"),
    (["--topic-config", "cleanup.polcy=compact"], "unknown topic config 'cleanup.polcy'"),
    (["--topic-config", "segment.bytes=1"], "segment.bytes=1 is outside [14,"),
    (["--sub-via", "subscribe", "--txn"], "--txn runs in assign mode"),
    (["--assignor", "sticky"], "'sticky' is not one of"),
    (["--acks", "1", "--idempotence"], "--idempotence needs --acks all"),
    (["--workload", "all", "--txn", "--acks", "1"], "--workload all sets transactions, subscribe mode, acks and "
                                                    "topic configs per lane (faults/lanes.py): drop --txn, --acks 1"),
])
def test_a_bad_group_or_topic_option_is_one_line_and_exit_2(tmp_path, arguments, message):
    result = CliRunner().invoke(faults, ["run", *arguments, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and message in result.output, result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: ") and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_the_quixstreams_workload_is_refused_in_one_line_without_its_python_or_with_transactions(tmp_path, monkeypatch):
    run_folder = tmp_path / "out"
    with_txn = CliRunner().invoke(faults, ["run", "--workload", "quixstreams", "--txn", "--out", str(run_folder)])
    assert with_txn.exit_code == 2 and "drop --txn" in with_txn.output and "Traceback" not in with_txn.output
    monkeypatch.setenv("KSPEC_STREAMS_PYTHON", "/bin/false")
    missing = CliRunner().invoke(faults, ["run", "--workload", "quixstreams", "--out", str(run_folder)])
    assert missing.exit_code == 1 and "cannot import quixstreams: run `make setup`" in missing.output
    assert missing.output.strip().splitlines()[-1].startswith("Error: ") and not run_folder.exists()


@pytest.mark.parametrize("contents, message", [
    ("security.protocol=SASL_TLS\n", 'Invalid value "SASL_TLS" for configuration property "security.protocol"'),
    ("sasl.mechanizm=PLAIN\n", 'No such configuration property: "sasl.mechanizm"'),
    (None, "cannot read client properties"),
])
def test_a_bad_command_config_is_one_line_and_exit_2_before_anything_starts(tmp_path, contents, message):
    path = tmp_path / "client.properties"
    if contents is not None:
        path.write_text(contents)
    result = CliRunner().invoke(faults, ["run", "--command-config", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and message in result.output, result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: --command-config: ")
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def test_secure_makes_its_own_client_properties_so_it_takes_no_command_config(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_SSL\n")
    result = CliRunner().invoke(faults, ["run", "--secure", "--command-config", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "--secure" in result.output.strip().splitlines()[-1]
