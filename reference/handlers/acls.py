"""DescribeAcls (key 29), CreateAcls (30), DeleteAcls (31): the ACLs of StandardAuthorizer.

v0 of each was removed in Kafka 4.0 (KIP-896); v1 added the pattern type (KIP-290), v2 made them
flexible, v3 added the USER resource type. DescribeAcls needs DESCRIBE on the cluster, the others
ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED); without an authorizer every answer is
SECURITY_DISABLED. ACLs are written to the metadata log as AccessControlEntryRecord and
removed with RemoveAccessControlEntryRecord (reference/security/acls.py); creating an ACL that
exists already succeeds and writes nothing, as Kafka's AclControlManager does.
"""
from __future__ import annotations

import uuid
from itertools import groupby

from reference.handlers.context import RequestContext
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode, KafkaError
from reference.security.acls import CLUSTER_NAME, AclBinding, AclFilter, AclOperation, ResourceType


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
    acl_filter = AclFilter.from_request(request)
    matching = sorted((acl for acl in broker.image.security.acls.values() if acl_filter.matches(acl)),
                      key=lambda acl: (acl.resource_type, acl.resource_name, acl.pattern_type))
    resources = [{"resource_type": resource_type, "resource_name": name, "pattern_type": pattern_type,
                  "acls": [{"principal": acl.principal, "host": acl.host, "operation": acl.operation,
                            "permission_type": acl.permission_type} for acl in acls]}
                 for (resource_type, name, pattern_type), acls in
                 groupby(matching, key=lambda acl: (acl.resource_type, acl.resource_name, acl.pattern_type))]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "resources": resources}


def handle_create_acls(broker: BrokerNode, request, context: RequestContext) -> dict:
    error, message = _refusal(broker, context, AclOperation.ALTER)
    if error:
        return {"throttle_time_ms": 0, "results": [{"error_code": error, "error_message": message}
                                                   for _ in request.creations]}
    results, records = [], []
    for creation in request.creations:
        try:
            binding = AclBinding.from_creation(creation)
        except KafkaError as e:
            results.append({"error_code": e.code, "error_message": e.message})
            continue
        results.append({"error_code": ErrorCode.NONE, "error_message": None})
        if broker.image.security.acl_id(binding) is None and binding not in (r["binding"] for r in records):
            records.append({"binding": binding, "record": binding.to_record(str(uuid.uuid4()))})
    if records:
        broker.commit_security_records([r["record"] for r in records], context.now_ms)
    return {"throttle_time_ms": 0, "results": results}


def handle_delete_acls(broker: BrokerNode, request, context: RequestContext) -> dict:
    error, message = _refusal(broker, context, AclOperation.ALTER)
    if error:
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": error, "error_message": message, "matching_acls": []} for _ in request.filters]}
    deleted: dict[str, AclBinding] = {}
    filter_results = []
    for body in request.filters:
        acl_filter = AclFilter.from_request(body)
        matching = {acl_id: acl for acl_id, acl in broker.image.security.acls.items() if acl_filter.matches(acl)}
        deleted.update(matching)
        filter_results.append({"error_code": ErrorCode.NONE, "error_message": None, "matching_acls": [
            {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": acl.resource_type,
             "resource_name": acl.resource_name, "pattern_type": acl.pattern_type, "principal": acl.principal,
             "host": acl.host, "operation": acl.operation, "permission_type": acl.permission_type}
            for acl in matching.values()]})
    if deleted:
        broker.commit_security_records([{"type": "RemoveAccessControlEntryRecord", "id": acl_id} for acl_id in deleted],
                                       context.now_ms)
    return {"throttle_time_ms": 0, "filter_results": filter_results}
