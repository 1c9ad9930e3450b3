"""Kafka's StandardAuthorizer (org.apache.kafka.metadata.authorizer.StandardAuthorizer), sans-IO.

    authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
    super.users=User:admin;User:broker
    allow.everyone.if.no.acl.found=false

A decision for (principal, host, operation, resource):
1. a super user may do anything;
2. the ACLs that apply: the resource's type and a pattern covering its name (the literal name,
   the literal `*`, or a PREFIXED prefix); none at all -> allow.everyone.if.no.acl.found;
3. of those, the ones for this principal (or User:*) and host (or *): any DENY of the operation
   (or ALL) refuses, whatever allows it (DENY wins);
4. else an ALLOW of the operation, of ALL, or of an operation implying it: READ, WRITE, DELETE
   and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS. Nothing else allows.
The ACLs are read from the metadata image (`acls()`), so a node decides from what it replayed.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from reference.security.acls import AclBinding, AclOperation, PermissionType, ResourceType
from reference.security.principal import KafkaPrincipal

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
IMPLIED_BY = {  # an ALLOW of any of these allows the key (Kafka's StandardAuthorizerData)
    AclOperation.DESCRIBE: {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER},
    AclOperation.DESCRIBE_CONFIGS: {AclOperation.ALTER_CONFIGS},
}
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"


class StandardAuthorizer:
    def __init__(self, super_users: Iterable[str], allow_everyone_if_no_acl_found: bool,
                 acls: Callable[[], Iterable[AclBinding]]) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls = acls

    @classmethod
    def from_properties(cls, properties: dict[str, str], acls: Callable[[], Iterable[AclBinding]]):
        """The configured authorizer, or None when authorizer.class.name is unset; ValueError on a bad value."""
        class_name = properties.get("authorizer.class.name", "").strip()
        if not class_name:
            return None
        if class_name != STANDARD_AUTHORIZER:
            raise ValueError(f"authorizer.class.name={class_name} is not supported; use {STANDARD_AUTHORIZER}")
        super_users = [user.strip() for user in properties.get("super.users", "").split(";") if user.strip()]
        for user in super_users:
            KafkaPrincipal.parse(user)  # ValueError on a malformed entry
        allow = properties.get("allow.everyone.if.no.acl.found", "false").strip().lower()
        if allow not in ("true", "false"):
            raise ValueError(f"allow.everyone.if.no.acl.found={allow} must be true or false")
        return cls(super_users, allow == "true", acls)

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        if str(principal) in self.super_users:
            return True
        applicable = [acl for acl in self._acls() if acl.applies_to(resource_type, name)]
        if not applicable:
            return self.allow_everyone_if_no_acl_found
        mine = [acl for acl in applicable if acl.principal in (str(principal), WILDCARD_PRINCIPAL)
                and acl.host in (host, WILDCARD_HOST)]
        if any(acl.permission_type == PermissionType.DENY and acl.operation in (operation, AclOperation.ALL)
               for acl in mine):
            return False
        allowing = {operation, AclOperation.ALL} | IMPLIED_BY.get(operation, set())
        return any(acl.permission_type == PermissionType.ALLOW and acl.operation in allowing for acl in mine)

    def allows_any(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                   resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType: some resource of the type has an ALLOW for the
        operation that no DENY of a covering pattern cancels (InitProducerId without a
        transactional id: WRITE on any topic stands in for IDEMPOTENT_WRITE on the cluster)."""
        if str(principal) in self.super_users:
            return True
        mine = [acl for acl in self._acls() if acl.resource_type == resource_type
                and acl.principal in (str(principal), WILDCARD_PRINCIPAL) and acl.host in (host, WILDCARD_HOST)
                and acl.operation in (operation, AclOperation.ALL)]
        allows = [acl for acl in mine if acl.permission_type == PermissionType.ALLOW]
        denies = [acl for acl in mine if acl.permission_type == PermissionType.DENY]
        return any(not any(deny.applies_to(resource_type, allow.resource_name) for deny in denies) for allow in allows)
