"""The pieces every authorization check of checks.py is made of: `Verdict` (what a check
returns: a whole refusal, or completions that answer the items taken out of the request) and
`Asker` (the authorizer's questions for one request's principal and host).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from reference.protocol.errors import ErrorCode
from reference.security.acls import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType

TOPIC_FAILED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_FAILED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_FAILED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_FAILED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
KEY_TYPE_TRANSACTION = 1  # FindCoordinator key_type
TOPIC_CONFIG_RESOURCE, GROUP_CONFIG_RESOURCE = 2, 32  # DescribeConfigs resource types; the others are the cluster's


@dataclass
class Verdict:
    refused: dict | None = None  # the whole answer, when the request is refused outright
    completions: list[Callable[[dict], None]] = field(default_factory=list)

    def complete(self, response: dict | None) -> dict | None:
        if response is not None:
            for completion in self.completions:
                completion(response)
        return response


PASS = Verdict()

class Asker:
    """The authorizer's questions for one request's principal and host."""

    def __init__(self, broker, context) -> None:
        self.broker, self.context = broker, context
        self.authorizer = broker.authorizer

    def may(self, operation: AclOperation, resource_type: ResourceType, name: str | None) -> bool:
        return name is not None and self.authorizer.authorize(self.context.principal, self.context.client_host,
                                                              operation, resource_type, name)

    def topic(self, operation: AclOperation, name: str | None) -> bool:
        return self.may(operation, ResourceType.TOPIC, name)

    def group(self, operation: AclOperation, name: str | None) -> bool:
        return self.may(operation, ResourceType.GROUP, name)

    def cluster(self, *operations: AclOperation) -> bool:
        return any(self.may(operation, ResourceType.CLUSTER, CLUSTER_NAME) for operation in operations)

    def transactional_id(self, operation: AclOperation, name: str | None) -> bool:
        return self.may(operation, ResourceType.TRANSACTIONAL_ID, name)

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        return sum(1 << operation for operation in SUPPORTED_OPERATIONS[resource_type]
                   if self.may(operation, resource_type, name))

    def topic_name(self, topic, name_field: str = "name") -> str | None:
        """A request topic's name, looked up by topic id where the version names topics by id."""
        name = topic.get(name_field)
        if name:
            return name
        topic_id = topic.get("topic_id")
        return self.broker.image.topics_by_id.get(topic_id) if topic_id is not None else None
