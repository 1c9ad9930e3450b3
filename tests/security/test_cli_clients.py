"""Every `kspec` command that talks to a broker as a client, against a SASL_SSL listener: with
`--command-config FILE` (or Kafka's console tools' --producer.config / --consumer.config) it
works; without one, or with a bad one, it fails with one line saying what is wrong and what
to set. Produce and consume run as their own processes; the bad configs of every command run
in this process (click's runner), as each is a second or more as a process."""
from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from kspec.cli import main
from tests.cli.helpers import kspec, unique_topic
from tests.security.conftest import PASSWORDS

# Arguments each client command needs besides -b and --command-config, so that it would reach
# the broker (usage errors are found before any connection). TOPIC and GROUP are filled in.
CLIENT_COMMANDS = {
    "acls": ["--list"],
    "cluster status": [],
    "consume": ["TOPIC", "--from-beginning", "--max-messages", "1"],
    "groups delete": ["GROUP"],
    "groups describe": ["GROUP"],
    "groups list": [],
    "groups reset-offsets": ["GROUP", "--topic", "TOPIC", "--to-earliest", "--dry-run"],
    "produce": ["TOPIC"],
    "topics alter": ["TOPIC", "--partitions", "2"],
    "topics create": ["TOPIC"],
    "topics delete": ["TOPIC"],
    "topics describe": ["TOPIC"],
    "topics list": [],
    "users create": ["carol", "--password", "carol-secret"],
    "users delete": ["carol"],
    "users describe": [],
}


def commands_taking_command_config() -> set[str]:
    """Every kspec subcommand with a --command-config option, found by walking the CLI."""
    found = set()

    def walk(command: click.Command, path: list[str], ctx: click.Context) -> None:
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                walk(sub, [*path, name], click.Context(sub, parent=ctx, info_name=name))
        elif any("--command-config" in param.opts for param in command.params):
            found.add(" ".join(path))

    walk(main, [], click.Context(main, info_name="kspec"))
    return found


def properties_file(directory, name: str, **properties: str) -> str:
    path = directory / f"{name}.properties"
    path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
    return str(path)


def sasl_ssl(pki, user: str = "admin", password: str | None = None) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": password or PASSWORDS[user], "ssl.ca.location": pki.ca_path}


@pytest.fixture(scope="module")
def configs(pki, tmp_path_factory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("client-configs")
    return {
        "admin": properties_file(directory, "admin", **sasl_ssl(pki)),
        "wrong-password": properties_file(directory, "wrong", **sasl_ssl(pki, password="not-the-password")),
        "unknown-protocol": properties_file(directory, "unknown", **{**sasl_ssl(pki), "security.protocol": "SASL_TLS"}),
        "missing": str(directory / "no-such.properties"),
        "sasl-without-tls": properties_file(directory, "sasl-plaintext",
                                            **{**sasl_ssl(pki), "security.protocol": "SASL_PLAINTEXT"}),
        "no-ca": properties_file(directory, "no-ca", **{k: v for k, v in sasl_ssl(pki).items() if k != "ssl.ca.location"}),
        "tls": properties_file(directory, "tls", **{"security.protocol": "SSL", "ssl.ca.location": pki.ca_path}),
    }


def command_line(command: str, topic: str, group: str = "cli-secured") -> list[str]:
    args = [topic if arg == "TOPIC" else group if arg == "GROUP" else arg for arg in CLIENT_COMMANDS[command]]
    return [*command.split(), *args]


def test_the_table_names_every_command_that_takes_command_config():
    # conformance runs a test suite and faults run a whole fault run, not one request: their own
    # tests are below and in tests/faults/test_faults_command_config.py
    assert commands_taking_command_config() == set(CLIENT_COMMANDS) | {"conformance", "faults run"}


def test_produce_and_consume_with_command_config_and_the_console_tools_names(secure_broker, configs):
    bootstrap, topic = secure_broker.listeners["SASL_SSL"], unique_topic("secured")
    created = kspec("topics", "create", topic, "-b", bootstrap, "--command-config", configs["admin"])
    assert created.returncode == 0, created.stderr
    produced = kspec("produce", topic, "-b", bootstrap, "--command-config", configs["admin"], stdin="one\ntwo\n")
    assert produced.returncode == 0 and produced.stderr.strip() == f"Produced 2 records to {topic}.", produced.stderr
    produced = kspec("produce", topic, "-b", bootstrap, "--producer.config", configs["admin"], stdin="three\n")
    assert produced.returncode == 0, produced.stderr
    consumed = kspec("consume", topic, "-b", bootstrap, "--consumer.config", configs["admin"], "--from-beginning",
                     "--max-messages", "3", "--group", "secured-readers")
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == ["one", "three", "two"]
    consumed = kspec("consume", topic, "-b", bootstrap, "--command-config", configs["admin"], "--partition", "0",
                     "--offset", "2", "--max-messages", "1")
    assert consumed.returncode == 0 and consumed.stdout == "three\n", consumed.stderr


@pytest.mark.parametrize("command", ["produce", "consume"])
def test_without_command_config_the_secured_listener_is_named_in_one_line(secure_broker, command):
    run = kspec(*command_line(command, "any-topic"), "-b", secure_broker.listeners["SASL_SSL"], stdin="x\n")
    assert run.returncode == 1
    line = run.error_line()
    assert "closed the connection before answering" in line and "--command-config FILE" in line


@pytest.mark.parametrize("command", sorted(CLIENT_COMMANDS))
@pytest.mark.parametrize("config, exit_code, message", [
    ("missing", 2, "No such file"),
    ("unknown-protocol", 2, 'Invalid value "SASL_TLS" for configuration property "security.protocol"'),
    ("wrong-password", 1, "Invalid username or password; check sasl.mechanism, sasl.username and sasl.password"),
])
def test_a_bad_command_config_is_one_line(secure_broker, configs, command, config, exit_code, message):
    run = CliRunner().invoke(main, [*command_line(command, "cli-never-made"), "-b", secure_broker.listeners["SASL_SSL"],
                                    "--command-config", configs[config]], input="x\n")
    assert run.exit_code == exit_code, (run.stderr, run.exception)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], run.stderr


@pytest.mark.parametrize("listener, config, message", [
    ("SASL_SSL", "sasl-without-tls", "its listener wants another security protocol than SASL_PLAINTEXT; "
                                     "check security.protocol in --command-config"),
    ("SASL_SSL", "no-ca", "certificate verify failed"),
    # librdkafka's own hint ("connecting to a PLAINTEXT broker listener?") or kspec's, by how the close came
    ("PLAINTEXT", "tls", "PLAINTEXT"),
    ("PLAINTEXT", "tls", "listener?; check security.protocol and ssl.ca.location"),
])
def test_a_mismatched_command_config_says_which_side_of_the_connection_failed(secure_broker, configs, listener,
                                                                              config, message):
    run = CliRunner().invoke(main, ["topics", "list", "-b", secure_broker.listeners[listener],
                                    "--command-config", configs[config]])
    assert run.exit_code == 1, (run.stderr, run.exception)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], run.stderr


def test_conformance_takes_the_admin_properties_from_command_config(secure_broker, configs):
    """AUTH-2 needs admin rights to create ACLs and skips without them: a pass shows the file's
    properties reached the suite's clients."""
    common = ["conformance", "--bootstrap-servers", secure_broker.listeners["SASL_SSL"], "--only", "AUTH-2",
              "--client", "confluent-kafka"]
    run = kspec(*common, "--command-config", configs["admin"])
    assert run.returncode == 0 and "AUTH-2 pass  passed   1" in run.stdout, run.stdout[-2000:]
    for config, message in [("missing", "No such file"), ("unknown-protocol", '"security.protocol"')]:
        run = kspec(*common, "--command-config", configs[config])
        assert run.returncode == 2 and message in run.error_line()
