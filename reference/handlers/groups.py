"""Group APIs: the classic group protocol, KIP-848, offsets, group admin.

Every handler turns a request into calls on the sans-IO GroupCoordinator and its Effects
into I/O: records are appended to `__consumer_offsets` (a compacted internal topic, one
partition per group-id hash) before any reply is sent, so an acknowledged commit is in
the log. JoinGroup and SyncGroup wait on an asyncio future that the
coordinator completes when the rebalance phase ends, during another member's request or a
timer tick; the handlers that write wait until the records are replicated. A node
coordinates the groups whose `__consumer_offsets` partition it leads
(reference/runtime/groups.py: GroupCoordinatorRuntime, built by the shell).
"""
from __future__ import annotations

from reference.coordinator.coordinator import OffsetCommit
from reference.handlers.context import RequestContext
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode
from reference.runtime.groups import GroupCoordinatorRuntime
from reference.runtime.leadership import partition_exists
from reference.security.acls import ResourceType, all_supported_operations

MULTI_GROUP_OFFSET_FETCH_VERSION = 8  # OffsetFetch v8+ (KIP-709)
BATCHED_LEAVE_VERSION = 3  # LeaveGroup v3+ (KIP-345)
REQUIRE_KNOWN_MEMBER_ID_VERSION = 4  # JoinGroup v4+ (KIP-394)
NO_OFFSET = -1


def _groups(context: RequestContext) -> GroupCoordinatorRuntime:
    """This node's group coordinator, following the offsets topic's leadership as of now."""
    groups = context.services.groups
    groups.start(context.now_ms)
    return groups


# ---------------------------------------------------------------------------------------------
# Classic protocol


async def handle_join_group(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _groups(context)
    if error := node.error_for(request.group_id):
        return {"throttle_time_ms": 0, "error_code": error, "leader": "", "member_id": request.member_id,
                "protocol_name": None if context.api_version >= 7 else ""}
    future = node.reply_future(request.group_id)
    effects = node.coordinator.join_group(
        future, group_id=request.group_id, member_id=request.member_id,
        group_instance_id=request.get("group_instance_id"), client_id=context.client_id or "",
        client_host="", session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.get("rebalance_timeout_ms", request.session_timeout_ms),
        protocol_type=request.protocol_type,
        protocols=[(protocol.name, bytes(protocol.metadata)) for protocol in request.protocols],
        require_known_member_id=context.api_version >= REQUIRE_KNOWN_MEMBER_ID_VERSION, now_ms=context.now_ms)
    node.apply(effects, context.now_ms)
    response = await future
    return {"throttle_time_ms": 0, **response, "leader": response.get("leader") or "",
            "protocol_name": response.get("protocol_name") if context.api_version >= 7 else
            (response.get("protocol_name") or "")}


async def handle_sync_group(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _groups(context)
    if error := node.error_for(request.group_id):
        return {"throttle_time_ms": 0, "error_code": error}
    future = node.reply_future(request.group_id)
    effects = node.coordinator.sync_group(
        future, group_id=request.group_id, member_id=request.member_id,
        group_instance_id=request.get("group_instance_id"), generation_id=request.generation_id,
        protocol_type=request.get("protocol_type"), protocol_name=request.get("protocol_name"),
        assignments={each.member_id: bytes(each.assignment) for each in request.assignments},
        now_ms=context.now_ms)
    node.apply(effects, context.now_ms)
    response = await future
    return {"throttle_time_ms": 0, **response}


def handle_heartbeat(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _groups(context)
    if error := node.error_for(request.group_id):
        return {"throttle_time_ms": 0, "error_code": error}
    error = node.coordinator.heartbeat(group_id=request.group_id, member_id=request.member_id,
                                       group_instance_id=request.get("group_instance_id"),
                                       generation_id=request.generation_id, now_ms=context.now_ms)
    return {"throttle_time_ms": 0, "error_code": error}


async def handle_leave_group(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _groups(context)
    if context.api_version >= BATCHED_LEAVE_VERSION:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id, None)]
    if error := node.error_for(request.group_id):
        return {"throttle_time_ms": 0, "error_code": error, "members": []}
    error, errors, effects = node.coordinator.leave_group(group_id=request.group_id, members=members,
                                                          now_ms=context.now_ms)
    replicated = await node.apply(effects, context.now_ms)
    if context.api_version < BATCHED_LEAVE_VERSION and error == ErrorCode.NONE:
        error = errors[0]
    return {"throttle_time_ms": 0, "error_code": replicated or error, "members": [
        {"member_id": member_id, "group_instance_id": instance_id, "error_code": member_error}
        for (member_id, instance_id), member_error in zip(members, errors)]}


# ---------------------------------------------------------------------------------------------
# KIP-848


async def handle_consumer_group_heartbeat(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _groups(context)
    if error := node.error_for(request.group_id):
        return {"throttle_time_ms": 0, "error_code": error, "member_epoch": -1, "heartbeat_interval_ms": 0}
    owned = None
    if request.topic_partitions is not None:
        owned = frozenset((tp.topic_id, p) for tp in request.topic_partitions for p in tp.partitions)
    response, effects = node.coordinator.consumer_group_heartbeat(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id, rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=request.get("subscribed_topic_regex"), server_assignor=request.server_assignor,
        owned=owned, client_id=context.client_id or "", client_host="", topics=node.topics(),
        now_ms=context.now_ms)
    if error := await node.apply(effects, context.now_ms):
        response = {**response, "error_code": error}
    return {"throttle_time_ms": 0, **response}


def handle_consumer_group_describe(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _groups(context)
    topics = node.topics()
    operations = all_supported_operations(ResourceType.GROUP, request.include_authorized_operations)
    return {"throttle_time_ms": 0, "groups": [
        {**node.coordinator.describe_consumer_group(group_id, topics),
         "authorized_operations": operations} if not (error := node.error_for(group_id))
        else {"group_id": group_id, "error_code": error,
              "authorized_operations": all_supported_operations(ResourceType.GROUP, False)}
        for group_id in request.group_ids]}


# ---------------------------------------------------------------------------------------------
# Offsets


async def handle_offset_commit(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _groups(context)
    if error := node.error_for(request.group_id):
        return {"throttle_time_ms": 0, "topics": [
            {"name": topic.name, "partitions": [{"partition_index": p.partition_index, "error_code": error}
                                                for p in topic.partitions]} for topic in request.topics]}
    commits, unknown = [], []
    for topic in request.topics:
        for partition in topic.partitions:
            commit = OffsetCommit(topic.name, partition.partition_index, partition.committed_offset,
                                  partition.get("committed_leader_epoch", -1), partition.committed_metadata)
            known = partition_exists(broker, topic.name, partition.partition_index)
            (commits if known else unknown).append(commit)
    generation_id = request.get("generation_id_or_member_epoch", -1)
    errors, effects = node.coordinator.commit_offsets(
        group_id=request.group_id, member_id=request.get("member_id", ""),
        group_instance_id=request.get("group_instance_id"), generation_id=generation_id, offsets=commits,
        now_ms=context.now_ms)
    replicated = await node.apply(effects, context.now_ms)
    results = {(c.topic, c.partition): error or replicated for c, error in zip(commits, errors)}
    results |= {(c.topic, c.partition): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for c in unknown}
    response = {"throttle_time_ms": 0, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": results[topic.name, p.partition_index]}
            for p in topic.partitions]}
        for topic in request.topics]}
    return response


def handle_offset_fetch(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _groups(context)
    if context.api_version >= MULTI_GROUP_OFFSET_FETCH_VERSION:
        return {"throttle_time_ms": 0, "groups": [
            {"group_id": group.group_id, **_fetch_group(node, group.group_id, group.topics,
                                                        group.get("member_id"), group.get("member_epoch", -1))}
            for group in request.groups]}
    return {"throttle_time_ms": 0, **_fetch_group(node, request.group_id, request.topics, None, -1)}


def _fetch_group(node: GroupCoordinatorRuntime, group_id: str, topics, member_id: str | None, member_epoch: int) -> dict:
    if error := node.error_for(group_id):
        return {"error_code": error, "topics": []}
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    error, offsets = node.coordinator.fetch_offsets(group_id, wanted, member_id=member_id, member_epoch=member_epoch)
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), value in offsets.items():
        by_topic.setdefault(topic, []).append({
            "partition_index": partition, "error_code": ErrorCode.NONE,
            "committed_offset": value.offset if value else NO_OFFSET,
            "committed_leader_epoch": value.leader_epoch if value else -1,
            "metadata": value.metadata if value else "",
        })
    return {"error_code": error, "topics": [{"name": name, "partitions": partitions}
                                            for name, partitions in by_topic.items()]}


async def handle_offset_delete(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _groups(context)
    if error := node.error_for(request.group_id):
        return {"throttle_time_ms": 0, "error_code": error, "topics": []}
    partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    error, errors, effects = node.coordinator.delete_offsets(group_id=request.group_id, partitions=partitions,
                                                             now_ms=context.now_ms)
    replicated = await node.apply(effects, context.now_ms)
    results = dict(zip(partitions, errors))
    return {"throttle_time_ms": 0, "error_code": replicated or error, "topics": [] if error else [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": results[t.name, p.partition_index]} for p in t.partitions]}
        for t in request.topics]}


# ---------------------------------------------------------------------------------------------
# Group administration


def handle_describe_groups(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _groups(context)
    operations = all_supported_operations(ResourceType.GROUP,
                                          request.get("include_authorized_operations", False))  # v3+
    groups = []
    for group_id in request.groups:
        if error := node.error_for(group_id):
            groups.append({"group_id": group_id, "error_code": error,
                           "authorized_operations": all_supported_operations(ResourceType.GROUP, False)})
            continue
        described = node.coordinator.describe_group(group_id)
        if context.api_version < 6 and described["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND:
            described["error_code"] = ErrorCode.NONE  # before v6 a missing group is described as Dead
        groups.append({**described, "authorized_operations": operations})
    return {"throttle_time_ms": 0, "groups": groups}


def handle_list_groups(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _groups(context)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "groups": node.coordinator.list_groups(request.get("states_filter") or (),
                                                   request.get("types_filter") or ())}


async def handle_delete_groups(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _groups(context)
    here = [group_id for group_id in request.groups_names if not node.error_for(group_id)]
    errors, effects = node.coordinator.delete_groups(here, context.now_ms)
    replicated = await node.apply(effects, context.now_ms)
    results = {group_id: error or replicated for group_id, error in zip(here, errors)}
    return {"throttle_time_ms": 0, "results": [
        {"group_id": group_id, "error_code": results.get(group_id) or node.error_for(group_id)}
        for group_id in request.groups_names]}

