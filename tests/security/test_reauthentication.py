"""KIP-368 re-authentication on a SASL_PLAINTEXT listener with connections.max.reauth.ms: the
session lifetime is told in SaslAuthenticate v1+, a connection that outlives it unauthenticated
is closed, one that re-authenticates in time keeps being served, and librdkafka keeps producing."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from reference.process import BrokerProcess
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from tests.security.conftest import JAAS, PASSWORDS, SecureClient, socket_closed

REAUTH_MS = 1500
METADATA = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}


@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory):
    process = BrokerProcess(str(tmp_path_factory.mktemp("reauth") / "data"), listen="SASL_PLAINTEXT://127.0.0.1:0",
                            overrides={"sasl.enabled.mechanisms": "PLAIN",
                                       "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
                                       "connections.max.reauth.ms": str(REAUTH_MS)})
    process.start()
    yield process
    if process.running:
        assert process.stop() == 0


def authenticated(broker) -> SecureClient:
    client = SecureClient(broker.bootstrap)
    answer = client.plain("alice", PASSWORDS["alice"])
    assert answer.error_code == ErrorCode.NONE and answer.session_lifetime_ms == REAUTH_MS
    return client


def test_a_session_past_its_lifetime_is_closed(reauth_broker):
    client = authenticated(reauth_broker)
    assert client.request(ApiKey.METADATA, 12, METADATA).brokers
    time.sleep(REAUTH_MS / 1000 + 0.3)
    client.send(ApiKey.METADATA, 12, METADATA)
    assert socket_closed(client.sock)


def test_a_session_re_authenticated_in_time_goes_on(reauth_broker):
    client = authenticated(reauth_broker)
    time.sleep(REAUTH_MS / 2000)
    assert client.plain("alice", PASSWORDS["alice"]).session_lifetime_ms == REAUTH_MS  # KIP-368, same principal
    time.sleep(REAUTH_MS / 1000 * 0.75)  # past the first session's end, within the second's
    assert client.request(ApiKey.METADATA, 12, METADATA).brokers


def test_re_authentication_as_another_principal_fails(reauth_broker):
    client = authenticated(reauth_broker)
    answer = client.plain("bob", PASSWORDS["bob"])
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert socket_closed(client.sock)


def test_librdkafka_keeps_producing_across_session_lifetimes(reauth_broker):
    producer = Producer({"bootstrap.servers": reauth_broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": PASSWORDS["alice"]})
    errors, delivered = [], []
    deadline = time.monotonic() + 3 * REAUTH_MS / 1000
    while time.monotonic() < deadline:
        producer.produce("reauth", b"x", on_delivery=lambda err, msg: (errors if err else delivered).append(err))
        producer.poll(0.2)
    assert producer.flush(30) == 0
    assert not errors and len(delivered) >= 10
