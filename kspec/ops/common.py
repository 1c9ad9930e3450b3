"""What every operator command shares: the bootstrap option, client configs, exit codes,
one-line errors and tables.

Errors are one line on stderr, `Error: what is wrong; how to mend it`, and the exit code
says whose side failed, so scripts can branch on it:

  0  the operation succeeded
  1  the operation failed on the broker side (unreachable, unknown topic, refused request)
  2  bad usage (a missing or malformed argument); nothing was sent to the broker
"""
from __future__ import annotations

import logging
import re
import time

import click
from confluent_kafka import KafkaError, KafkaException
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError as KafkaPythonError
from kafka.protocol.api_key import ApiKey
from rich import box
from rich.console import Console
from rich.table import Table

from conformance import sasl
from conformance.client_properties import BadClientProperties, read_client_properties
from conformance.target import PYTHON_CLIENT_PROPERTIES
from conformance.wire import WireClient

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

EXIT_CODES_EPILOG = """\b
Exit codes:
  0  success
  1  the operation failed on the broker side (unreachable broker, unknown topic, refused request)
  2  bad usage (missing or malformed arguments)"""

BOOTSTRAP_ENVVAR = "KSPEC_BOOTSTRAP_SERVERS"
METADATA_TIMEOUT_S = 10.0  # how long a command waits for the cluster to answer its first request
METADATA_ATTEMPT_S = 0.5  # one metadata attempt; between attempts connection failures are checked
REQUEST_TIMEOUT_S = 30.0  # any later admin request
PROBE_TIMEOUT_MS = 5_000  # reading a broker's ApiVersions with kafka-python
TERMINAL_WIDTH_PIPED = 240  # table width when stdout is not a terminal, so rows are never wrapped
COMMAND_CONFIG_KEY = "kspec.command_config"
HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[^\s:,\[\]]+):(\d{1,5})$")

# librdkafka errors that mean "the bootstrap servers cannot be reached at all".
CONNECTION_FAILURES = {KafkaError._TRANSPORT, KafkaError._RESOLVE, KafkaError._ALL_BROKERS_DOWN}

# How to mend what a broker refused, by error code; the message names what was refused.
HINTS = {
    KafkaError.UNKNOWN_TOPIC_OR_PART: "list topics with `kspec topics list`, create one with `kspec topics create`",
    KafkaError.TOPIC_ALREADY_EXISTS: "pick another name, or change it with `kspec topics alter`",
    KafkaError.INVALID_PARTITIONS: "partition counts must be at least 1 and can only grow",
    KafkaError.INVALID_REPLICATION_FACTOR: "the replication factor must be between 1 and the number of brokers",
    KafkaError.INVALID_CONFIG: "see the topic configs Kafka documents; values must parse",
    KafkaError.TOPIC_EXCEPTION: "topic names use only letters, digits, '.', '_' and '-'",
    KafkaError.GROUP_ID_NOT_FOUND: "list groups with `kspec groups list`",
    KafkaError.NON_EMPTY_GROUP: "stop the group's consumers first",
    KafkaError.UNKNOWN_MEMBER_ID: "stop the group's consumers first",
    KafkaError.GROUP_SUBSCRIBED_TO_TOPIC: "stop the group's consumers first",
    KafkaError.UNSUPPORTED_VERSION: "this broker does not offer the request this command needs",
    KafkaError._UNSUPPORTED_FEATURE: "this broker does not offer the request this command needs",
    KafkaError.INVALID_REQUEST: "this broker does not offer the request this command needs",
    KafkaError._TIMED_OUT: "the broker did not answer in time; check that it is running and reachable",
    KafkaError.REQUEST_TIMED_OUT: "the broker did not answer in time; check that it is running and reachable",
    KafkaError.NOT_CONTROLLER: "the cluster has no active controller; check `kspec cluster status`",
    KafkaError.COORDINATOR_NOT_AVAILABLE: "the group coordinator is not available yet; retry shortly",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "the principal lacks an ACL on the cluster; ask an administrator "
                                             "(`kspec acls --add ... --cluster`)",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "the principal lacks an ACL on the topic; ask an administrator "
                                           "(`kspec acls --add ... --topic`)",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "the principal lacks an ACL on the group; ask an administrator "
                                           "(`kspec acls --add ... --group`)",
    KafkaError.SASL_AUTHENTICATION_FAILED: "check sasl.mechanism, sasl.username and sasl.password in --command-config",
}


class OpsError(click.ClickException):
    """The broker side failed: printed as one line, exit code 1."""

    exit_code = EXIT_FAILED


class BadUsage(click.ClickException):
    """The arguments are wrong: printed as one line, exit code 2."""

    exit_code = EXIT_USAGE


def broker_error(what: str, error: KafkaError | KafkaException | Exception) -> OpsError:
    """`what` failed because the broker (or the client talking to it) said `error`."""
    if isinstance(error, KafkaException):
        error = error.args[0]
    if not isinstance(error, KafkaError):
        return OpsError(f"{what}: {error}")
    reason = error.str()
    hint = HINTS.get(error.code())
    return OpsError(f"{what}: {reason}" + (f"; {hint}" if hint else ""))


# ---- click: one-line usage errors, and the shared options -------------------------------


def _usage_in_one_line(error: click.UsageError, ctx: click.Context) -> click.UsageError:
    if isinstance(error, click.exceptions.NoArgsIsHelpError):  # a bare group: click prints its help
        return error
    return BadUsage(f"{error.format_message()} (see `{ctx.command_path} --help`)")


class OpsCommand(click.Command):
    """A command whose usage errors are one line (click prints usage and a hint otherwise)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            raise _usage_in_one_line(e, ctx) from None


class OpsGroup(click.Group):
    """A group of OpsCommands, itself with one-line usage errors."""

    command_class = OpsCommand

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            raise _usage_in_one_line(e, ctx) from None

    def resolve_command(self, ctx: click.Context, args: list[str]):
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as e:
            raise _usage_in_one_line(e, ctx) from None


def parse_bootstrap(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """HOST:PORT[,HOST:PORT...] with a port in range, returned normalised (no spaces)."""
    servers = [s.strip() for s in value.split(",") if s.strip()]
    if not servers:
        raise click.BadParameter("give at least one HOST:PORT", ctx, param)
    for server in servers:
        match = HOST_PORT.match(server)
        if not match or not 0 < int(match.group(2)) < 65536:
            raise click.BadParameter(f"{server!r} is not HOST:PORT (for example 127.0.0.1:9092)", ctx, param)
    return ",".join(servers)


_bootstrap_option = click.option(
    "--bootstrap-servers", "--bootstrap-server", "-b", "bootstrap", required=True, envvar=BOOTSTRAP_ENVVAR,
    callback=parse_bootstrap, metavar="HOST:PORT[,...]",
    help=f"Brokers to connect to first (or set {BOOTSTRAP_ENVVAR}).")


def _read_command_config(ctx: click.Context, param: click.Parameter, path: str | None) -> None:
    """--command-config FILE: client properties in librdkafka's names (security.protocol,
    sasl.mechanism, sasl.username, sasl.password, ssl.ca.location, ...), as Kafka's tools take
    them, checked before anything is sent; kept in the context for every client the command makes."""
    if path is None:
        return
    try:
        ctx.meta[COMMAND_CONFIG_KEY] = read_client_properties(path)
    except BadClientProperties as e:
        raise click.BadParameter(str(e), ctx, param) from None


def client_options(*config_aliases: str):
    """--bootstrap-servers and --command-config (with `config_aliases`, such as Kafka's console
    tools' --producer.config), which every command that talks to a broker as a client takes."""
    command_config = click.option(
        "--command-config", *config_aliases, type=click.Path(dir_okay=False), callback=_read_command_config,
        expose_value=False, is_eager=True, metavar="FILE",
        help="Client properties in librdkafka's names (security.protocol, sasl.*, ssl.*) for a secured cluster.")
    return lambda command: command_config(_bootstrap_option(command))


bootstrap_option = client_options()


def command_properties() -> dict[str, str]:
    """The --command-config properties of the running command (empty without one)."""
    ctx = click.get_current_context(silent=True)
    return dict(ctx.find_root().meta.get(COMMAND_CONFIG_KEY, {})) if ctx is not None else {}


def python_client_properties() -> dict:
    """The --command-config properties as kafka-python keywords."""
    return {PYTHON_CLIENT_PROPERTIES[key]: value for key, value in command_properties().items()
            if key in PYTHON_CLIENT_PROPERTIES}


def wire_client(address: str, **options) -> WireClient:
    """A raw connection with the command's TLS and SASL settings (reference codec, conformance.wire)."""
    return sasl.connect(address, command_properties(), **options)


def parse_configs(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    """Repeated `--config key=value` options as a dict."""
    configs = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not key=value (for example retention.ms=60000)", ctx, param)
        configs[name] = value
    return configs


# ---- clients ------------------------------------------------------------------------------


class ConnectionWatch:
    """librdkafka's error callback and log: remembers why the brokers cannot be reached.

    librdkafka retries connections forever and reports failures only through this callback
    and its log, so a command checks `unreachable` to give up early instead of waiting out a
    timeout, and `diagnosis` to say why in one line. What failed is read from the connection
    state librdkafka names ("... (after 0ms in state AUTH_REQ)"): CONNECT is an unreachable
    address, SSL_HANDSHAKE a TLS problem, AUTH_* a SASL one, and a connection closed in
    APIVERSION_QUERY or UP is a listener that wants another security protocol.
    """

    def __init__(self) -> None:
        self.first_failure: str | None = None
        self.tls_failure: str | None = None
        self.authentication_failure: str | None = None
        self.closed_before_answer = False
        self.all_brokers_down = False
        self.logger = logging.getLogger(f"kspec.ops.librdkafka.{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.INFO)  # librdkafka logs a FAIL at INFO when the peer closes
        self.logger.addHandler(_FailLog(self))

    def __call__(self, error: KafkaError) -> None:
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self.all_brokers_down = True
        elif error.code() in CONNECTION_FAILURES | {KafkaError._SSL, KafkaError._AUTHENTICATION}:
            self.note(error.str())

    def note(self, message: str) -> None:
        """One failure librdkafka reported: "host:port/bootstrap: REASON (after Nms in state STATE)"."""
        found = LIBRDKAFKA_FAILURE.match(message)
        if found is None:
            return
        reason, state = found.group("reason"), found.group("state")
        if state == "SSL_HANDSHAKE":
            self.tls_failure = self.tls_failure or reason
        elif state.startswith("AUTH"):
            self.authentication_failure = self.authentication_failure or reason
        elif state in ("APIVERSION_QUERY", "UP") and "closed" in reason:
            self.closed_before_answer = True
        elif self.first_failure is None:
            # "Connect to ipv4#127.0.0.1:9 failed: Connection refused"
            self.first_failure = reason.rsplit(": ", 1)[-1]

    @property
    def unreachable(self) -> bool:
        return self.all_brokers_down or self.authentication_failure is not None

    def diagnosis(self, bootstrap: str) -> str:
        """Why no broker of `bootstrap` answered, and how to mend it, in one line."""
        if self.authentication_failure:
            return (f"authentication to {bootstrap} failed: {self.authentication_failure}; "
                    "check sasl.mechanism, sasl.username and sasl.password in --command-config")
        if self.tls_failure:
            failure = self.tls_failure
            # a plaintext listener drops a ClientHello as a frame far too large; librdkafka words the
            # close as "Disconnected" or "closed by peer" depending on whether the hello was read first
            if "PLAINTEXT" not in failure and ("Disconnected" in failure or "closed by peer" in failure):
                failure += ": the listener closed the connection mid-handshake, a PLAINTEXT listener?"
            return (f"TLS handshake with {bootstrap} failed: {failure}; "
                    "check security.protocol and ssl.ca.location in --command-config")
        if self.closed_before_answer:
            protocol = command_properties().get("security.protocol")
            if protocol is None:
                return (f"{bootstrap} closed the connection before answering: its listener wants TLS or SASL; "
                        "give the client properties with --command-config FILE "
                        "(security.protocol, sasl.mechanism, sasl.username, sasl.password, ssl.ca.location)")
            return (f"{bootstrap} closed the connection before answering: its listener wants another security "
                    f"protocol than {protocol}; check security.protocol in --command-config")
        return (f"cannot reach {bootstrap}: {self.first_failure or 'no broker answered'}; "
                "check --bootstrap-servers and that the broker is running")


# "[thrd:...]: " prefixes (log lines), then "sasl_ssl://host:port/bootstrap: REASON (after 0ms in state STATE)"
LIBRDKAFKA_FAILURE = re.compile(r"^(?:.*\]: )?(?:\w+://)?\S+/\w+: (?P<reason>.*?)\s*\(after \d+ms in state (?P<state>\w+)\)")


class _FailLog(logging.Handler):
    """librdkafka's log, read for the FAIL lines it does not pass to error_cb (a disconnect
    before ApiVersions is only logged); the rest is for its developers and dropped."""

    def __init__(self, watch: ConnectionWatch) -> None:
        super().__init__()
        self.watch = watch

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("FAIL "):
            self.watch.note(message)


def quiet_logger() -> logging.Logger:
    """A logger that drops librdkafka's log lines, for a client no ConnectionWatch follows."""
    logger = logging.getLogger("kspec.ops.librdkafka")
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger


def client_config(bootstrap: str, watch: ConnectionWatch, **overrides) -> dict:
    """A confluent-kafka config whose connection errors and log reach `watch` (and no further)."""
    config = {"bootstrap.servers": bootstrap, **command_properties(), "error_cb": watch, "logger": watch.logger}
    config.update(overrides)
    return config


def await_metadata(client, watch: ConnectionWatch, bootstrap: str, topic: str | None = None):
    """The cluster's metadata (for one topic, or all), failing fast when no broker answers."""
    deadline = time.monotonic() + METADATA_TIMEOUT_S
    while True:
        try:
            metadata = client.list_topics(topic, timeout=METADATA_ATTEMPT_S)
            break
        except KafkaException as e:
            client.poll(0)  # serves error_cb, which tells whether the brokers are down
            if watch.unreachable:
                raise OpsError(watch.diagnosis(bootstrap)) from None
            if time.monotonic() > deadline:
                raise broker_error(f"no metadata from {bootstrap}", e) from None
    if topic is not None:
        require_topic(metadata, topic)
    return metadata


def require_topic(metadata, topic: str):
    """The topic's metadata, or a one-line error when the cluster does not have it."""
    found = metadata.topics.get(topic)
    if found is None or found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        raise OpsError(f"topic {topic!r} does not exist; {HINTS[KafkaError.UNKNOWN_TOPIC_OR_PART]}")
    if found.error is not None:
        raise broker_error(f"topic {topic!r}", found.error)
    return found


class ApiVersionsProbe:
    """The API keys a broker advertises in ApiVersions, and kafka-python's admin client to use them.

    confluent-kafka keeps ApiVersions to itself, and librdkafka waits out its timeout rather
    than fail when a broker lacks an API; asking first turns that wait into a clear message.
    kafka-python also sends DescribeQuorum, which confluent-kafka does not offer. When the
    answer cannot be read, `api_keys` is None and `failure` says why; checks then pass.
    """

    def __init__(self, bootstrap: str) -> None:
        self.client: KafkaAdminClient | None = None
        self.api_keys: set[ApiKey] | None = None
        self.failure: str | None = None
        try:
            self.client = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), **python_client_properties(),
                                           bootstrap_timeout_ms=PROBE_TIMEOUT_MS,
                                           request_timeout_ms=int(REQUEST_TIMEOUT_S * 1000))
            self.api_keys = set(self.client.api_versions())
        except KafkaPythonError as e:
            self.failure = str(e)

    def offers(self, api_key: ApiKey) -> bool | None:
        return None if self.api_keys is None else api_key in self.api_keys

    def require(self, api_key: ApiKey, feature: str) -> None:
        if self.offers(api_key) is False:
            raise OpsError(f"this broker does not offer {feature} ({api_key.name} is not in its ApiVersions); "
                           "use a broker that does")

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def require_api(bootstrap: str, api_key: ApiKey, feature: str) -> None:
    probe = ApiVersionsProbe(bootstrap)
    try:
        probe.require(api_key, feature)
    finally:
        probe.close()


def result(what: str, future, timeout_s: float = REQUEST_TIMEOUT_S):
    """The value of an admin future, or a one-line error naming `what` failed."""
    try:
        return future.result(timeout=timeout_s)
    except KafkaException as e:
        raise broker_error(what, e) from None
    except TimeoutError:
        raise OpsError(f"{what}: no answer within {timeout_s:.0f}s; check that the broker is running") from None


# ---- output -------------------------------------------------------------------------------


def console() -> Console:
    out = Console(highlight=False, soft_wrap=False)
    if not out.is_terminal:
        out = Console(highlight=False, soft_wrap=False, width=TERMINAL_WIDTH_PIPED)
    return out


def print_table(columns: list[str], rows: list[list], title: str | None = None) -> None:
    """A plain table: a header row, then one line per row, columns aligned."""
    table = Table(*columns, title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False, header_style="bold")
    for row in rows:
        table.add_row(*("-" if cell is None else str(cell) for cell in row))
    console().print(table)


def node_list(nodes) -> str:
    return ",".join(str(getattr(node, "id", node)) for node in nodes) or "-"
