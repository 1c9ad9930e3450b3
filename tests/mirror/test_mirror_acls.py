"""Topic ACL sync (sync.topic.acls.enabled): the source's topic ACLs appear on the remote topics
with MM2's rules: ALLOW WRITE is not synced, ALLOW ALL becomes ALLOW READ, DENY stays, only
LITERAL topic patterns of mirrored topics. Two `kspec broker` clusters with an authorizer."""
from __future__ import annotations

import pytest
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from mirror.acls import target_bindings
from reference.process import BrokerProcess

from mirror_helpers import MirrorProcess, topic_exists, wait_for, write_properties

AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:ANONYMOUS"}  # the PLAINTEXT clients (the mirror, the test) are super users


def topic_acl(topic: str, principal: str, operation, permission=AclPermissionType.ALLOW,
              pattern=ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, pattern, principal, "*", operation, permission)


def test_mm2_rules_for_which_acls_are_synced_and_how():
    source = [topic_acl("orders", "User:alice", AclOperation.READ),
              topic_acl("orders", "User:alice", AclOperation.WRITE),
              topic_acl("orders", "User:bob", AclOperation.ALL),
              topic_acl("orders", "User:eve", AclOperation.WRITE, AclPermissionType.DENY),
              topic_acl("ord", "User:carol", AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
              topic_acl("private", "User:alice", AclOperation.READ)]
    synced = target_bindings(source, lambda topic: topic != "private", lambda topic: f"east.{topic}")
    assert synced == [topic_acl("east.orders", "User:alice", AclOperation.READ),
                      topic_acl("east.orders", "User:bob", AclOperation.READ),
                      topic_acl("east.orders", "User:eve", AclOperation.WRITE, AclPermissionType.DENY)]


@pytest.fixture(scope="module")
def secured_clusters(tmp_path_factory):
    base = tmp_path_factory.mktemp("acl-clusters")
    source = BrokerProcess(str(base / "source"), overrides=AUTHORIZER)
    target = BrokerProcess(str(base / "target"), overrides=AUTHORIZER)
    source.start()
    try:
        target.start()
        try:
            yield source.bootstrap, target.bootstrap
        finally:
            target.stop()
    finally:
        source.stop()


def test_a_running_mirror_syncs_the_source_topic_acls_onto_the_remote_topic(secured_clusters, tmp_path):
    source, target = secured_clusters
    source_admin, target_admin = AdminClient({"bootstrap.servers": source}), AdminClient({"bootstrap.servers": target})
    for topic in ("orders", "private"):
        source_admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    created = source_admin.create_acls([
        topic_acl("orders", "User:alice", AclOperation.READ), topic_acl("orders", "User:alice", AclOperation.WRITE),
        topic_acl("orders", "User:bob", AclOperation.ALL),
        topic_acl("orders", "User:eve", AclOperation.WRITE, AclPermissionType.DENY),
        topic_acl("ord", "User:carol", AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
        topic_acl("private", "User:alice", AclOperation.READ)])
    for future in created.values():
        future.result()
    properties = write_properties(tmp_path / "mm2.properties", "east", "west", source, target, **{
        "topics": "orders", "sync.topic.acls.interval.seconds": "1", "refresh.topics.interval.seconds": "1"})

    def remote_acls():
        everything = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                                      AclOperation.ANY, AclPermissionType.ANY)
        return sorted((b.name, b.principal, b.operation.name, b.permission_type.name, b.resource_pattern_type.name)
                      for b in target_admin.describe_acls(everything).result(10))
    expected = [("east.orders", "User:alice", "READ", "ALLOW", "LITERAL"),
                ("east.orders", "User:bob", "READ", "ALLOW", "LITERAL"),
                ("east.orders", "User:eve", "WRITE", "DENY", "LITERAL")]
    with MirrorProcess(properties) as mirror:
        wait_for(lambda: topic_exists(target, "east.orders"), "east.orders created", mirror=mirror)
        wait_for(lambda: remote_acls() == expected, "the source's topic ACLs synced onto east.orders",
                 mirror=mirror)
        assert mirror.stop() == 0
    assert remote_acls() == expected  # nothing else: no WRITE, no PREFIXED, nothing for the unmirrored topic
