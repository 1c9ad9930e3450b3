"""Worker and connector configs with Kafka Connect's names, and connector config validation.

A worker reads a Java .properties file (WorkerConfig, StandaloneConfig, DistributedConfig);
a connector config is a flat string map (ConnectorConfig, SinkConnectorConfig). `validate`
answers PUT /connector-plugins/{plugin}/config/validate in Connect's ConfigInfos shape: one
entry per config with its definition and its value, errors attached to the offending field.
"""
from __future__ import annotations

import re

from connect.api import ConfigKey, ConnectError, SinkConnector
from connect.converters import converter_configs
from connect.plugins import PluginNotFound, Plugins
from connect.transforms import TransformationChain

WORKER_DEFAULTS = {
    "bootstrap.servers": "localhost:9092",
    "offset.flush.interval.ms": "60000",
    "offset.flush.timeout.ms": "5000",
    "listeners": "http://:8083",
    "plugin.path": "",
    # distributed
    "offset.storage.partitions": "25",
    "status.storage.partitions": "5",
    "config.storage.replication.factor": "3",
    "offset.storage.replication.factor": "3",
    "status.storage.replication.factor": "3",
    "session.timeout.ms": "10000",
    "heartbeat.interval.ms": "3000",
    "rebalance.timeout.ms": "60000",
    "connect.protocol": "compatible",
    "scheduled.rebalance.max.delay.ms": "300000",
    "exactly.once.source.support": "disabled",
    "inter.worker.key.generation.algorithm": "HmacSHA256",
    "inter.worker.key.size": "",
    "inter.worker.key.ttl.ms": "3600000",
    "inter.worker.signature.algorithm": "HmacSHA256",
    "inter.worker.verification.algorithms": "HmacSHA256",
}
REQUIRED = {"standalone": ("key.converter", "value.converter", "offset.storage.file.filename"),
            "distributed": ("key.converter", "value.converter", "group.id", "config.storage.topic",
                            "offset.storage.topic", "status.storage.topic")}
# Client settings passed to every producer, consumer and admin client the worker makes.
CLIENT_PREFIXES = ("security.protocol", "ssl.", "sasl.", "client.dns.lookup")
JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


class ConfigError(ValueError):
    """A worker config that cannot start a worker; the message says which key and why."""


def read_properties(path: str) -> dict[str, str]:
    """A Java .properties file: `key=value`, `key: value` or `key value`, '#'/'!' comments,
    lines continued with a trailing backslash."""
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"\\\n\s*", "", f.read())
    properties = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", line)
        key, value = (match.group(1), match.group(2)) if match else (line, "")
        properties[key] = value.strip()
    return properties


class WorkerConfig:
    def __init__(self, props: dict[str, str], mode: str) -> None:
        self.mode = mode
        self.given = dict(props)
        self.props = {**WORKER_DEFAULTS, **props}
        missing = [key for key in REQUIRED[mode] if not self.props.get(key)]
        if missing:
            raise ConfigError(f"missing required worker config {', '.join(missing)}")
        for key in ("offset.flush.interval.ms", "scheduled.rebalance.max.delay.ms", "session.timeout.ms"):
            if not self.props[key].isdigit():
                raise ConfigError(f"{key}={self.props[key]!r} is not a number of milliseconds")
        if self.props["connect.protocol"] not in ("eager", "compatible", "sessioned"):
            raise ConfigError(f"connect.protocol={self.props['connect.protocol']!r}: use eager, compatible or "
                              "sessioned")
        from connect.signing import DIGESTS
        for key in ("inter.worker.key.generation.algorithm", "inter.worker.signature.algorithm"):
            if self.props[key] not in DIGESTS:
                raise ConfigError(f"{key}={self.props[key]!r}: use one of {', '.join(DIGESTS)}")
        if not self.props["inter.worker.key.ttl.ms"].isdigit():
            raise ConfigError(f"inter.worker.key.ttl.ms={self.props['inter.worker.key.ttl.ms']!r} is not a number "
                              "of milliseconds")
        if self.props["exactly.once.source.support"] not in ("disabled", "preparing", "enabled"):
            raise ConfigError("exactly.once.source.support must be disabled, preparing or enabled")
        if mode == "standalone" and self.props["exactly.once.source.support"] != "disabled":
            raise ConfigError("exactly.once.source.support is for distributed workers only")

    def __getitem__(self, key: str) -> str:
        return self.props[key]

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.props.get(key, default)

    def int(self, key: str) -> int:
        return int(self.props[key])

    def rest_address(self) -> tuple[str, int]:
        """(host, port) to listen on: `listeners` (first one), or the old rest.host.name/rest.port."""
        if "rest.port" in self.given and "listeners" not in self.given:
            return self.props.get("rest.host.name", ""), int(self.props["rest.port"])
        listener = self.props["listeners"].split(",")[0].strip()
        scheme, _, address = listener.rpartition("://")
        if scheme and scheme.lower() != "http":
            raise ConfigError(f"listeners={listener!r}: only http listeners are served")
        host, _, port = address.rpartition(":")
        if not port.isdigit():
            raise ConfigError(f"listeners={listener!r} is not http://HOST:PORT")
        return host, int(port)

    def client_configs(self, kind: str) -> dict[str, str]:
        """librdkafka settings for a `kind` (producer, consumer, admin) client: bootstrap and
        security settings, then `kind.*` overrides; sasl.jaas.config's username and password
        become sasl.username/sasl.password."""
        configs = {"bootstrap.servers": self.props["bootstrap.servers"]}
        for key, value in self.props.items():
            if key.startswith(CLIENT_PREFIXES):
                configs[key] = value
            elif key.startswith(kind + "."):
                configs[key[len(kind) + 1:]] = value
        jaas = configs.pop("sasl.jaas.config", None)
        if jaas:
            options = dict(JAAS_OPTION.findall(jaas))
            configs.setdefault("sasl.username", options.get("username", ""))
            configs.setdefault("sasl.password", options.get("password", ""))
        for key in [k for k in configs if k.startswith(("ssl.truststore.", "ssl.keystore."))]:
            raise ConfigError(f"{key}: Java key stores are not read here; use ssl.ca.location, "
                              "ssl.certificate.location and ssl.key.location (PEM)")
        return configs


COMMON = "Common"
COMMON_DEF = (
    ConfigKey("name", required=True, importance="HIGH", group=COMMON,
              documentation="Globally unique name to use for this connector."),
    ConfigKey("connector.class", required=True, importance="HIGH", group=COMMON,
              documentation="Name or alias of the class for this connector."),
    ConfigKey("tasks.max", "INT", 1, importance="HIGH", group=COMMON,
              documentation="Maximum number of tasks to use for this connector."),
    ConfigKey("key.converter", "CLASS", importance="LOW", group=COMMON,
              documentation="Converter class used to convert between Kafka Connect format and the serialized "
                            "form that is written to Kafka."),
    ConfigKey("value.converter", "CLASS", importance="LOW", group=COMMON,
              documentation="Converter class for values."),
    ConfigKey("transforms", "LIST", "", importance="LOW", group="Transforms",
              documentation="Aliases for the transformations to be applied to records."),
    ConfigKey("predicates", "LIST", "", importance="LOW", group="Predicates",
              documentation="Aliases for the predicates used by transformations."),
    ConfigKey("errors.tolerance", "STRING", "none", importance="MEDIUM", group="Error Handling",
              documentation="Behavior for tolerating errors during connector operation: none fails the task; all "
                            "skips a record whose conversion or transformation failed (a sink puts it in the "
                            "dead letter queue when one is named)."),
)
SOURCE_DEF = (
    ConfigKey("exactly.once.support", "STRING", "requested", importance="MEDIUM", group=COMMON,
              documentation="requested or required: whether the connector's records must be written exactly "
                            "once (KIP-618); required fails validation on a worker without "
                            "exactly.once.source.support=enabled."),
    ConfigKey("transaction.boundary", "STRING", "poll", importance="MEDIUM", group=COMMON,
              documentation="Where a transaction ends with exactly-once support; poll (each poll's records) is "
                            "the one implemented here."),
)
SINK_DEF = (
    ConfigKey("topics", "LIST", "", importance="HIGH", group=COMMON,
              documentation="List of topics to consume, separated by commas"),
    ConfigKey("topics.regex", "STRING", "", importance="HIGH", group=COMMON,
              documentation="Regular expression giving topics to consume."),
    ConfigKey("errors.deadletterqueue.topic.name", "STRING", "", importance="MEDIUM", group="Error Handling",
              documentation="The topic for records that failed conversion or transformation (with "
                            "errors.tolerance=all); empty: none."),
    ConfigKey("errors.deadletterqueue.topic.replication.factor", "INT", 3, importance="MEDIUM",
              group="Error Handling", documentation="Replication factor of the dead letter queue topic when the "
                                                    "worker creates it."),
    ConfigKey("errors.deadletterqueue.context.headers.enable", "BOOLEAN", False, importance="MEDIUM",
              group="Error Handling", documentation="Add __connect.errors.* headers saying where and why the "
                                                    "record failed."),
)


def _aliases(props: dict[str, str], key: str) -> list[str]:
    return [a.strip() for a in props.get(key, "").split(",") if a.strip()]


def _int_error(props: dict[str, str], key: ConfigKey) -> str | None:
    raw = props.get(key.name)
    if key.type != "INT" or raw is None:
        return None
    try:
        int(raw)
    except ValueError:
        return f"Invalid value {raw} for configuration {key.name}: Not a number of type INT"
    return None


def transformation_chain(props: dict[str, str], plugins: Plugins) -> TransformationChain:
    """The connector's SMTs, configured; raises ConnectError naming the bad key."""
    predicates = {}
    for alias in _aliases(props, "predicates"):
        prefix = f"predicates.{alias}."
        try:
            predicate = plugins.predicate(props[prefix + "type"])
        except (KeyError, PluginNotFound) as e:
            raise ConnectError(f"Invalid value for configuration {prefix}type: {e}") from None
        predicate.configure({k[len(prefix):]: v for k, v in props.items() if k.startswith(prefix)})
        predicates[alias] = predicate
    steps = []
    for alias in _aliases(props, "transforms"):
        prefix = f"transforms.{alias}."
        try:
            transform = plugins.transformation(props[prefix + "type"])
        except (KeyError, PluginNotFound) as e:
            raise ConnectError(f"Invalid value for configuration {prefix}type: {e}") from None
        transform.configure({k[len(prefix):]: v for k, v in props.items() if k.startswith(prefix)})
        predicate_alias = props.get(prefix + "predicate")
        if predicate_alias and predicate_alias not in predicates:
            raise ConnectError(f"Invalid value for configuration {prefix}predicate: "
                               f"predicate {predicate_alias!r} is not in predicates")
        steps.append((transform, predicates.get(predicate_alias) if predicate_alias else None,
                      props.get(prefix + "negate", "false").lower() == "true"))
    return TransformationChain(steps)


def converter(props: dict[str, str], worker: WorkerConfig, which: str, plugins: Plugins):
    """The connector's `which` (key.converter/value.converter), else the worker's, configured."""
    source = props if props.get(which) else worker.props
    instance = plugins.converter(source[which])
    instance.configure(converter_configs(source, which), is_key=which.startswith("key"))
    return instance


def validate(props: dict[str, str], plugins: Plugins, exactly_once_enabled: bool = False) -> dict:
    """Connect's ConfigInfos for `props`: {name, error_count, groups, configs}."""
    errors: dict[str, list[str]] = {}
    connector_cls = None
    try:
        connector_cls = plugins.connector_class(props.get("connector.class", ""))
    except PluginNotFound as e:
        errors["connector.class"] = [str(e)]
    keys = list(COMMON_DEF)
    if connector_cls is not None:
        if issubclass(connector_cls, SinkConnector):
            keys += SINK_DEF
            if bool(props.get("topics", "").strip()) == bool(props.get("topics.regex", "").strip()):
                errors.setdefault("topics", []).append("Must configure one of topics or topics.regex")
        else:
            keys += SOURCE_DEF
            support = props.get("exactly.once.support", "requested")
            if support not in ("requested", "required"):
                errors["exactly.once.support"] = [f"Invalid value {support} for configuration "
                                                  "exactly.once.support: String must be one of: requested, required"]
            elif support == "required" and not exactly_once_enabled:
                errors["exactly.once.support"] = ["This worker does not have exactly.once.source.support=enabled"]
            if props.get("transaction.boundary", "poll") != "poll":
                errors["transaction.boundary"] = [f"Invalid value {props['transaction.boundary']} for configuration "
                                                  "transaction.boundary: only poll is supported here"]
        keys += [k for k in connector_cls.CONFIG_DEF if k.name not in {c.name for c in keys}]
    for key in keys:
        if key.required and not props.get(key.name, "").strip():
            errors.setdefault(key.name, []).append(f"Missing required configuration \"{key.name}\" which has no "
                                                   "default value.")
        elif (message := _int_error(props, key)) is not None:
            errors.setdefault(key.name, []).append(message)
    if props.get("errors.tolerance", "none") not in ("none", "all"):
        errors["errors.tolerance"] = [f"Invalid value {props['errors.tolerance']} for configuration "
                                      "errors.tolerance: String must be one of: none, all"]
    if "tasks.max" not in errors and int(props.get("tasks.max", 1)) < 1:
        errors["tasks.max"] = [f"Invalid value {props['tasks.max']} for configuration tasks.max: "
                               "Value must be at least 1"]
    for which in ("key.converter", "value.converter"):
        if props.get(which):
            try:
                plugins.converter(props[which])
            except PluginNotFound as e:
                errors.setdefault(which, []).append(str(e))
    try:
        transformation_chain(props, plugins)
    except ConnectError as e:
        message = str(e)
        field = message.split("configuration ", 1)[1].split(":")[0] if "configuration " in message else "transforms"
        errors.setdefault(field, []).append(message)
    if connector_cls is not None and not errors:
        try:
            for name, messages in connector_cls().validate(props).items():
                errors.setdefault(name, []).extend(messages)
        except Exception as e:  # a plug-in's validate that raises is an error of the whole config
            errors.setdefault("connector.class", []).append(f"{type(e).__name__}: {e}")
    keys += [ConfigKey(name) for name in errors if name not in {k.name for k in keys}]
    configs = [{
        "definition": {"name": k.name, "type": k.type, "required": k.required,
                       "default_value": None if k.default is None else str(k.default),
                       "importance": k.importance, "documentation": k.documentation, "group": k.group,
                       "order": order, "width": "NONE", "display_name": k.name, "dependents": []},
        "value": {"name": k.name, "value": props.get(k.name, None if k.default is None else str(k.default)),
                  "recommended_values": [], "errors": errors.get(k.name, []), "visible": True},
    } for order, k in enumerate(keys)]
    return {"name": connector_cls.__name__ if connector_cls else props.get("connector.class"),
            "error_count": sum(len(m) for m in errors.values()),
            "groups": list(dict.fromkeys(k.group for k in keys if k.group)),
            "configs": configs}


def validation_errors(info: dict) -> list[str]:
    return [f"{c['value']['name']}: {m}" for c in info["configs"] for m in c["value"]["errors"]]
