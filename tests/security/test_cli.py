"""The operator commands against a secured broker: `kspec acls` (kafka-acls.sh's options),
`kspec users` (SCRAM), `--command-config` on every command, and one-line errors for bad input."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from kspec.cli import main
from tests.security.conftest import PASSWORDS


def kspec(*args: str, check: bool = True):
    """`kspec ARGS` in this process (click's runner): its exit code, stdout and stderr."""
    done = CliRunner().invoke(main, list(args))
    done.returncode = done.exit_code
    if check:
        assert done.exit_code == 0, (done.stderr, done.exception)
    return done


@pytest.fixture(scope="module")
def command_config(secure_broker, pki, tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "admin.properties"
    path.write_text("# kafka-acls.sh --command-config style, librdkafka names\nsecurity.protocol=SASL_SSL\n"
                    f"sasl.mechanism=PLAIN\nsasl.username=admin\nsasl.password={PASSWORDS['admin']}\n"
                    f"ssl.ca.location={pki.ca_path}\n")
    return str(path)


def test_acls_add_list_and_remove(secure_broker, command_config):
    common = ["-b", secure_broker.listeners["SASL_SSL"], "--command-config", command_config]
    kspec("topics", "create", "cli-orders", *common)
    added = kspec("acls", *common, "--add", "--allow-principal", "User:dave", "--operation", "Read",
                  "--operation", "Describe", "--topic", "cli-orders", "--resource-pattern-type", "LITERAL")
    assert "Added 2 ACL(s)." in added.stdout
    kspec("acls", *common, "--add", "--consumer", "--allow-principal", "User:erin", "--topic", "cli-",
          "--group", "erin-", "--resource-pattern-type", "PREFIXED")
    listed = kspec("acls", *common, "--list", "--topic", "cli-orders", "--resource-pattern-type", "MATCH").stdout
    assert "User:dave" in listed and "READ" in listed and "User:erin" in listed and "PREFIXED" in listed
    only_dave = kspec("acls", *common, "--list", "--principal", "User:dave").stdout
    assert "User:dave" in only_dave and "User:erin" not in only_dave
    removed = kspec("acls", *common, "--remove", "--allow-principal", "User:dave", "--topic", "cli-orders")
    assert "Removed 2 ACL(s)." in removed.stdout
    assert "User:dave" not in kspec("acls", *common, "--list").stdout
    assert "cli-orders" in kspec("topics", "list", *common).stdout


def test_users_create_describe_delete(secure_broker, command_config):
    common = ["-b", secure_broker.listeners["SASL_SSL"], "--command-config", command_config]
    kspec("users", "create", "frank", *common, "--password", "frank-secret", "--iterations", "8192")
    kspec("users", "create", "frank", *common, "--password", "frank-secret", "--mechanism", "SCRAM-SHA-512")
    described = kspec("users", "describe", "frank", *common).stdout
    assert "SCRAM-SHA-256" in described and "8192" in described and "SCRAM-SHA-512" in described
    kspec("users", "delete", "frank", *common, "--mechanism", "SCRAM-SHA-512")
    assert "SCRAM-SHA-512" not in kspec("users", "describe", *common).stdout
    missing = kspec("users", "delete", "nobody", *common, check=False)
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1


def test_a_refused_operator_command_says_why_in_one_line(secure_broker, pki, tmp_path):
    bob = tmp_path / "bob.properties"
    bob.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=bob\n"
                   f"sasl.password={PASSWORDS['bob']}\nssl.ca.location={pki.ca_path}\n")
    refused = kspec("acls", "-b", secure_broker.listeners["SASL_SSL"], "--command-config", str(bob), "--add",
                    "--allow-principal", "User:bob", "--operation", "All", "--topic", "*", check=False)
    assert refused.returncode == 1 and "User:bob may not ALTER the cluster" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, message", [
    (["acls", "-b", "127.0.0.1:9", "--topic", "x"], "give one action"),
    (["acls", "-b", "127.0.0.1:9", "--add", "--allow-principal", "alice", "--operation", "Read", "--topic", "x"],
     "TYPE:NAME"),
    (["acls", "-b", "127.0.0.1:9", "--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "x"],
     "unknown operation"),
    (["topics", "list", "-b", "127.0.0.1:9", "--command-config", "/nonexistent.properties"], "No such file"),
    (["broker", "--data-dir", "/tmp/kspec-never", "--listen", "FOO://127.0.0.1:0"], "no security protocol"),
    (["broker", "--data-dir", "/tmp/kspec-never", "--listen", "SASL_SSL://127.0.0.1:0"], "ssl.keystore"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    done = kspec(*args, check=False)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
