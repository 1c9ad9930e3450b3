"""Topic ACL sync (`sync.topic.acls.enabled`), MirrorSourceConnector's rules, sans-IO.

The source's ACL bindings on topics are read with DescribeAcls; those on LITERAL topic names
that the flow mirrors are created on the remote topics in the target, with two changes MM2
makes so that the remote topic stays written by the mirror only:
- ALLOW WRITE is not synced (nobody but the mirror should write a remote topic);
- ALLOW ALL becomes ALLOW READ.
DENY bindings are synced as they are. PREFIXED and MATCH patterns and group ACLs are not
synced, and an ACL deleted in the source stays in the target (MM2 only creates).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType


def should_sync(binding: AclBinding) -> bool:
    return not (binding.permission_type == AclPermissionType.ALLOW and binding.operation == AclOperation.WRITE)


def target_binding(binding: AclBinding, remote_topic: str) -> AclBinding:
    operation = AclOperation.READ if (binding.permission_type == AclPermissionType.ALLOW
                                      and binding.operation == AclOperation.ALL) else binding.operation
    return AclBinding(ResourceType.TOPIC, remote_topic, ResourcePatternType.LITERAL, binding.principal,
                      binding.host, operation, binding.permission_type)


def target_bindings(source_bindings: Iterable[AclBinding], mirrors_topic: Callable[[str], bool],
                    remote_topic: Callable[[str], str]) -> list[AclBinding]:
    """The bindings to create in the target for the source's topic ACL bindings."""
    return [target_binding(b, remote_topic(b.name)) for b in source_bindings
            if b.restype == ResourceType.TOPIC and b.resource_pattern_type == ResourcePatternType.LITERAL
            and should_sync(b) and mirrors_topic(b.name)]
