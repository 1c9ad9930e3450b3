"""The issue's check from outside, with Kafka's config names: a kspec broker with a SASL_SSL
listener (PEM keystore, PLAIN users admin/alice/bob in the listener's JAAS config,
super.users=User:admin, StandardAuthorizer) serves confluent-kafka, kafka-python and kcat.
Admin creates a topic, ACLs for alice and a SCRAM-SHA-256 user; alice produces and consumes;
bob is refused with TOPIC_AUTHORIZATION_FAILED (AUTH-2); a wrong password fails; plaintext on
the TLS port gets nowhere; the SCRAM user authenticates."""
from __future__ import annotations

import subprocess
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.security.conftest import PASSWORDS, admin_config

TIMEOUT_S = 30


def allow(principal: str, resource_type, name: str, operation, pattern=ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)


@pytest.fixture(scope="module")
def orders(secure_broker, pki):
    """A topic and alice's ACLs, made by the super user over SASL_SSL."""
    admin = AdminClient(admin_config(secure_broker, pki))
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(TIMEOUT_S)
    acls = [allow("User:alice", ResourceType.TOPIC, topic, AclOperation.WRITE),
            allow("User:alice", ResourceType.TOPIC, topic, AclOperation.READ),
            allow("User:alice", ResourceType.GROUP, "alice-", AclOperation.READ, ResourcePatternType.PREFIXED),
            allow("User:carol", ResourceType.TOPIC, topic, AclOperation.DESCRIBE)]
    for future in admin.create_acls(acls).values():
        future.result(TIMEOUT_S)
    return topic


def test_admin_sees_the_acls_it_created(secure_broker, pki, orders):
    admin = AdminClient(admin_config(secure_broker, pki))
    found = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None,
                                                 AclOperation.ANY, AclPermissionType.ANY)).result(TIMEOUT_S)
    assert {(b.name, b.operation) for b in found} >= {(orders, AclOperation.WRITE), (orders, AclOperation.READ),
                                                      ("alice-", AclOperation.READ)}


def test_alice_produces_and_consumes_with_confluent_kafka(secure_broker, pki, orders):
    producer = Producer(admin_config(secure_broker, pki, "alice"))
    errors = []
    for i in range(10):
        producer.produce(orders, f"v{i}".encode(), on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(TIMEOUT_S) == 0 and not errors
    consumer = Consumer(admin_config(secure_broker, pki, "alice", **{
        "group.id": "alice-readers", "auto.offset.reset": "earliest"}))
    consumer.subscribe([orders])
    values = []
    try:
        for _ in range(100):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.append(message.value())
            if len(values) >= 10:
                break
    finally:
        consumer.close()
    assert values[:10] == [f"v{i}".encode() for i in range(10)]


def test_bob_is_refused_with_topic_authorization_failed(secure_broker, pki, orders):
    producer = Producer(admin_config(secure_broker, pki, "bob", **{"message.timeout.ms": 10000}))
    errors = []
    producer.produce(orders, b"bob was here", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(TIMEOUT_S)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # AUTH-2: nothing changed; bob does not even see the topic in Metadata.
    bob = AdminClient(admin_config(secure_broker, pki, "bob"))
    assert orders not in bob.list_topics(timeout=TIMEOUT_S).topics
    with pytest.raises(KafkaException) as refused:
        for future in bob.create_acls(
                [allow("User:bob", ResourceType.TOPIC, orders, AclOperation.ALL)]).values():
            future.result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_a_wrong_password_fails_authentication(secure_broker, pki):
    admin = AdminClient(admin_config(secure_broker, pki, "alice", "not-her-password", log_level=0))
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    log = open(secure_broker.stderr_path).read()
    assert "SASL authentication failed: PLAIN: wrong password or unknown user 'alice'" in log


def test_the_scram_user_made_by_admin_authenticates(secure_broker, pki, orders):
    admin = AdminClient(admin_config(secure_broker, pki))
    upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                          b"carol-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(TIMEOUT_S)
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(TIMEOUT_S)
    assert described.scram_credential_infos[0].iterations == 8192
    carol = {**admin_config(secure_broker, pki), "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol",
             "sasl.password": "carol-secret"}
    assert orders in AdminClient(carol).list_topics(timeout=TIMEOUT_S).topics  # DESCRIBE on the topic
    wrong = {**carol, "sasl.password": "wrong", "log_level": 0}
    with pytest.raises(KafkaException):
        AdminClient(wrong).list_topics(timeout=3)


def test_kafka_python_over_sasl_ssl(secure_broker, pki, orders):
    from kafka import KafkaConsumer, KafkaProducer
    common = {"bootstrap_servers": secure_broker.listeners["SASL_SSL"], "security_protocol": "SASL_SSL",
              "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice", "sasl_plain_password": PASSWORDS["alice"],
              "ssl_cafile": pki.ca_path}
    producer = KafkaProducer(**common)
    producer.send(orders, b"from kafka-python").get(timeout=TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(orders, group_id="alice-kp", auto_offset_reset="earliest", consumer_timeout_ms=10000,
                             **common)
    values = []
    for message in consumer:  # ends after consumer_timeout_ms without a record
        values.append(message.value)
        if message.value == b"from kafka-python":
            break
    consumer.close()
    assert b"from kafka-python" in values


def test_kcat_over_sasl_ssl(secure_broker, pki, orders):
    options = ["-b", secure_broker.listeners["SASL_SSL"], "-X", "security.protocol=SASL_SSL",
               "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice", "-X", f"sasl.password={PASSWORDS['alice']}",
               "-X", f"ssl.ca.location={pki.ca_path}"]
    subprocess.run(["kcat", *options, "-P", "-t", orders], input=b"from kcat\n", check=True, timeout=TIMEOUT_S)
    out = subprocess.run(["kcat", *options, "-C", "-t", orders, "-e", "-o", "beginning"], capture_output=True,
                         check=True, timeout=TIMEOUT_S).stdout
    assert b"from kcat" in out


def test_plaintext_on_the_tls_port_gets_nowhere(secure_broker, pki):
    admin = AdminClient({"bootstrap.servers": secure_broker.listeners["SASL_SSL"], "log_level": 0})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
