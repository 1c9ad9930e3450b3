"""Fixtures for the security tests: fresh certificates, and a `kspec broker` process with a
SASL_SSL listener (PLAIN users admin/alice/bob, SCRAM-SHA-256, StandardAuthorizer with
super.users=User:admin), an SSL listener that asks for client certificates, and a PLAINTEXT one."""
from __future__ import annotations

import socket
import ssl

import pytest

from reference.process import BrokerProcess
from reference.protocol.api_keys import ApiKey
from reference.security.jaas import PLAIN_LOGIN_MODULE
from tests.broker.conftest import RawClient
from kspec.ops.pki import make_pki

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = (f'{PLAIN_LOGIN_MODULE} required username="admin" password="admin-secret" '
        + " ".join(f'user_{user}="{password}"' for user, password in PASSWORDS.items()) + ";")
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def secure_overrides(pki) -> dict[str, str]:
    return {
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,MTLS:SSL,PLAINTEXT:PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": pki.server_pem_path,
        "ssl.truststore.location": pki.ca_path,
        "listener.name.mtls.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:admin",
    }


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    return make_pki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, pki):
    process = BrokerProcess(str(tmp_path_factory.mktemp("secure") / "data"),
                            listen="SASL_SSL://127.0.0.1:0,MTLS://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
                            overrides=secure_overrides(pki))
    process.start()
    yield process
    if process.running:
        assert process.stop() == 0


def client_context(pki, certificate: tuple[str, str] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=pki.ca_path)
    if certificate:
        context.load_cert_chain(*certificate)
    return context


class SecureClient(RawClient):
    """RawClient over TLS (when given a context), with SASL PLAIN/SCRAM through SaslHandshake v1."""

    def __init__(self, address: str, context: ssl.SSLContext | None = None) -> None:
        super().__init__(address)
        if context is not None:
            self.sock = context.wrap_socket(self.sock, server_hostname="127.0.0.1")

    def sasl(self, mechanism: str, *tokens: bytes, version: int = 2):
        handshake = self.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        answers = [handshake]
        if handshake.error_code:
            return answers
        for token in tokens:
            answers.append(self.request(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token}))
            if answers[-1].error_code:
                break
        return answers

    def plain(self, user: str, password: str):
        return self.sasl("PLAIN", f"\0{user}\0{password}".encode())[-1]


def admin_config(broker, pki, user: str = "admin", password: str | None = None, **extra) -> dict:
    """librdkafka properties for a SASL_SSL PLAIN client."""
    return {"bootstrap.servers": broker.listeners["SASL_SSL"], "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password or PASSWORDS[user],
            "ssl.ca.location": pki.ca_path, **extra}


def socket_closed(sock: socket.socket, timeout_s: float = 5.0) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True
    except socket.timeout:
        return False
