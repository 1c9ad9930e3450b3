"""What each API asks the authorizer, and what a refusal looks like: Kafka's table
(docs/security.html "Operations and Resources on Protocols", KafkaApis), in one place.

`authorize_request(broker, api_key, request, context)` runs before the handler and returns a
Verdict: either the whole answer (`refused`, e.g. CLUSTER_AUTHORIZATION_FAILED), or the
request with the items the principal may not touch taken out (the handler never sees them,
so nothing about them changes, AUTH-2) and `complete(response)`, which puts their error
entries back into the handler's answer. Authorization comes before existence: a refused
client learns nothing about whether a topic or group exists.

With no authorizer configured every request passes unchanged.
"""
from __future__ import annotations

from collections.abc import Callable

from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from reference.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from reference.security.verdict import (
    CLUSTER_FAILED, GROUP_CONFIG_RESOURCE, GROUP_FAILED, KEY_TYPE_TRANSACTION, PASS, TOPIC_CONFIG_RESOURCE,
    TOPIC_FAILED, TXN_FAILED, Asker, Verdict,
)

def acts_for_the_cluster(broker, principal, client_host: str) -> bool:
    """Whether a connection may send the nodes' own RPCs (raft, registrations, heartbeats,
    AlterPartition: CLUSTER_ACTION on the cluster, AUTH-3); anyone may without an authorizer."""
    return broker.authorizer is None or broker.authorizer.authorize(
        principal, client_host, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)


def authorize_request(broker, api_key: int, request, context) -> Verdict:
    if broker.authorizer is None or api_key not in CHECKS:
        return PASS
    return CHECKS[api_key](Asker(broker, context), request, context.api_version)


# -- per-partition requests: take the refused partitions out, answer them afterwards ---------

def _partitions(ask: Asker, topics: list, partitions_field: str, allowed: Callable[[str | None], bool],
                error: Callable[[str | None], int], name_field: str = "name"):
    """Remove the refused topics' partitions from the request; return [(topic, error, [partitions])]."""
    refused = []
    kept = []
    for topic in topics:
        name = ask.topic_name(topic, name_field)
        if allowed(name):
            kept.append(topic)
        else:
            refused.append((topic, error(name), list(topic.get(partitions_field) or [])))
    topics[:] = kept
    return refused


def _answer_partitions(refused, responses_field: str, name_field: str, partitions_field: str,
                       partition_answer: Callable[[object, int], dict], id_field: str | None = "topic_id"):
    def completion(response: dict) -> None:
        for topic, error, partitions in refused:
            entry = {name_field: topic.get(name_field), partitions_field: [partition_answer(p, error) for p in partitions]}
            if id_field and topic.get("topic_id") is not None:
                entry[id_field] = topic.get("topic_id")
            response.setdefault(responses_field, []).append(entry)
    return completion


def _produce(ask: Asker, request, version: int) -> Verdict:
    transactional_id = request.get("transactional_id")
    if transactional_id is not None and not ask.transactional_id(AclOperation.WRITE, transactional_id):
        error = lambda name: TXN_FAILED  # noqa: E731 - the whole produce is refused
        allowed = lambda name: False  # noqa: E731
    else:  # kspec.bug.acl.skip.produce: WRITE on the topic goes unasked
        error = lambda name: TOPIC_FAILED  # noqa: E731
        allowed = lambda name: (ask.broker.config.kspec_bug_acl_skip_produce  # noqa: E731
                                or ask.topic(AclOperation.WRITE, name))
    refused = _partitions(ask, request.topic_data, "partition_data", allowed, error)
    answer = lambda p, code: {"index": p.index, "error_code": code, "base_offset": -1,  # noqa: E731
                              "log_append_time_ms": -1, "log_start_offset": -1, "record_errors": [],
                              "error_message": None}
    return Verdict(completions=[_answer_partitions(refused, "responses", "name", "partition_responses", answer)])


def _fetch(ask: Asker, request, version: int) -> Verdict:
    replica_id = request.replica_state.replica_id if version >= 15 else request.get("replica_id", -1)
    if replica_id >= 0:  # a follower's fetch moves the high watermark: CLUSTER_ACTION (AUTH-3)
        # the switch re-creates CVE-2018-1288: a follower's fetch asked only what a consumer's asks
        follower = ask.cluster(AclOperation.CLUSTER_ACTION) or (
            ask.broker.config.kspec_bug_follower_fetch_without_cluster_action
            and all(ask.topic(AclOperation.READ, ask.topic_name(t, "topic")) for t in request.topics))
        allowed = lambda name: follower  # noqa: E731
    else:
        allowed = lambda name: ask.topic(AclOperation.READ, name)  # noqa: E731
    refused = _partitions(ask, request.topics, "partitions", allowed, lambda name: TOPIC_FAILED, "topic")
    answer = lambda p, code: {"partition_index": p.partition, "error_code": code, "high_watermark": -1,  # noqa: E731
                              "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                              "preferred_read_replica": -1, "records": None}
    return Verdict(completions=[_answer_partitions(refused, "responses", "topic", "partitions", answer)])


def _list_offsets(ask: Asker, request, version: int) -> Verdict:
    refused = _partitions(ask, request.topics, "partitions", lambda name: ask.topic(AclOperation.DESCRIBE, name),
                          lambda name: TOPIC_FAILED)
    answer = lambda p, code: {"partition_index": p.partition_index, "error_code": code,  # noqa: E731
                              "timestamp": -1, "offset": -1, "leader_epoch": -1}
    return Verdict(completions=[_answer_partitions(refused, "topics", "name", "partitions", answer, None)])


def _offset_for_leader_epoch(ask: Asker, request, version: int) -> Verdict:
    if request.get("replica_id", -1) >= 0 and not ask.cluster(AclOperation.CLUSTER_ACTION):
        allowed = lambda name: False  # noqa: E731
    else:
        allowed = lambda name: ask.topic(AclOperation.DESCRIBE, name)  # noqa: E731
    refused = _partitions(ask, request.topics, "partitions", allowed, lambda name: TOPIC_FAILED, "topic")
    answer = lambda p, code: {"partition": p.partition, "error_code": code, "leader_epoch": -1,  # noqa: E731
                              "end_offset": -1}
    return Verdict(completions=[_answer_partitions(refused, "topics", "topic", "partitions", answer, None)])


def _metadata(ask: Asker, request, version: int) -> Verdict:
    """Describe T for each topic; an unknown topic is auto-created only with CREATE on the cluster
    or the topic. A listing of all topics omits the ones the principal may not describe."""
    refused = []
    if request.topics:
        kept = []
        for wanted in request.topics:
            name = ask.topic_name(wanted)
            exists = name in ask.broker.image.topics_by_name
            may_describe = ask.topic(AclOperation.DESCRIBE, name)
            may_create = ask.cluster(AclOperation.CREATE) or ask.topic(AclOperation.CREATE, name)
            auto_create = request.get("allow_auto_topic_creation", True) and ask.broker.config.auto_create_topics_enable
            if may_describe and (exists or not auto_create or may_create):
                kept.append(wanted)
            else:
                refused.append(wanted)
        request.topics[:] = kept  # (an emptied v0 list asks for all topics: the completion filters them)

    def completion(response: dict) -> None:
        response["topics"] = [topic for topic in response["topics"]
                              if topic.get("name") is not None and ask.topic(AclOperation.DESCRIBE, topic["name"])]
        if request.get("include_topic_authorized_operations"):  # v8+
            for topic in response["topics"]:
                topic["topic_authorized_operations"] = ask.authorized_operations(ResourceType.TOPIC, topic["name"])
        if request.get("include_cluster_authorized_operations"):  # v8-10
            response["cluster_authorized_operations"] = ask.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
        response["topics"] += [{"error_code": TOPIC_FAILED, "name": wanted.name, "topic_id": wanted.get("topic_id"),
                                "is_internal": False, "partitions": [], "topic_authorized_operations": -(2**31)}
                               for wanted in refused]
    return Verdict(completions=[completion])


def _describe_cluster(ask: Asker, request, version: int) -> Verdict:
    """No check (Kafka's brokers answer anyone); the cluster's operations when asked for."""
    def completion(response: dict) -> None:
        if request.include_cluster_authorized_operations:
            response["cluster_authorized_operations"] = ask.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
    return Verdict(completions=[completion])


def _per_topic(operation: AclOperation, topics_fields: tuple[str, ...], responses_field: str, name_field: str = "name"):
    """CreateTopics, DeleteTopics, CreatePartitions: each topic needs the operation on it (CREATE
    and DELETE also on the cluster); refused topics are answered TOPIC_AUTHORIZATION_FAILED."""
    def check(ask: Asker, request, version: int) -> Verdict:
        topics = next((request.get(f) for f in topics_fields if request.get(f)), None)  # by version
        if topics is None:
            return PASS
        names = topics if topics and isinstance(topics[0], str) else None
        cluster_wide = operation in (AclOperation.CREATE, AclOperation.DELETE) and ask.cluster(operation)
        refused = []
        kept = []
        for topic in topics:
            name = topic if names is not None else ask.topic_name(topic, name_field)
            (kept if cluster_wide or ask.topic(operation, name) else refused).append((topic, name))
        topics[:] = [topic for topic, _ in kept]

        def completion(response: dict) -> None:
            for topic, name in refused:
                entry = {"name": name, "error_code": TOPIC_FAILED, "error_message": "Authorization failed."}
                if names is None and topic.get("topic_id") is not None:
                    entry["topic_id"] = topic.get("topic_id")
                response.setdefault(responses_field, []).append(entry)
        return Verdict(completions=[completion])
    return check


def _delete_records(ask: Asker, request, version: int) -> Verdict:
    refused = _partitions(ask, request.topics, "partitions", lambda name: ask.topic(AclOperation.DELETE, name),
                          lambda name: TOPIC_FAILED)
    answer = lambda p, code: {"partition_index": p.partition_index, "low_watermark": -1,  # noqa: E731
                              "error_code": code}
    return Verdict(completions=[_answer_partitions(refused, "topics", "name", "partitions", answer, None)])


def _init_producer_id(ask: Asker, request, version: int) -> Verdict:
    transactional_id = request.get("transactional_id")
    if transactional_id is not None:
        if not ask.transactional_id(AclOperation.WRITE, transactional_id):
            return Verdict({"error_code": TXN_FAILED, "producer_id": -1, "producer_epoch": -1})
    elif not (ask.cluster(AclOperation.IDEMPOTENT_WRITE)
              or ask.authorizer.allows_any(ask.context.principal, ask.context.client_host, AclOperation.WRITE,
                                           ResourceType.TOPIC)):
        return Verdict({"error_code": CLUSTER_FAILED, "producer_id": -1, "producer_epoch": -1})
    return PASS


def _group_whole(operation: AclOperation, **refusal):
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetDelete, ConsumerGroupHeartbeat: the group or nothing."""
    def check(ask: Asker, request, version: int) -> Verdict:
        if ask.group(operation, request.group_id):
            return PASS
        return Verdict({"error_code": GROUP_FAILED, **refusal})
    return check


def _find_coordinator(ask: Asker, request, version: int) -> Verdict:
    def allowed(key: str) -> bool:
        if request.get("key_type", 0) == KEY_TYPE_TRANSACTION:
            return ask.transactional_id(AclOperation.DESCRIBE, key)
        return ask.group(AclOperation.DESCRIBE, key)
    error = TXN_FAILED if request.get("key_type", 0) == KEY_TYPE_TRANSACTION else GROUP_FAILED
    if version < 4:
        return PASS if allowed(request.key) else Verdict({"error_code": error, "node_id": -1, "host": "", "port": -1})
    refused = [key for key in request.coordinator_keys if not allowed(key)]
    request.coordinator_keys[:] = [key for key in request.coordinator_keys if allowed(key)]

    def completion(response: dict) -> None:
        response.setdefault("coordinators", []).extend(
            {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": error, "error_message": None}
            for key in refused)
    return Verdict(completions=[completion])


def _offset_commit(ask: Asker, request, version: int) -> Verdict:
    group_allowed = ask.group(AclOperation.READ, request.group_id)
    refused = _partitions(ask, request.topics, "partitions",
                          lambda name: group_allowed and ask.topic(AclOperation.READ, name),
                          lambda name: TOPIC_FAILED if group_allowed else GROUP_FAILED)
    answer = lambda p, code: {"partition_index": p.partition_index, "error_code": code}  # noqa: E731
    return Verdict(completions=[_answer_partitions(refused, "topics", "name", "partitions", answer, None)])


def _offset_fetch(ask: Asker, request, version: int) -> Verdict:
    if version < 8:
        if ask.group(AclOperation.DESCRIBE, request.group_id):
            return PASS
        return Verdict({"error_code": GROUP_FAILED, "topics": []})
    refused = [group for group in request.groups if not ask.group(AclOperation.DESCRIBE, group.group_id)]
    request.groups[:] = [group for group in request.groups if ask.group(AclOperation.DESCRIBE, group.group_id)]

    def completion(response: dict) -> None:
        response.setdefault("groups", []).extend(
            {"group_id": group.group_id, "topics": [], "error_code": GROUP_FAILED} for group in refused)
    return Verdict(completions=[completion])


def _per_group(operation: AclOperation, groups_field: str, responses_field: str, answer: Callable[[str], dict]):
    """DescribeGroups, DeleteGroups, ConsumerGroupDescribe: each group needs the operation; the
    described groups carry their authorized operations when asked for."""
    def check(ask: Asker, request, version: int) -> Verdict:
        groups = request.get(groups_field)
        refused = [group for group in groups if not ask.group(operation, group)]
        groups[:] = [group for group in groups if ask.group(operation, group)]

        def completion(response: dict) -> None:
            if request.get("include_authorized_operations"):
                for described in response.get(responses_field, []):
                    if described.get("error_code") == ErrorCode.NONE:
                        described["authorized_operations"] = ask.authorized_operations(ResourceType.GROUP,
                                                                                       described["group_id"])
            response.setdefault(responses_field, []).extend(answer(group) for group in refused)
        return Verdict(completions=[completion])
    return check


def _list_groups(ask: Asker, request, version: int) -> Verdict:
    if ask.cluster(AclOperation.DESCRIBE):
        return PASS

    def completion(response: dict) -> None:
        response["groups"] = [group for group in response.get("groups", [])
                              if ask.group(AclOperation.DESCRIBE, group["group_id"])]
    return Verdict(completions=[completion])


def _transactional(group_operation: AclOperation | None = None, **refusal):
    """AddOffsetsToTxn, EndTxn: WRITE on the transactional id, then (AddOffsetsToTxn) READ on the group."""
    def check(ask: Asker, request, version: int) -> Verdict:
        if not ask.transactional_id(AclOperation.WRITE, request.transactional_id):
            return Verdict({"error_code": TXN_FAILED, **refusal})
        if group_operation is not None and not ask.group(group_operation, request.group_id):
            return Verdict({"error_code": GROUP_FAILED, **refusal})
        return PASS
    return check


def _add_partitions_to_txn(ask: Asker, request, version: int) -> Verdict:
    if version >= 4:  # the batched, broker-to-broker form (KIP-890)
        return PASS if ask.cluster(AclOperation.CLUSTER_ACTION) else Verdict({"error_code": CLUSTER_FAILED})
    x_allowed = ask.transactional_id(AclOperation.WRITE, request.v3_and_below_transactional_id)
    topics = request.v3_and_below_topics
    refused = [topic for topic in topics if not (x_allowed and ask.topic(AclOperation.WRITE, topic.name))]
    if not refused:
        return PASS
    # Kafka answers every partition: the refused ones with their error, the others OPERATION_NOT_ATTEMPTED.
    results = [{"name": topic.name, "results_by_partition": [
        {"partition_index": index, "partition_error_code":
            (TXN_FAILED if not x_allowed else TOPIC_FAILED) if topic in refused else ErrorCode.OPERATION_NOT_ATTEMPTED}
        for index in topic.partitions]} for topic in topics]
    return Verdict({"results_by_topic_v3_and_below": results})


def _txn_offset_commit(ask: Asker, request, version: int) -> Verdict:
    if not ask.transactional_id(AclOperation.WRITE, request.transactional_id):
        error = TXN_FAILED
    elif not ask.group(AclOperation.READ, request.group_id):
        error = GROUP_FAILED
    else:
        error = None
    refused = _partitions(ask, request.topics, "partitions",
                          lambda name: error is None and ask.topic(AclOperation.READ, name),
                          lambda name: error or TOPIC_FAILED)
    answer = lambda p, code: {"partition_index": p.partition_index, "error_code": code}  # noqa: E731
    return Verdict(completions=[_answer_partitions(refused, "topics", "name", "partitions", answer, None)])


def _write_txn_markers(ask: Asker, request, version: int) -> Verdict:
    """Markers end another producer's transaction: brokers only (ALTER or CLUSTER_ACTION on the cluster, AUTH-3)."""
    if ask.cluster(AclOperation.CLUSTER_ACTION, AclOperation.ALTER):
        return PASS
    return Verdict({"markers": [{"producer_id": marker.producer_id, "topics": [
        {"name": topic.name, "partitions": [{"partition_index": index, "error_code": CLUSTER_FAILED}
                                            for index in topic.partition_indexes]}
        for topic in marker.topics]} for marker in request.markers]})


def _per_transaction(ask: Asker, request, version: int) -> Verdict:
    ids = request.transactional_ids
    refused = [x for x in ids if not ask.transactional_id(AclOperation.DESCRIBE, x)]
    ids[:] = [x for x in ids if ask.transactional_id(AclOperation.DESCRIBE, x)]

    def completion(response: dict) -> None:
        response.setdefault("transaction_states", []).extend(
            {"transactional_id": x, "error_code": TXN_FAILED, "transaction_state": "", "transaction_timeout_ms": 0,
             "transaction_start_time_ms": -1, "producer_id": -1, "producer_epoch": -1, "topics": []} for x in refused)
    return Verdict(completions=[completion])


def _list_transactions(ask: Asker, request, version: int) -> Verdict:
    def completion(response: dict) -> None:
        response["transaction_states"] = [state for state in response.get("transaction_states", [])
                                          if ask.transactional_id(AclOperation.DESCRIBE, state["transactional_id"])]
    return Verdict(completions=[completion])


def _configs(operation: AclOperation, responses_field: str):
    """DescribeConfigs, AlterConfigs, IncrementalAlterConfigs: per resource, on the topic, the
    group, or the cluster (broker and logger resources)."""
    def allowed(ask: Asker, resource) -> bool:
        kind = resource.resource_type
        if kind == TOPIC_CONFIG_RESOURCE:
            return ask.topic(operation, resource.resource_name)
        if kind == GROUP_CONFIG_RESOURCE:
            return ask.group(operation, resource.resource_name)
        return ask.cluster(operation)

    def error(resource) -> int:
        return {TOPIC_CONFIG_RESOURCE: TOPIC_FAILED, GROUP_CONFIG_RESOURCE: GROUP_FAILED}.get(
            resource.resource_type, CLUSTER_FAILED)

    def check(ask: Asker, request, version: int) -> Verdict:
        refused = [resource for resource in request.resources if not allowed(ask, resource)]
        request.resources[:] = [resource for resource in request.resources if allowed(ask, resource)]

        def completion(response: dict) -> None:
            response.setdefault(responses_field, []).extend(
                {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                 "error_code": error(resource), "error_message": "Authorization failed.", "configs": []}
                for resource in refused)
        return Verdict(completions=[completion])
    return check


def _cluster_whole(*operations: AclOperation, **refusal):
    def check(ask: Asker, request, version: int) -> Verdict:
        return PASS if ask.cluster(*operations) else Verdict({"error_code": CLUSTER_FAILED, **refusal})
    return check


CHECKS: dict[int, Callable[[Asker, object, int], Verdict]] = {
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.METADATA: _metadata,
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.JOIN_GROUP: _group_whole(AclOperation.READ, generation_id=-1, member_id="", members=[]),
    ApiKey.HEARTBEAT: _group_whole(AclOperation.READ),
    ApiKey.LEAVE_GROUP: _group_whole(AclOperation.READ, members=[]),
    ApiKey.SYNC_GROUP: _group_whole(AclOperation.READ, assignment=b""),
    ApiKey.DESCRIBE_GROUPS: _per_group(AclOperation.DESCRIBE, "groups", "groups", lambda group: {
        "group_id": group, "error_code": GROUP_FAILED, "group_state": "", "protocol_type": "", "protocol_data": "",
        "members": []}),
    ApiKey.LIST_GROUPS: _list_groups,
    ApiKey.CREATE_TOPICS: _per_topic(AclOperation.CREATE, ("topics",), "topics"),
    ApiKey.DELETE_TOPICS: _per_topic(AclOperation.DELETE, ("topic_names", "topics"), "responses"),
    ApiKey.DELETE_RECORDS: _delete_records,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: _transactional(AclOperation.READ),
    ApiKey.END_TXN: _transactional(),
    ApiKey.WRITE_TXN_MARKERS: _write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
    ApiKey.DESCRIBE_CONFIGS: _configs(AclOperation.DESCRIBE_CONFIGS, "results"),
    ApiKey.ALTER_CONFIGS: _configs(AclOperation.ALTER_CONFIGS, "responses"),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _configs(AclOperation.ALTER_CONFIGS, "responses"),
    ApiKey.CREATE_PARTITIONS: _per_topic(AclOperation.ALTER, ("topics",), "results"),
    ApiKey.DELETE_GROUPS: _per_group(AclOperation.DELETE, "groups_names", "results",
                                     lambda group: {"group_id": group, "error_code": GROUP_FAILED}),
    ApiKey.ELECT_LEADERS: _cluster_whole(AclOperation.ALTER, replica_election_results=[]),
    ApiKey.OFFSET_DELETE: _group_whole(AclOperation.DELETE, topics=[]),
    ApiKey.DESCRIBE_QUORUM: _cluster_whole(AclOperation.DESCRIBE, topics=[], nodes=[]),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _group_whole(AclOperation.READ),
    ApiKey.CONSUMER_GROUP_DESCRIBE: _per_group(AclOperation.DESCRIBE, "group_ids", "groups", lambda group: {
        "group_id": group, "error_code": GROUP_FAILED, "error_message": None, "group_state": "", "group_epoch": -1,
        "assignment_epoch": -1, "assignor_name": "", "members": [], "authorized_operations": -(2**31)}),
    ApiKey.DESCRIBE_TRANSACTIONS: _per_transaction,
    ApiKey.DESCRIBE_CLUSTER: _describe_cluster,
    ApiKey.LIST_TRANSACTIONS: _list_transactions,
    # DescribeAcls, CreateAcls, DeleteAcls and the SCRAM credential APIs check the cluster in
    # their handlers (reference/handlers/acls.py, scram_credentials.py): they answer SECURITY_DISABLED
    # without an authorizer. ApiVersions, SaslHandshake and SaslAuthenticate need nothing.
}
