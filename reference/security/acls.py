"""ACLs as Kafka's StandardAuthorizer keeps them: bindings, their metadata records, and filters.

An ACL binding is a resource pattern (type, name, LITERAL or PREFIXED) and an entry (principal,
host, operation, ALLOW or DENY). They live in the metadata log as AccessControlEntryRecord (with
an id) and go with RemoveAccessControlEntryRecord, so every node replaying the log has them.
The enums carry Kafka's codes (AclOperation, ResourceType, PatternType, AclPermissionType).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from reference.protocol.errors import ErrorCode, KafkaError

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class PermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


@dataclass(frozen=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: PermissionType

    def applies_to(self, resource_type: int, name: str) -> bool:
        """Whether this ACL's pattern covers the resource: the literal name, the literal `*`, or a prefix."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name in (name, WILDCARD)
        return self.pattern_type == PatternType.PREFIXED and name.startswith(self.resource_name)

    def to_record(self, acl_id: str) -> dict:
        return {"type": "AccessControlEntryRecord", "id": acl_id, "resource_type": int(self.resource_type),
                "resource_name": self.resource_name, "pattern_type": int(self.pattern_type),
                "principal": self.principal, "host": self.host, "operation": int(self.operation),
                "permission_type": int(self.permission_type)}

    @classmethod
    def from_record(cls, record: dict) -> AclBinding:
        return cls(ResourceType(record["resource_type"]), record["resource_name"], PatternType(record["pattern_type"]),
                   record["principal"], record["host"], AclOperation(record["operation"]),
                   PermissionType(record["permission_type"]))

    @classmethod
    def from_creation(cls, creation) -> AclBinding:
        """A CreateAcls creation, checked as Kafka's AclControlManager checks it (INVALID_REQUEST)."""
        try:
            binding = cls(ResourceType(creation.resource_type), creation.resource_name,
                          PatternType(creation.get("resource_pattern_type", PatternType.LITERAL)),
                          creation.principal, creation.host, AclOperation(creation.operation),
                          PermissionType(creation.permission_type))
        except ValueError as e:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown enum value: {e}") from None
        problem = None
        if binding.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            problem = "the resource type must be specific"
        elif binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            problem = "the pattern type must be LITERAL or PREFIXED"
        elif binding.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            problem = "the operation must be specific"
        elif binding.permission_type not in (PermissionType.ALLOW, PermissionType.DENY):
            problem = "the permission type must be ALLOW or DENY"
        elif not binding.resource_name:
            problem = "the resource name is empty"
        elif binding.resource_type == ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
            problem = f"the cluster resource is named {CLUSTER_NAME}"
        elif ":" not in (binding.principal or ""):
            problem = f"principal {binding.principal!r} is not TYPE:NAME"
        elif not binding.host:
            problem = "the host is empty (use * for any host)"
        if problem:
            raise KafkaError(ErrorCode.INVALID_REQUEST, problem)
        return binding


@dataclass(frozen=True)
class AclFilter:
    """A DescribeAcls / DeleteAcls filter: ANY (or None) matches anything; pattern ANY matches any
    pattern type with the exact name; MATCH every ACL that applies to the name (Kafka's
    ResourcePatternFilter)."""
    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int

    @classmethod
    def from_request(cls, body) -> AclFilter:
        return cls(body.resource_type_filter, body.resource_name_filter,
                   body.get("pattern_type_filter", PatternType.LITERAL), body.principal_filter, body.host_filter,
                   body.operation, body.permission_type)

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is not None and not (
                    acl.applies_to(acl.resource_type, self.resource_name)):
                return False
        else:
            if self.pattern_type != PatternType.ANY and acl.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and acl.resource_name != self.resource_name:
                return False
        return ((self.principal is None or acl.principal == self.principal)
                and (self.host is None or acl.host == self.host)
                and (self.operation == AclOperation.ANY or acl.operation == self.operation)
                and (self.permission_type == PermissionType.ANY or acl.permission_type == self.permission_type))


# The operations an authorized-operations field reports, per resource type (Kafka's
# AclEntry.supportedOperations): bit 1 << operation code is set for each one allowed (KIP-430).
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
}
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)  # Kafka's "not requested" value


def all_supported_operations(resource_type: ResourceType, requested: bool) -> int:
    """The authorized-operations field of the Describe APIs without an authorizer: every
    operation the resource type supports (with one, security/checks.py narrows it), or Kafka's
    "not requested" value when the client did not ask."""
    if not requested:
        return AUTHORIZED_OPERATIONS_OMITTED
    return sum(1 << operation for operation in SUPPORTED_OPERATIONS[resource_type])
