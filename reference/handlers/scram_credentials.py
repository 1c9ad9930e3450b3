"""DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (51), KIP-554.

Describe needs DESCRIBE on the cluster, Alter needs ALTER (CLUSTER_AUTHORIZATION_FAILED); on a
broker without an authorizer anyone may manage credentials, as on Kafka. Which records an
alteration writes and the per-user errors are reference/security/admin.py (ScramControlManager);
they are written as UserScramCredentialRecords to the metadata log.
"""
from __future__ import annotations

from reference.handlers.context import RequestContext
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode
from reference.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from reference.security.admin import describe_scram_credentials, scram_alteration_records


def _cluster_allowed(broker: BrokerNode, context: RequestContext, operation: AclOperation) -> bool:
    return broker.authorizer is None or broker.authorizer.authorize(
        context.principal, context.client_host, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def handle_describe_user_scram_credentials(broker: BrokerNode, request, context: RequestContext) -> dict:
    if not _cluster_allowed(broker, context, AclOperation.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": f"{context.principal} may not describe the cluster", "results": []}
    users = None if request.users is None else [user.name for user in request.users]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "results": describe_scram_credentials(broker.image.security, users)}


def handle_alter_user_scram_credentials(broker: BrokerNode, request, context: RequestContext) -> dict:
    if not _cluster_allowed(broker, context, AclOperation.ALTER):
        users = [change.name for change in [*request.deletions, *request.upsertions]]
        return {"throttle_time_ms": 0, "results": [
            {"user": user, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": None}
            for user in dict.fromkeys(users)]}
    results, records = scram_alteration_records(broker.image.security, request.deletions, request.upsertions)
    if records:
        broker.commit_security_records(records, context.now_ms)
    return {"throttle_time_ms": 0, "results": results}
