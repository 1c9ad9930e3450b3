"""Errors: one line saying what is wrong and how to mend it, a non-zero exit, never a traceback.

Exit codes: 1 when the broker side failed (unreachable, unknown topic, refused request),
2 for bad usage (nothing is sent).
"""
from __future__ import annotations

import socket

import pytest

from .helpers import kspec, unique_topic

COMMANDS_WITH_HELP = [("topics",), ("topics", "create"), ("topics", "list"), ("topics", "describe"),
                      ("topics", "alter"), ("topics", "delete"), ("produce",), ("consume",), ("groups",),
                      ("groups", "list"), ("groups", "describe"), ("groups", "reset-offsets"), ("groups", "delete"),
                      ("cluster",), ("cluster", "status")]


@pytest.fixture(scope="module")
def closed_port() -> str:
    """An address where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"127.0.0.1:{port}"


@pytest.fixture
def existing_topic(single_node) -> str:
    name = unique_topic("errors")
    assert kspec("topics", "create", name, "-b", single_node.bootstrap, "--partitions", "2").returncode == 0
    return name


@pytest.mark.parametrize("args", [("topics", "list"), ("topics", "describe", "x"), ("cluster", "status"),
                                  ("consume", "x"), ("groups", "list")])
def test_unreachable_bootstrap_is_one_line_and_exit_1(args, closed_port):
    run = kspec(*args, "-b", closed_port)
    assert run.returncode == 1
    line = run.error_line()
    assert f"cannot reach {closed_port}" in line and "Connection refused" in line and "--bootstrap-servers" in line


def test_unreachable_bootstrap_while_producing(closed_port):
    run = kspec("produce", "x", "-b", closed_port, stdin="a\n")
    assert run.returncode == 1
    assert f"cannot reach {closed_port}" in run.error_line()


@pytest.mark.parametrize("args", [("topics", "describe"), ("topics", "delete"), ("topics", "alter", "--partitions", "9"),
                                  ("consume",), ("produce",)])
def test_unknown_topic_is_one_line_and_exit_1(args, single_node):
    verb_args = list(args)
    verb_args.insert(2 if args[0] == "topics" else 1, "no-such-topic")
    run = kspec(*verb_args, "-b", single_node.bootstrap, stdin="a\n")
    assert run.returncode == 1
    line = run.error_line()
    assert "'no-such-topic' does not exist" in line and "kspec topics list" in line


@pytest.mark.parametrize("count", ["0", "-3", "many"])
def test_invalid_partition_count_is_bad_usage(count, single_node):
    run = kspec("topics", "create", "t", "-b", single_node.bootstrap, "--partitions", count)
    assert run.returncode == 2
    line = run.error_line()
    assert "--partitions" in line and "kspec topics create --help" in line


def test_shrinking_a_topic_is_refused_in_one_line(single_node, existing_topic):
    run = kspec("topics", "alter", existing_topic, "-b", single_node.bootstrap, "--partitions", "1")
    assert run.returncode == 1
    assert "partition counts can only grow" in run.error_line()


def test_creating_an_existing_topic_is_refused_in_one_line(single_node, existing_topic):
    run = kspec("topics", "create", existing_topic, "-b", single_node.bootstrap)
    assert run.returncode == 1
    assert "already exists" in run.error_line()


@pytest.mark.parametrize("args", [
    ("topics", "list", "-b", "no-port"),
    ("topics", "list", "-b", "host:99999"),
    ("topics", "create", "t", "-b", "127.0.0.1:9092", "--config", "noequals"),
    ("consume", "t", "-b", "127.0.0.1:9092", "--offset", "5"),
    ("consume", "t", "-b", "127.0.0.1:9092", "--print", "value,colour"),
    ("produce", "t", "-b", "127.0.0.1:9092", "--acks", "1", "--idempotence"),
    ("groups", "reset-offsets", "g", "-b", "127.0.0.1:9092", "--topic", "t", "--to-earliest"),
    ("topics", "frobnicate"),
])
def test_bad_arguments_are_one_line_and_exit_2(args):
    run = kspec(*args)
    assert run.returncode == 2
    run.error_line()


def test_a_line_without_its_key_separator_names_the_line(single_node, existing_topic):
    run = kspec("produce", existing_topic, "-b", single_node.bootstrap, "--key-separator", ":", stdin="k:v\nnokey\n")
    assert run.returncode == 2
    assert "line 2: no key separator ':'" in run.stderr.splitlines()[-1]
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("command", COMMANDS_WITH_HELP, ids=" ".join)
def test_help_has_examples_and_exit_codes(command):
    run = kspec(*command, "--help")
    assert run.returncode == 0
    assert "Example" in run.stdout
    assert "Exit codes:" in run.stdout and "2  bad usage" in run.stdout
