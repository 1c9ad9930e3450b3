"""`kspec conformance`: the conformance suite against any Kafka-compatible broker.

A thin front for pytest: it runs the suite package (conformance/suite) with the plugin's
options and exits 0 only when no test failed. Skips (behaviour the target cannot be tested
for) do not fail the run, and the report lists each with its reason.
"""
from __future__ import annotations

import sys

import click

from conformance.client_properties import BadClientProperties, read_client_properties

EXIT_FAILED = 1


class BadUsage(click.ClickException):
    """A usage error printed as one line, exit code 2 (pytest's for a usage error too)."""

    exit_code = 2


def pytest_arguments(bootstrap_servers: str, *, clients: str | None, only: tuple[str, ...], quick: bool,
                     junit_xml: str | None, report: str | None, json_path: str | None,
                     client_properties: tuple[str, ...], node_commands: dict[str, str | None],
                     verbose: bool) -> list[str]:
    arguments = ["--pyargs", "conformance.suite", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning",
                 "-rfE", "--bootstrap-servers", bootstrap_servers]
    arguments += ["--client", clients] if clients else []
    arguments += [f"--only={ids}" for ids in only]
    arguments += ["--quick"] if quick else []
    arguments += [f"--junit-xml={junit_xml}"] if junit_xml else []
    arguments += [f"--conformance-report={report}"] if report else []
    arguments += [f"--conformance-json={json_path}"] if json_path else []
    arguments += [f"--client-property={pair}" for pair in client_properties]
    arguments += [f"--node-{verb}-command={command}" for verb, command in node_commands.items() if command]
    arguments += ["-v"] if verbose else []
    return arguments


def command_config_properties(ctx: click.Context, param: click.Parameter, path: str | None) -> tuple[str, ...]:
    """--command-config FILE as KEY=VALUE pairs, to go before the --client-property ones (which win)."""
    if path is None:
        return ()
    try:
        properties = read_client_properties(path)
    except BadClientProperties as e:
        raise BadUsage(f"--command-config: {e}") from None
    return tuple(f"{key}={value}" for key, value in properties.items())


EPILOG = """\b
Exit codes:
  0  every selected test passed or was skipped with its reason
  1  at least one test failed
  2+ the run itself could not go on (pytest's codes: interrupted, internal or usage error)"""


@click.command(epilog=EPILOG)
@click.option("--bootstrap-servers", required=True, metavar="HOST:PORT[,...]", help="The broker under test.")
@click.option("--client", "clients", metavar="NAMES",
              help="Comma-separated: confluent-kafka,kafka-python,aiokafka,kcat,kafkajs (default all).")
@click.option("--only", multiple=True, metavar="IDS", help="Guarantee ids or test names, comma-separated.")
@click.option("--quick", is_flag=True, help="One client, no thorough tests: under 2 minutes.")
@click.option("--junit-xml", metavar="FILE", help="Write JUnit XML for CI.")
@click.option("--report", metavar="DIR", help="Write conformance.json and conformance.html (the matrix) to DIR.")
@click.option("--json", "json_path", metavar="FILE", help="Write the JSON result to FILE.")
@click.option("--client-property", "client_properties", multiple=True, metavar="KEY=VALUE",
              help="Client property in librdkafka's names (security.protocol=SSL, sasl.username=...).")
@click.option("--command-config", "file_properties", callback=command_config_properties, metavar="FILE",
              help="Client properties from a file, as Kafka's tools take them; --client-property wins.")
@click.option("--node-stop-command", metavar="CMD", help="Stops broker {node_id}; enables leader kills.")
@click.option("--node-start-command", metavar="CMD", help="Starts broker {node_id} again.")
@click.option("--node-pause-command", metavar="CMD", help="Freezes broker {node_id} (SIGSTOP); enables pauses.")
@click.option("--node-resume-command", metavar="CMD", help="Lets a paused broker {node_id} run again.")
@click.option("-v", "--verbose", is_flag=True, help="One line per test.")
def conformance(bootstrap_servers, clients, only, quick, junit_xml, report, json_path, client_properties,
                file_properties, node_stop_command, node_start_command, node_pause_command, node_resume_command,
                verbose) -> None:
    """Check a Kafka-compatible broker against kspec's guarantee catalogue through real clients.

    \b
    Examples:
      kspec conformance --bootstrap-servers 127.0.0.1:9092 --quick
      kspec conformance --bootstrap-servers broker:9092 --client kcat,aiokafka --only TXN-2,IDM-1 --report out/
      kspec conformance --bootstrap-servers broker:9093 --client-property security.protocol=SSL \\
          --client-property ssl.ca.location=ca.pem
      kspec conformance --bootstrap-servers broker:9094 --command-config client.properties
      kspec conformance --bootstrap-servers 127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094 \\
          --node-stop-command 'python -m conformance.nodes stop DIR {node_id}' \\
          --node-start-command 'python -m conformance.nodes start DIR {node_id}' \\
          --node-pause-command 'python -m conformance.nodes pause DIR {node_id}' \\
          --node-resume-command 'python -m conformance.nodes resume DIR {node_id}'

    The last one lets the suite kill, restart, pause and resume the nodes of a reference cluster
    started with `kspec cluster --nodes 3 --data-dir DIR`, which prints these four commands; any
    broker can be controlled by commands of its own.
    """
    import pytest

    exit_code = pytest.main(pytest_arguments(
        bootstrap_servers, clients=clients, only=only, quick=quick, junit_xml=junit_xml, report=report,
        json_path=json_path, client_properties=file_properties + client_properties, verbose=verbose,
        node_commands={"stop": node_stop_command, "start": node_start_command, "pause": node_pause_command,
                       "resume": node_resume_command}))
    sys.exit(0 if exit_code == pytest.ExitCode.OK else EXIT_FAILED if exit_code == pytest.ExitCode.TESTS_FAILED
             else int(exit_code))
