"""The client side of a node's connections to other nodes: which listener they go to, with which
security protocol, TLS settings and SASL credentials, as Kafka takes them from a broker's own
properties.

    controller.listener.names=CONTROLLER          the voters' addresses (controller.quorum.voters)
                                                  are on this listener; the first name is used
    sasl.mechanism.controller.protocol=PLAIN      the mechanism towards it (default GSSAPI)
    inter.broker.listener.name=REPLICATION        replica fetches and transaction markers go to
      or security.inter.broker.protocol=SSL       the other brokers' endpoints on this listener
    sasl.mechanism.inter.broker.protocol=PLAIN    the mechanism towards it (default GSSAPI)

Without controller.listener.names the voters are reached on the inter-broker listener; without
either inter-broker setting, on the node's first listener (kspec's default, where Kafka's is
the listener named PLAINTEXT). The credentials are the listener's own, with Kafka's precedence
(`listener.name.<l>.<mechanism>.sasl.jaas.config`, then `listener.name.<l>.sasl.jaas.config`,
then `sasl.jaas.config`): the `username` and `password` options of PlainLoginModule or
ScramLoginModule. TLS trusts `ssl.truststore.location` (PEM) and checks the host name unless
`ssl.endpoint.identification.algorithm` is empty; a listener whose keystore is set presents it
(mTLS). Every problem is a ValueError of one line, raised before the node starts.

`SaslClient` is the client's half of the exchange, sans-IO: `first()` is the first token, then
`evaluate(challenge)` answers each server message (PLAIN has one message; SCRAM, RFC 5802, two).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import ssl
from dataclasses import dataclass

from reference.security.jaas import parse_jaas_config
from reference.security.listeners import ListenerProperties
from reference.security.scram import MECHANISMS as SCRAM_MECHANISMS
from reference.security.scram import salted_password
from reference.security.sasl import PLAIN, SUPPORTED_MECHANISMS

CONTROLLER, INTER_BROKER = "controller", "inter.broker"
DEFAULT_MECHANISM = "GSSAPI"  # Kafka's default for both sasl.mechanism.*.protocol


@dataclass(frozen=True)
class ClientSecurity:
    listener: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""

    def sasl_client(self) -> SaslClient | None:
        return None if self.mechanism is None else SaslClient(self.mechanism, self.username, self.password)


def controller_listener_names(properties: dict[str, str]) -> list[str]:
    """controller.listener.names, in order, upper-cased as listener names are."""
    return [name.strip().upper() for name in properties.get("controller.listener.names", "").split(",") if name.strip()]


def listener_name(properties: dict[str, str], listeners, purpose: str) -> str:
    """The listener `purpose` (CONTROLLER or INTER_BROKER) traffic goes to."""
    controller_names = controller_listener_names(properties)
    if purpose == CONTROLLER and controller_names:
        return controller_names[0]
    if "inter.broker.listener.name" in properties:
        return properties["inter.broker.listener.name"].strip().upper()
    if "security.inter.broker.protocol" in properties:
        protocol = properties["security.inter.broker.protocol"].strip().upper()
        matching = [listener.name for listener in listeners if listener.protocol == protocol
                    and listener.name not in controller_names]
        if not matching:
            raise ValueError(f"security.inter.broker.protocol={protocol}: no listener uses it")
        return matching[0]
    return next(listener.name for listener in listeners if listener.name not in controller_names)


def client_security(properties: dict[str, str], listeners, purpose: str) -> ClientSecurity:
    """How this node connects to the other nodes' `purpose` listener; ValueError naming what is wrong."""
    name = listener_name(properties, listeners, purpose)
    protocols = {listener.name: listener.protocol for listener in listeners}
    if name not in protocols:  # a listener of the others, not this node's (a broker-only node's controllers)
        mapping = dict(entry.split(":", 1) for entry in properties.get("listener.security.protocol.map", "").split(",")
                       if ":" in entry)
        protocols[name] = mapping.get(name, name).strip().upper()
    protocol = protocols[name]
    lookup = ListenerProperties(properties, name)
    context = _client_context(lookup, name) if protocol in ("SSL", "SASL_SSL") else None
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return ClientSecurity(name, protocol, context)
    key = "sasl.mechanism.controller.protocol" if purpose == CONTROLLER else "sasl.mechanism.inter.broker.protocol"
    mechanism = properties.get(key, DEFAULT_MECHANISM).strip().upper()
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ValueError(f"{key}={mechanism} is not supported between nodes; use {', '.join(SUPPORTED_MECHANISMS)}")
    jaas_key = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    jaas = lookup.get("sasl.jaas.config", mechanism)
    if jaas is None:
        raise ValueError(f"listener {name} ({protocol}) carries traffic between nodes: set {jaas_key} with the "
                         'username="..." password="..." this node authenticates with')
    options = parse_jaas_config(jaas, jaas_key).options
    if "username" not in options or "password" not in options:
        raise ValueError(f"{jaas_key}: give username and password, the credentials this node authenticates with "
                         "to the other nodes")
    return ClientSecurity(name, protocol, context, mechanism, options["username"], options["password"])


def _client_context(lookup: ListenerProperties, name: str) -> ssl.SSLContext:
    location, certificates = lookup.get("ssl.truststore.location"), lookup.get("ssl.truststore.certificates")
    if not (location or certificates):
        raise ValueError(f"listener {name} uses TLS between nodes: set ssl.truststore.location (PEM) to verify "
                         "the other nodes' certificates")
    try:
        context = ssl.create_default_context(cafile=location, cadata=None if location else certificates)
        if keystore := lookup.get("ssl.keystore.location"):
            context.load_cert_chain(keystore, password=lookup.get("ssl.key.password"))
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"listener {name}: cannot load the TLS stores for connections to other nodes: {e}") from None
    context.check_hostname = lookup.get("ssl.endpoint.identification.algorithm") != ""  # Kafka's default: https
    return context


class SaslClient:
    """PLAIN (RFC 4616) or SCRAM-SHA-256/512 (RFC 5802), the client's side; ValueError on a bad server."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism, self.username, self.password = mechanism, username, password
        self._nonce = secrets.token_urlsafe(18)
        self._client_first_bare = f"n={username.replace('=', '=3D').replace(',', '=2C')},r={self._nonce}"
        self._server_signature: bytes | None = None

    def first(self) -> bytes:
        if self.mechanism == PLAIN:
            return f"\0{self.username}\0{self.password}".encode()
        return ("n,," + self._client_first_bare).encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        """The next token, or None when the exchange is complete (the server's final message checked)."""
        message = challenge.decode()
        if self._server_signature is not None:
            if not hmac.compare_digest(message, "v=" + base64.b64encode(self._server_signature).decode()):
                raise ValueError("the server's SCRAM signature does not verify")
            return None
        attributes = dict(part.split("=", 1) for part in message.split(",") if "=" in part)
        nonce, salt, iterations = attributes.get("r", ""), attributes.get("s"), attributes.get("i", "")
        if not nonce.startswith(self._nonce) or salt is None or not iterations.isdigit():
            raise ValueError(f"a malformed SCRAM server-first message: {message!r}")
        hash_name = SCRAM_MECHANISMS[self.mechanism][0]
        salted = salted_password(self.mechanism, self.password, base64.b64decode(salt), int(iterations))
        client_key = hmac.digest(salted, b"Client Key", hash_name)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._client_first_bare},{message},{without_proof}".encode()
        signature = hmac.digest(hashlib.new(hash_name, client_key).digest(), auth_message, hash_name)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = hmac.digest(hmac.digest(salted, b"Server Key", hash_name), auth_message, hash_name)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
