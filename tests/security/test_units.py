"""The security cores without sockets: SCRAM against RFC 7677's example, PLAIN, the SASL gate,
JAAS, the authorizer's rules, principal mapping, and listener configuration (server.properties
as Kafka's docs write it, KIP-651 inline PEM, one-line errors)."""
from __future__ import annotations

import base64

import pytest

from reference.config import BrokerConfig
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from reference.security.acls import AclBinding, AclOperation, PatternType, PermissionType, ResourceType
from reference.security.authorizer import StandardAuthorizer
from reference.security.jaas import PLAIN_LOGIN_MODULE, parse_jaas_config
from reference.security.principal import KafkaPrincipal, SslPrincipalMapper, rfc2253_subject
from reference.security.sasl import SaslAuthenticator, SaslConfig, State
from reference.security.scram import ScramError, ScramServer, credential_from_salted_password, salted_password

# RFC 7677 section 3: user "user", password "pencil".
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC7677_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc7677_server(password: str = "pencil") -> ScramServer:
    credential = credential_from_salted_password(
        "SCRAM-SHA-256", salted_password("SCRAM-SHA-256", password, RFC7677_SALT, 4096), RFC7677_SALT, 4096)
    return ScramServer("SCRAM-SHA-256", {"user": credential}.get, RFC7677_SERVER_NONCE)


def test_scram_sha_256_matches_rfc_7677_example():
    server = rfc7677_server()
    assert server.evaluate(RFC7677_CLIENT_FIRST) == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                                     b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert server.evaluate(RFC7677_CLIENT_FINAL) == RFC7677_SERVER_FINAL
    assert server.complete and server.username == "user"


@pytest.mark.parametrize("client_first, client_final", [
    (RFC7677_CLIENT_FIRST, RFC7677_CLIENT_FINAL.replace(b"p=dHz", b"p=AHz")),  # wrong proof
    (RFC7677_CLIENT_FIRST, RFC7677_CLIENT_FINAL.replace(b"r=rOpr", b"r=XOpr")),  # nonce not the server's
    (RFC7677_CLIENT_FIRST, b"garbage"),  # malformed client-final
    (b"y,,n=user,r=abc", None),  # channel binding asked for
    (b"n,,r=abc", None),  # no user
    (b"n,,n=nobody,r=abc", None),  # unknown user
    (b"\xff\xfe", None),  # not UTF-8
])
def test_scram_refuses_bad_exchanges(client_first, client_final):
    server = rfc7677_server()
    with pytest.raises(ScramError):
        server.evaluate(client_first)
        server.evaluate(client_final)
    assert not server.complete


def test_scram_with_another_password_fails():
    server = rfc7677_server(password="not-pencil")
    server.evaluate(RFC7677_CLIENT_FIRST)
    with pytest.raises(ScramError, match="invalid SCRAM proof"):
        server.evaluate(RFC7677_CLIENT_FINAL)


def authenticator(reauth_ms: int = 0) -> SaslAuthenticator:
    return SaslAuthenticator(SaslConfig(("PLAIN",), {"alice": "secret"}, reauth_ms), lambda m, u: None, lambda: "n")


def test_auth_1_only_the_handshake_is_served_before_authentication():
    sasl = authenticator()
    assert sasl.admits(ApiKey.API_VERSIONS, 0) is None
    assert sasl.admits(ApiKey.API_VERSIONS, 0) is not None  # a second ApiVersions is refused
    assert sasl.admits(ApiKey.METADATA, 0) is not None
    assert sasl.admits(ApiKey.SASL_AUTHENTICATE, 0) is not None  # before the handshake
    assert sasl.handshake("PLAIN", 1)["error_code"] == ErrorCode.NONE
    assert sasl.admits(ApiKey.PRODUCE, 0) is not None
    assert sasl.authenticate(b"\0alice\0secret", 2, 0)["error_code"] == ErrorCode.NONE
    assert sasl.admits(ApiKey.PRODUCE, 0) is None and str(sasl.principal) == "User:alice"


@pytest.mark.parametrize("token", [b"\0alice\0wrong", b"\0bob\0secret", b"alice\0secret", b"\0alice\0", b"x\0alice\0secret"])
def test_plain_failures_answer_sasl_authentication_failed_and_end_in_failed(token):
    sasl = authenticator()
    sasl.handshake("PLAIN", 1)
    response = sasl.authenticate(token, 2, 0)
    assert response["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED and response["error_message"]
    assert sasl.state == State.FAILED and sasl.principal is None


def test_unknown_mechanism_is_refused():
    sasl = authenticator()
    response = sasl.handshake("GSSAPI", 1)
    assert response["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM and response["mechanisms"] == ["PLAIN"]
    assert sasl.state == State.FAILED


def test_kip_368_session_lifetime_and_reauthentication_as_the_same_principal():
    sasl = authenticator(reauth_ms=1000)
    sasl.handshake("PLAIN", 1)
    assert sasl.authenticate(b"\0alice\0secret", 2, now_ms=0)["session_lifetime_ms"] == 1000
    assert sasl.admits(ApiKey.FETCH, 999) is None
    assert sasl.admits(ApiKey.FETCH, 1000) is not None  # expired: only SaslHandshake now
    assert sasl.admits(ApiKey.SASL_HANDSHAKE, 1000) is None
    assert sasl.handshake("PLAIN", 1)["error_code"] == ErrorCode.NONE
    assert sasl.authenticate(b"\0alice\0secret", 2, now_ms=1500)["session_lifetime_ms"] == 1000
    assert sasl.admits(ApiKey.FETCH, 2000) is None


def test_handshake_after_authentication_without_reauthentication_is_illegal():
    sasl = authenticator()
    sasl.handshake("PLAIN", 1)
    sasl.authenticate(b"\0alice\0secret", 2, 0)
    assert sasl.handshake("PLAIN", 1)["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    assert sasl.authenticate(b"\0alice\0secret", 2, 0)["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    assert sasl.authenticated


def test_jaas_config_parses_plain_users_and_refuses_garbage():
    module = parse_jaas_config('org.apache.kafka.common.security.plain.PlainLoginModule required '
                               'username="admin" /* a comment */ user_admin="a;b" user_x="y";')
    assert module.control_flag == "required"
    assert module.options == {"username": "admin", "user_admin": "a;b", "user_x": "y"}
    for garbage in ["", "Module", 'Module required user="x"', "Module sometimes;", "Module required user=5;",
                    'Module required user="x"; Other required;', 'Module required user="x;']:
        with pytest.raises(ValueError, match="sasl.jaas.config"):
            parse_jaas_config(garbage)


def acl(name: str, operation: AclOperation, permission: PermissionType = PermissionType.ALLOW,
        principal: str = "User:alice", pattern: PatternType = PatternType.LITERAL,
        resource_type: ResourceType = ResourceType.TOPIC, host: str = "*") -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


ALICE = KafkaPrincipal("User", "alice")


def decide(acls, operation, name="orders", allow_everyone=False, principal=ALICE, host="10.0.0.1"):
    return StandardAuthorizer(["User:admin"], allow_everyone, lambda: acls).authorize(
        principal, host, operation, ResourceType.TOPIC, name)


def test_authorizer_rules():
    assert not decide([], AclOperation.READ)  # no ACL: deny by default
    assert decide([], AclOperation.READ, allow_everyone=True)
    assert decide([], AclOperation.READ, principal=KafkaPrincipal("User", "admin"))  # super user
    assert decide([acl("orders", AclOperation.READ)], AclOperation.READ)
    assert decide([acl("orders", AclOperation.READ)], AclOperation.DESCRIBE)  # READ implies DESCRIBE
    assert not decide([acl("orders", AclOperation.DESCRIBE)], AclOperation.READ)
    assert decide([acl("orders", AclOperation.ALTER_CONFIGS)], AclOperation.DESCRIBE_CONFIGS)
    assert not decide([acl("orders", AclOperation.READ)], AclOperation.WRITE)
    assert decide([acl("ord", AclOperation.WRITE, pattern=PatternType.PREFIXED)], AclOperation.WRITE)
    assert not decide([acl("ord", AclOperation.WRITE)], AclOperation.WRITE)  # LITERAL "ord" is another topic
    assert decide([acl("*", AclOperation.ALL)], AclOperation.DELETE)
    assert decide([acl("orders", AclOperation.READ, principal="User:*")], AclOperation.READ)
    assert not decide([acl("orders", AclOperation.READ, host="10.0.0.2")], AclOperation.READ)
    # DENY wins over any ALLOW, and an ACL for someone else still makes the resource ACL'd.
    assert not decide([acl("*", AclOperation.ALL), acl("orders", AclOperation.READ, PermissionType.DENY)],
                      AclOperation.READ)
    assert not decide([acl("orders", AclOperation.READ, principal="User:bob")], AclOperation.READ,
                      allow_everyone=True)


def test_ssl_principal_mapping_rules():
    subject = rfc2253_subject(((("organizationName", "kspec"),), (("commonName", "alice"),)))
    assert subject == "CN=alice,O=kspec"
    assert str(SslPrincipalMapper("DEFAULT").principal(subject)) == "User:CN=alice,O=kspec"
    rules = SslPrincipalMapper(r"RULE:^CN=([a-z]+),O=kspec$/$1/U,DEFAULT")
    assert str(rules.principal(subject)) == "User:ALICE"
    assert str(rules.principal("CN=x,O=other")) == "User:CN=x,O=other"
    with pytest.raises(ValueError):
        SslPrincipalMapper("RULE:broken")


@pytest.mark.parametrize("properties, message", [
    ({"listeners": "FOO://127.0.0.1:0"}, "no security protocol defined for listener FOO"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "invalid security protocol"),
    ({"listeners": "SSL://127.0.0.1:0"}, "ssl.keystore.location"),
    ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "JKS"}, "PEM"),
    ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "/nonexistent.pem"}, "cannot load"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "GSSAPI"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN"}, "no JAAS config"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
      "listener.name.sasl_plaintext.plain.sasl.jaas.config": "garbage"}, "sasl.jaas.config"),
    ({"advertised.listeners": "OTHER://h:1"}, "not in listeners"),
    ({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}, "not supported"),
    ({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
      "super.users": "admin"}, "TYPE:NAME"),
])
def test_bad_security_configuration_is_one_clear_error(properties, message):
    with pytest.raises(ValueError, match=message) as error:
        BrokerConfig.from_properties({"log.dirs": "/tmp/x", **properties})
    assert "\n" not in str(error.value)


def test_the_traffic_between_nodes_takes_the_inter_broker_listeners_protocol_and_credentials(pki):
    """inter.broker.listener.name and controller.listener.names pick the listeners the nodes talk
    to; a SASL one needs sasl.mechanism.*.protocol and the node's own username and password in
    that listener's JAAS config, a TLS one a truststore: each missing piece is one clear line."""
    from reference.security.inter_node import CONTROLLER, INTER_BROKER, client_security
    jaas = f'{PLAIN_LOGIN_MODULE} required username="node" password="node-pw" user_node="node-pw";'
    voters = {"log.dirs": "/tmp/x", "node.id": "1", "controller.quorum.voters": "1@127.0.0.1:9092",
              "listeners": "CONTROLLER://127.0.0.1:9092,REPLICATION://127.0.0.1:9093,CLIENT://127.0.0.1:9094",
              "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,REPLICATION:SSL,CLIENT:PLAINTEXT",
              "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "REPLICATION",
              "sasl.enabled.mechanisms": "PLAIN", "listener.name.controller.plain.sasl.jaas.config": jaas,
              "ssl.keystore.location": pki.server_pem_path, "ssl.truststore.location": pki.ca_path}
    with pytest.raises(ValueError, match="sasl.mechanism.controller.protocol=GSSAPI is not supported") as error:
        BrokerConfig.from_properties(voters)
    assert "\n" not in str(error.value)
    config = BrokerConfig.from_properties({**voters, "sasl.mechanism.controller.protocol": "PLAIN"})
    controller = client_security(config.security_properties, config.listeners, CONTROLLER)
    assert (controller.listener, controller.protocol, controller.mechanism, controller.username) == (
        "CONTROLLER", "SASL_PLAINTEXT", "PLAIN", "node")
    replication = client_security(config.security_properties, config.listeners, INTER_BROKER)
    assert (replication.listener, replication.protocol) == ("REPLICATION", "SSL")
    assert replication.ssl_context is not None and replication.mechanism is None
    with pytest.raises(ValueError, match="set ssl.truststore.location"):
        BrokerConfig.from_properties({**voters, "sasl.mechanism.controller.protocol": "PLAIN",
                                      "ssl.truststore.location": ""})
    unnamed = {**voters, "sasl.mechanism.controller.protocol": "PLAIN",
               "listener.name.controller.plain.sasl.jaas.config": f'{PLAIN_LOGIN_MODULE} required user_node="pw";'}
    with pytest.raises(ValueError, match="give username and password"):
        BrokerConfig.from_properties(unnamed)


def test_a_server_properties_file_as_kafkas_docs_write_it(tmp_path, pki):
    from reference.config import read_properties_file
    path = tmp_path / "server.properties"
    path.write_text(
        "listeners=SASL_SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0\n"
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.location={pki.server_pem_path}\n"
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256\n"
        "listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
        "required \\\n    username=\"admin\" password=\"admin-secret\" \\\n    user_admin=\"admin-secret\" "
        "user_alice=\"alice-secret\";\n"
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
        "super.users=User:admin\n")
    config = BrokerConfig.from_properties({**read_properties_file(str(path)), "log.dirs": str(tmp_path)})
    sasl_ssl, plaintext = config.listeners
    assert (sasl_ssl.protocol, plaintext.protocol) == ("SASL_SSL", "PLAINTEXT")
    assert sasl_ssl.sasl.plain_users == {"admin": "admin-secret", "alice": "alice-secret"}
    assert sasl_ssl.ssl_context is not None and plaintext.ssl_context is None


def test_kip_651_inline_pem_keystore(pki):
    config = BrokerConfig.from_properties({
        "log.dirs": "/tmp/x", "listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": pki.server_chain_pem, "ssl.keystore.key": pki.server_key_pem})
    assert config.listeners[0].ssl_context is not None
