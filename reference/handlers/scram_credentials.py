"""DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (51), KIP-554.

Describe needs DESCRIBE on the cluster, Alter needs ALTER (CLUSTER_AUTHORIZATION_FAILED); on a
broker without an authorizer anyone may manage credentials, as on Kafka. An upsertion carries
the salted password (the client ran Hi()); the broker derives StoredKey and ServerKey and writes
a UserScramCredentialRecord. Per-user errors as Kafka's ScramControlManager gives them: a user
named twice DUPLICATE_RESOURCE, a missing credential to delete RESOURCE_NOT_FOUND, an empty name
or an iteration count outside 4096..16384 UNACCEPTABLE_CREDENTIAL, an unknown mechanism
UNSUPPORTED_SASL_MECHANISM. The users' changes are all-or-nothing per user.
"""
from __future__ import annotations

from collections import Counter

from reference.handlers.context import RequestContext
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode, KafkaError
from reference.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from reference.security.records import remove_scram_credential_record, scram_credential_record
from reference.security.scram import (
    ITERATIONS_MAX,
    ITERATIONS_MIN,
    MECHANISM_BY_CODE,
    MECHANISMS,
    credential_from_salted_password,
)


def _cluster_allowed(broker: BrokerNode, context: RequestContext, operation: AclOperation) -> bool:
    return broker.authorizer is None or broker.authorizer.authorize(
        context.principal, context.client_host, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def handle_describe_user_scram_credentials(broker: BrokerNode, request, context: RequestContext) -> dict:
    if not _cluster_allowed(broker, context, AclOperation.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": f"{context.principal} may not describe the cluster", "results": []}
    credentials = broker.image.security.scram_credentials
    if request.users is None or not request.users:  # null or empty: every user that has a credential
        users = sorted({user for user, _ in credentials})
    else:
        users = [user.name for user in request.users]
    counts = Counter(users)
    results = []
    for user in dict.fromkeys(users):
        infos = [{"mechanism": MECHANISMS[mechanism][1], "iterations": credential.iterations}
                 for (name, mechanism), credential in sorted(credentials.items()) if name == user]
        error, message = ErrorCode.NONE, None
        if counts[user] > 1:
            error, message, infos = ErrorCode.DUPLICATE_RESOURCE, f"Cannot describe user {user} more than once", []
        elif not infos:
            error, message = ErrorCode.RESOURCE_NOT_FOUND, f"Attempt to describe a user credential that does not exist: {user}"
        results.append({"user": user, "error_code": error, "error_message": message, "credential_infos": infos})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "results": results}


def handle_alter_user_scram_credentials(broker: BrokerNode, request, context: RequestContext) -> dict:
    changes = [("delete", d) for d in request.deletions] + [("upsert", u) for u in request.upsertions]
    if not _cluster_allowed(broker, context, AclOperation.ALTER):
        return {"throttle_time_ms": 0, "results": [
            {"user": user, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": None}
            for user in dict.fromkeys(change.name for _, change in changes)]}
    by_user: dict[str, list] = {}
    for kind, change in changes:
        by_user.setdefault(change.name, []).append((kind, change))
    results, records = [], []
    for user, user_changes in by_user.items():
        try:
            records += _user_records(broker, user, user_changes)
            results.append({"user": user, "error_code": ErrorCode.NONE, "error_message": None})
        except KafkaError as e:
            results.append({"user": user, "error_code": e.code, "error_message": e.message})
    if records:
        broker.commit_security_records(records, context.now_ms)
    return {"throttle_time_ms": 0, "results": results}


def _user_records(broker: BrokerNode, user: str, changes: list) -> list[dict]:
    mechanisms = Counter(change.mechanism for _, change in changes)
    if any(count > 1 for count in mechanisms.values()):
        raise KafkaError(ErrorCode.DUPLICATE_RESOURCE, f"A user credential cannot be altered twice in the same request: {user}")
    records = []
    for kind, change in changes:
        if change.mechanism not in MECHANISM_BY_CODE:
            raise KafkaError(ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {change.mechanism}")
        mechanism = MECHANISM_BY_CODE[change.mechanism]
        if not user:
            raise KafkaError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        if kind == "delete":
            if broker.scram_credential(mechanism, user) is None:
                raise KafkaError(ErrorCode.RESOURCE_NOT_FOUND,
                                 f"Attempt to delete a user credential that does not exist: {user} {mechanism}")
            records.append(remove_scram_credential_record(user, mechanism))
            continue
        if not ITERATIONS_MIN <= change.iterations <= ITERATIONS_MAX:
            raise KafkaError(ErrorCode.UNACCEPTABLE_CREDENTIAL,
                             f"Iterations {change.iterations} not in {ITERATIONS_MIN}..{ITERATIONS_MAX}")
        if not change.salt or not change.salted_password:
            raise KafkaError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
        credential = credential_from_salted_password(mechanism, bytes(change.salted_password), bytes(change.salt),
                                                     change.iterations)
        records.append(scram_credential_record(user, mechanism, credential))
    return records
