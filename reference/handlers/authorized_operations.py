"""The authorized operations the Describe APIs answer (KIP-430): Metadata's topic and cluster
operations, DescribeCluster's, DescribeGroups' and ConsumerGroupDescribe's.

A client asks with include_*_authorized_operations; the answer is a 32-bit field with bit n set
for AclOperation code n (Kafka's Utils.to32BitField), or Kafka's "not requested" value
-2147483648 when it did not ask. Without an authorizer Kafka answers every operation the
resource type supports (AclEntry.supportedOperations), which is what this broker answers; an
authorizer would narrow the set here, in this one function.
"""
from __future__ import annotations

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)  # Kafka's "not requested" value

# Kafka's AclOperation codes.
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12

SUPPORTED_OPERATIONS = {  # AclEntry.supportedOperations, Kafka 4.x
    "topic": (READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    "group": (READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    "cluster": (CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE),
}


def authorized_operations(resource_type: str, requested: bool) -> int:
    """The authorized operations field for a resource of this type ("topic", "group", "cluster")."""
    if not requested:
        return AUTHORIZED_OPERATIONS_OMITTED
    field = 0
    for code in SUPPORTED_OPERATIONS[resource_type]:
        field |= 1 << code
    return field
