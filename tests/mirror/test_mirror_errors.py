"""Bad input to `kspec mirror`: one line saying what is wrong and how to mend it, exit 2; a
source that cannot be reached is retried with backoff and logged, not fatal."""
from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from kspec.cli import main

from mirror_helpers import MirrorProcess, kspec, wait_for, write_properties


def one_error_line(result) -> str:
    """The last stderr line of a finished `kspec` (a process or a CliRunner result), exit 2."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert getattr(result, "returncode", getattr(result, "exit_code", None)) == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[-1].startswith("Error: "), result.stderr
    return lines[-1]


@pytest.mark.parametrize("extra, says", [
    ({"A->C.enabled": "true"}, "unknown cluster alias 'C'"),
    ({"topics": "orders, (unclosed"}, "topics: '(unclosed' is not a regular expression"),
    ({"A->B.groups.exclude": "[z-a]"}, "A->B.groups.exclude: '[z-a]' is not a regular expression"),
    ({"replication.policy.class": "com.example.MyPolicy"}, "replication.policy.class: 'com.example.MyPolicy' is not known"),
    ({"emit.checkpoints.enabled": "yes"}, "emit.checkpoints.enabled: 'yes' is not true or false"),
    ({"exactly.once.support": "always"}, "exactly.once.support: 'always' is not one of"),
])
def test_a_bad_config_is_one_line_and_exit_2(tmp_path, extra, says):
    properties = write_properties(tmp_path / "mm2.properties", "A", "B", "127.0.0.1:1", "127.0.0.1:2", **extra)
    # In-process: the same click command the CLI runs, without a process start per case.
    assert says in one_error_line(CliRunner().invoke(main, ["mirror", properties]))


def test_unknown_cluster_in_clusters_option_and_missing_file(tmp_path):
    properties = write_properties(tmp_path / "mm2.properties", "A", "B", "127.0.0.1:1", "127.0.0.1:2")
    runner = CliRunner()
    assert "--clusters: unknown cluster alias 'C'" in one_error_line(
        runner.invoke(main, ["mirror", properties, "--clusters", "C"]))
    assert "cannot read" in one_error_line(runner.invoke(main, ["mirror", "record", "missing.properties", "--out", "x"]))
    # and once as a process, as a script runs it
    assert "--clusters: unknown cluster alias 'C'" in one_error_line(
        kspec("mirror", "status", properties, "--clusters", "C"))


def test_a_client_key_librdkafka_does_not_know_is_one_line_and_exit_2(tmp_path):
    properties = write_properties(tmp_path / "mm2.properties", "A", "B", "127.0.0.1:1", "127.0.0.1:2",
                                  **{"B.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule"})
    line = one_error_line(kspec("mirror", properties))
    assert line.startswith("Error: cluster B: Java JAAS configuration is not supported")
    assert line.endswith("fix or remove `B.sasl.jaas.config` in mm2.properties")


def test_the_target_refusing_topic_creation_is_one_line_and_exit_2(clusters, tmp_path):
    source, target = clusters
    properties = write_properties(tmp_path / "mm2.properties", "refusing", "refuser", source, target,
                                  **{"replication.factor": "3", "topics": "anything-at-all"})
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": source})
    admin.create_topics([NewTopic("anything-at-all", 1, 1)])["anything-at-all"].result()
    line = one_error_line(kspec("mirror", properties))
    assert "cluster refuser refused to create topic refusing.anything-at-all" in line
    assert "replication.factor" in line


def test_an_unreachable_source_is_retried_with_backoff_and_logged(clusters, tmp_path):
    _, target = clusters
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{probe.getsockname()[1]}"
    properties = write_properties(tmp_path / "mm2.properties", "gone", "here", closed, target)
    with MirrorProcess(properties) as mirror:
        wait_for(lambda: mirror.log().count("cluster gone cannot be reached") >= 3, "three retries logged",
                 mirror=mirror)
        assert "retrying in 0.5 s" in mirror.log() and "retrying in 1.0 s" in mirror.log()
        assert mirror.stop() == 0
