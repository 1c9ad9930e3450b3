"""DescribeAcls (key 29), CreateAcls (30), DeleteAcls (31): the ACLs of StandardAuthorizer.

v0 of each was removed in Kafka 4.0 (KIP-896); v1 added the pattern type (KIP-290), v2 made them
flexible, v3 added the USER resource type. DescribeAcls needs DESCRIBE on the cluster, the others
ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED); without an authorizer every answer is
SECURITY_DISABLED. ACLs are written to the metadata log as AccessControlEntryRecord and
removed with RemoveAccessControlEntryRecord (reference/security/acls.py); which records a
change writes and what a filter matches are reference/security/admin.py (AclControlManager).
"""
from __future__ import annotations

from reference.handlers.context import RequestContext
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode
from reference.security.acls import CLUSTER_NAME, AclFilter, AclOperation, ResourceType
from reference.security.admin import acl_creation_records, acl_deletions, describe_acls


def _refusal(broker: BrokerNode, context: RequestContext, operation: AclOperation) -> tuple[int, str | None]:
    """(error code, message) when the request may not be served, else (NONE, None)."""
    if broker.authorizer is None:
        return ErrorCode.SECURITY_DISABLED, "No authorizer is configured (authorizer.class.name)."
    if not broker.authorizer.authorize(context.principal, context.client_host, operation, ResourceType.CLUSTER,
                                       CLUSTER_NAME):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{context.principal} may not {operation.name} the cluster"
    return ErrorCode.NONE, None


def handle_describe_acls(broker: BrokerNode, request, context: RequestContext) -> dict:
    error, message = _refusal(broker, context, AclOperation.DESCRIBE)
    if error:
        return {"throttle_time_ms": 0, "error_code": error, "error_message": message, "resources": []}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "resources": describe_acls(broker.image.security, AclFilter.from_request(request))}


def handle_create_acls(broker: BrokerNode, request, context: RequestContext) -> dict:
    error, message = _refusal(broker, context, AclOperation.ALTER)
    if error:
        return {"throttle_time_ms": 0, "results": [{"error_code": error, "error_message": message}
                                                   for _ in request.creations]}
    results, records = acl_creation_records(broker.image.security, request.creations)
    if records:
        broker.commit_security_records(records, context.now_ms)
    return {"throttle_time_ms": 0, "results": results}


def handle_delete_acls(broker: BrokerNode, request, context: RequestContext) -> dict:
    error, message = _refusal(broker, context, AclOperation.ALTER)
    if error:
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": error, "error_message": message, "matching_acls": []} for _ in request.filters]}
    filter_results, records = acl_deletions(broker.image.security, request.filters)
    if records:
        broker.commit_security_records(records, context.now_ms)
    return {"throttle_time_ms": 0, "filter_results": filter_results}
