"""A node's listeners from Kafka's properties: names, addresses, security protocols, TLS and SASL.

    listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093
    advertised.listeners=SASL_SSL://broker1.example:9093        (default: listeners)
    listener.security.protocol.map=CLIENT:SASL_SSL,REPLICATION:PLAINTEXT   (default: the identity
        map over PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL)
    inter.broker.listener.name / security.inter.broker.protocol, controller.listener.names

A listener's own settings come first: `listener.name.<name>.<mechanism>.X`, then
`listener.name.<name>.X`, then `X` (Kafka's ListenerName.configPrefix). Every problem is a
ValueError of one line, raised before the node starts: an unknown protocol is never served
as plaintext.
"""
from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from reference.security.jaas import PLAIN_LOGIN_MODULE, parse_jaas_config
from reference.security.principal import SslPrincipalMapper
from reference.security.sasl import PLAIN, SUPPORTED_MECHANISMS, SaslConfig
from reference.security.tls import server_context

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_LISTENERS = "PLAINTEXT://:9092"
DEFAULT_SASL_MECHANISMS = "GSSAPI"  # Kafka's default for sasl.enabled.mechanisms


@dataclass
class Listener:
    name: str
    host: str
    port: int  # 0 until bound when the configured port is 0
    protocol: str
    advertised_host: str = ""  # empty: the listener's host
    advertised_port: int = 0  # 0: the bound port
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslConfig | None = None
    principal_mapper: SslPrincipalMapper = field(default_factory=SslPrincipalMapper)
    failed_authentication_delay_ms: int = 100  # connection.failed.authentication.delay.ms

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def advertised(self) -> tuple[str, int]:
        return (self.advertised_host or self.host, self.advertised_port or self.port)

    def __str__(self) -> str:
        host, port = self.advertised
        return f"{self.name}://{host}:{port}"


def parse_endpoints(value: str, key: str) -> list[tuple[str, str, int]]:
    """'NAME://host:port,...' -> [(NAME, host, port)]; a bare HOST:PORT is PLAINTEXT."""
    endpoints = []
    for entry in filter(None, (part.strip() for part in value.split(","))):
        name, sep, address = entry.rpartition("://")
        host, colon, port = address.rpartition(":")
        host = host.strip("[]")  # [::1]:9092
        if not colon or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError(f"{key}: {entry!r} is not NAME://HOST:PORT")
        endpoints.append(((name if sep else "PLAINTEXT").upper(), host, int(port)))
    names = [name for name, _, _ in endpoints]
    if len(set(names)) != len(names):
        raise ValueError(f"{key}: each listener name may appear once, got {value!r}")
    if not endpoints:
        raise ValueError(f"{key} is empty; write e.g. PLAINTEXT://127.0.0.1:9092")
    return endpoints


def protocol_map(properties: dict[str, str]) -> dict[str, str]:
    raw = properties.get("listener.security.protocol.map")
    if raw is None:
        return {protocol: protocol for protocol in PROTOCOLS}
    mapping = {}
    for entry in filter(None, (part.strip() for part in raw.split(","))):
        name, sep, protocol = entry.partition(":")
        if not sep or protocol.strip().upper() not in PROTOCOLS:
            raise ValueError(f"listener.security.protocol.map: invalid security protocol in {entry!r}; "
                             f"use one of {', '.join(PROTOCOLS)}")
        mapping[name.strip().upper()] = protocol.strip().upper()
    return mapping


class ListenerProperties:
    """Property lookup with listener (and mechanism) prefixes, Kafka's precedence."""

    def __init__(self, properties: dict[str, str], listener: str) -> None:
        self._properties = properties
        self._prefix = f"listener.name.{listener.lower()}."

    def get(self, key: str, mechanism: str | None = None, *, prefixed_only: bool = False) -> str | None:
        keys = [self._prefix + mechanism.lower() + "." + key] if mechanism else []
        keys.append(self._prefix + key)
        if not prefixed_only:
            keys.append(key)
        return next((self._properties[k] for k in keys if k in self._properties), None)


def configure_listeners(properties: dict[str, str]) -> list[Listener]:
    """Every listener of a node, checked; TLS contexts are built here so a bad keystore stops the start."""
    endpoints = parse_endpoints(properties.get("listeners", DEFAULT_LISTENERS), "listeners")
    mapping = protocol_map(properties)
    listeners = []
    for name, host, port in endpoints:
        if name not in mapping:
            raise ValueError(f"no security protocol defined for listener {name}; add {name}:<protocol> to "
                             "listener.security.protocol.map or name it PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
        listeners.append(_listener(properties, name, host, port, mapping[name]))
    by_name = {listener.name: listener for listener in listeners}
    if "advertised.listeners" in properties:
        for name, host, port in parse_endpoints(properties["advertised.listeners"], "advertised.listeners"):
            if name not in by_name:
                raise ValueError(f"advertised.listeners names {name}, which is not in listeners")
            if host in ("0.0.0.0", "::"):
                raise ValueError(f"advertised.listeners: {name} advertises {host}; give a host clients can reach")
            by_name[name].advertised_host, by_name[name].advertised_port = host, port
    _check_special_listeners(properties, by_name, mapping)
    return listeners


def _check_special_listeners(properties: dict[str, str], by_name: dict[str, Listener], mapping: dict[str, str]) -> None:
    inter_broker = properties.get("inter.broker.listener.name")
    if inter_broker is not None and "security.inter.broker.protocol" in properties:
        raise ValueError("set inter.broker.listener.name or security.inter.broker.protocol, not both")
    if inter_broker is not None and inter_broker.upper() not in by_name:
        raise ValueError(f"inter.broker.listener.name={inter_broker} is not one of the listeners "
                         f"({', '.join(by_name)})")
    protocol = properties.get("security.inter.broker.protocol")
    if protocol is not None and protocol.upper() not in PROTOCOLS:
        raise ValueError(f"security.inter.broker.protocol={protocol}: invalid security protocol; "
                         f"use one of {', '.join(PROTOCOLS)}")
    for name in filter(None, (n.strip().upper() for n in properties.get("controller.listener.names", "").split(","))):
        if name not in mapping:
            raise ValueError(f"controller.listener.names: no security protocol defined for listener {name} in "
                             "listener.security.protocol.map")
        if inter_broker is not None and name == inter_broker.upper():
            raise ValueError(f"controller.listener.names and inter.broker.listener.name must differ ({name})")


def _listener(properties: dict[str, str], name: str, host: str, port: int, protocol: str) -> Listener:
    lookup = ListenerProperties(properties, name)
    listener = Listener(name, host, port, protocol)
    listener.principal_mapper = SslPrincipalMapper(lookup.get("ssl.principal.mapping.rules") or "DEFAULT")
    delay = lookup.get("connection.failed.authentication.delay.ms")
    if delay is not None:
        listener.failed_authentication_delay_ms = _int("connection.failed.authentication.delay.ms", delay)
    if listener.uses_tls:
        # On SASL_SSL, ssl.client.auth applies only when given with the listener's prefix (Kafka's rule).
        client_auth = lookup.get("ssl.client.auth", prefixed_only=protocol == "SASL_SSL") or "none"
        listener.ssl_context = server_context(lookup.get, client_auth.lower())
    if listener.uses_sasl:
        listener.sasl = _sasl_config(lookup, name)
    return listener


def _sasl_config(lookup: ListenerProperties, listener: str) -> SaslConfig:
    raw = lookup.get("sasl.enabled.mechanisms") or DEFAULT_SASL_MECHANISMS
    mechanisms = tuple(m.strip().upper() for m in raw.split(",") if m.strip())
    unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if unsupported or not mechanisms:
        raise ValueError(f"listener {listener}: sasl.enabled.mechanisms={raw}: {', '.join(unsupported) or 'none'} "
                         f"not supported; use {', '.join(SUPPORTED_MECHANISMS)}")
    plain_users: dict[str, str] = {}
    if PLAIN in mechanisms:
        key = f"listener.name.{listener.lower()}.plain.sasl.jaas.config"
        jaas = lookup.get("sasl.jaas.config", PLAIN)
        if jaas is None:
            raise ValueError(f"listener {listener} enables PLAIN but has no JAAS config; set {key}="
                             f"{PLAIN_LOGIN_MODULE} required user_alice=\"alice-secret\";")
        module = parse_jaas_config(jaas, key)
        if module.class_name != PLAIN_LOGIN_MODULE:
            raise ValueError(f"{key}: PLAIN needs {PLAIN_LOGIN_MODULE}, not {module.class_name}")
        plain_users = {option[len("user_"):]: value for option, value in module.options.items()
                       if option.startswith("user_")}
    for mechanism in mechanisms:
        jaas = lookup.get("sasl.jaas.config", mechanism)
        if mechanism != PLAIN and jaas is not None:
            parse_jaas_config(jaas, f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config")
    reauth_ms = _int("connections.max.reauth.ms", lookup.get("connections.max.reauth.ms") or "0")
    return SaslConfig(mechanisms, plain_users, reauth_ms)


def _int(key: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{key}={raw!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"{key}={value} must be >= 0")
    return value


ENDPOINT_FIELDS = ("brokers", "coordinators", "node_endpoints")  # response fields listing (host, port)


def readdress(response: dict, endpoints: dict[tuple[str, int], tuple[str, int]]) -> None:
    """Name brokers by their addresses on the listener a request came in on (Kafka answers each
    listener with its own endpoints): every endpoint in `response` found in `endpoints` (first
    listener address -> this listener's address) is replaced. Touches the top level and the
    endpoint lists only."""
    entries = [response] + [entry for name in ENDPOINT_FIELDS for entry in response.get(name) or ()]
    for entry in entries:
        if isinstance(entry, dict) and (address := endpoints.get((entry.get("host"), entry.get("port")))):
            entry["host"], entry["port"] = address
