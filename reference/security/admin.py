"""The ACL and SCRAM credential admin APIs apart from the request: Kafka's AclControlManager
and ScramControlManager deciding which metadata records a change writes, and the describe
answers built from the SecurityImage (reference/security/records.py). The handlers
(reference/handlers/acls.py, scram_credentials.py) check the caller, decode and shape.

SCRAM per-user errors as Kafka's ScramControlManager gives them: a user named twice
DUPLICATE_RESOURCE, a missing credential to delete RESOURCE_NOT_FOUND, an empty name or an
iteration count outside 4096..16384 UNACCEPTABLE_CREDENTIAL, an unknown mechanism
UNSUPPORTED_SASL_MECHANISM. A user's changes are all-or-nothing. An upsertion carries the
salted password (the client ran Hi()); StoredKey and ServerKey are derived here.
Creating an ACL that exists already succeeds and writes nothing, as AclControlManager does.
"""
from __future__ import annotations

import uuid
from collections import Counter
from itertools import groupby

from reference.protocol.errors import ErrorCode, KafkaError
from reference.security.acls import AclBinding, AclFilter
from reference.security.records import SecurityImage, remove_scram_credential_record, scram_credential_record
from reference.security.scram import (
    ITERATIONS_MAX,
    ITERATIONS_MIN,
    MECHANISM_BY_CODE,
    MECHANISMS,
    credential_from_salted_password,
)


def _resource_key(acl: AclBinding) -> tuple:
    return acl.resource_type, acl.resource_name, acl.pattern_type


def describe_acls(image: SecurityImage, acl_filter: AclFilter) -> list[dict]:
    """The matching ACLs, grouped by resource (DescribeAcls' resources)."""
    matching = sorted((acl for acl in image.acls.values() if acl_filter.matches(acl)), key=_resource_key)
    return [{"resource_type": resource_type, "resource_name": name, "pattern_type": pattern_type,
             "acls": [{"principal": acl.principal, "host": acl.host, "operation": acl.operation,
                       "permission_type": acl.permission_type} for acl in acls]}
            for (resource_type, name, pattern_type), acls in groupby(matching, key=_resource_key)]


def acl_creation_records(image: SecurityImage, creations) -> tuple[list[dict], list[dict]]:
    """(per-creation results, AccessControlEntryRecords to write) for CreateAcls."""
    results, bindings = [], []
    for creation in creations:
        try:
            binding = AclBinding.from_creation(creation)
        except KafkaError as e:
            results.append({"error_code": e.code, "error_message": e.message})
            continue
        results.append({"error_code": ErrorCode.NONE, "error_message": None})
        if image.acl_id(binding) is None and binding not in bindings:
            bindings.append(binding)
    return results, [binding.to_record(str(uuid.uuid4())) for binding in bindings]


def acl_deletions(image: SecurityImage, filters) -> tuple[list[dict], list[dict]]:
    """(per-filter results, RemoveAccessControlEntryRecords to write) for DeleteAcls."""
    deleted: dict[str, AclBinding] = {}
    filter_results = []
    for body in filters:
        acl_filter = AclFilter.from_request(body)
        matching = {acl_id: acl for acl_id, acl in image.acls.items() if acl_filter.matches(acl)}
        deleted.update(matching)
        filter_results.append({"error_code": ErrorCode.NONE, "error_message": None, "matching_acls": [
            {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": acl.resource_type,
             "resource_name": acl.resource_name, "pattern_type": acl.pattern_type, "principal": acl.principal,
             "host": acl.host, "operation": acl.operation, "permission_type": acl.permission_type}
            for acl in matching.values()]})
    return filter_results, [{"type": "RemoveAccessControlEntryRecord", "id": acl_id} for acl_id in deleted]


def describe_scram_credentials(image: SecurityImage, users: list[str] | None) -> list[dict]:
    """Per-user results of DescribeUserScramCredentials; None or empty: every user with a credential."""
    credentials = image.scram_credentials
    if not users:
        users = sorted({user for user, _ in credentials})
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
    return results


def scram_alteration_records(image: SecurityImage, deletions, upsertions) -> tuple[list[dict], list[dict]]:
    """(per-user results, credential records to write) for AlterUserScramCredentials."""
    by_user: dict[str, list] = {}
    for kind, change in [("delete", d) for d in deletions] + [("upsert", u) for u in upsertions]:
        by_user.setdefault(change.name, []).append((kind, change))
    results, records = [], []
    for user, user_changes in by_user.items():
        try:
            records += _user_records(image, user, user_changes)
            results.append({"user": user, "error_code": ErrorCode.NONE, "error_message": None})
        except KafkaError as e:
            results.append({"user": user, "error_code": e.code, "error_message": e.message})
    return results, records


def _user_records(image: SecurityImage, user: str, changes: list) -> list[dict]:
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
            if image.scram_credentials.get((user, mechanism)) is None:
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
