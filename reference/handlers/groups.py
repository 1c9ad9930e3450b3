"""Group APIs: FindCoordinator, the classic group protocol, KIP-848, offsets, group admin.

Every handler turns a request into calls on the sans-IO GroupCoordinator and its Effects
into I/O: records are appended to `__consumer_offsets` (a compacted internal topic, one
partition per group-id hash) before any reply is sent, so an acknowledged commit is in
the log. JoinGroup and SyncGroup are coroutines: each waits on an asyncio future that the
coordinator completes when the rebalance phase ends, during another member's request or a
timer tick (`tick_groups`). On start the coordinator replays the offsets topic (GRP-2).

This node is the only broker, so it coordinates every group and every transactional id.
"""
from __future__ import annotations

import asyncio
import random
import weakref

from reference.coordinator.assignors import TopicMetadata
from reference.coordinator.classic import ClassicGroupConfig
from reference.coordinator.consumer import ConsumerGroupConfig
from reference.coordinator.coordinator import GroupCoordinator, GroupCoordinatorConfig, OffsetCommit
from reference.coordinator.effects import Effects
from reference.coordinator.records import CONSUMER_OFFSETS_TOPIC, encode_key
from reference.handlers.context import RequestContext
from reference.node.broker import Broker, TopicPartition
from reference.protocol.errors import ErrorCode
from reference.protocol.records import Record, build_batch, iter_batches
from reference.transaction.partition import committed_records

COORDINATOR_KEY_TYPES = {0: "group", 1: "transaction"}  # FindCoordinator KeyType
BATCHED_COORDINATOR_KEYS_VERSION = 4  # FindCoordinator v4+ (KIP-699)
MULTI_GROUP_OFFSET_FETCH_VERSION = 8  # OffsetFetch v8+ (KIP-709)
BATCHED_LEAVE_VERSION = 3  # LeaveGroup v3+ (KIP-345)
REQUIRE_KNOWN_MEMBER_ID_VERSION = 4  # JoinGroup v4+ (KIP-394)
NO_OFFSET = -1
READ_BYTES_MAX = 1 << 20
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


class GroupNode:
    """The coordinator of one broker, with the offsets topic it writes to and replays."""

    def __init__(self, broker: Broker, now_ms: int) -> None:
        config = broker.config
        self.broker = broker
        self.coordinator = GroupCoordinator(GroupCoordinatorConfig(
            offsets_topic_num_partitions=config.offsets_topic_num_partitions,
            offsets_retention_ms=config.offsets_retention_minutes * 60_000,
            offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            classic=ClassicGroupConfig(
                min_session_timeout_ms=config.group_min_session_timeout_ms,
                max_session_timeout_ms=config.group_max_session_timeout_ms,
                initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                max_size=config.group_max_size),
            consumer=ConsumerGroupConfig(
                session_timeout_ms=config.group_consumer_session_timeout_ms,
                heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms),
        ), random.Random(), now_ms)
        if CONSUMER_OFFSETS_TOPIC not in broker.image.topics_by_name:
            broker.create_topic(CONSUMER_OFFSETS_TOPIC, config.offsets_topic_num_partitions, 1,
                                {"cleanup.policy": "compact", "segment.bytes": str(config.offsets_topic_segment_bytes)},
                                validate_only=False, now_ms=now_ms)
        topic = broker.topic(CONSUMER_OFFSETS_TOPIC)
        assert topic.partition_count == config.offsets_topic_num_partitions, (
            f"{CONSUMER_OFFSETS_TOPIC} has {topic.partition_count} partitions; "
            f"offsets.topic.num.partitions={config.offsets_topic_num_partitions} cannot change")
        for partition in range(topic.partition_count):
            self._replay(broker.partition(TopicPartition(CONSUMER_OFFSETS_TOPIC, partition)).log, now_ms)

    def _replay(self, log, now_ms: int) -> None:
        """Replay in log order; offsets of aborted or open transactions (TxnOffsetCommit) are skipped."""
        offset = log.log_start_offset
        batches = []
        while offset < log.log_end_offset:
            read = log.read(offset, READ_BYTES_MAX)
            if not read.records:
                break
            for batch in iter_batches(read.records):
                if batch.last_offset >= offset:
                    batches.append(batch)
                offset = batch.last_offset + 1
        for record in committed_records(batches):
            if record.offset >= log.log_start_offset:
                self.coordinator.replay(record.key, record.value, now_ms)

    def topics(self) -> list[TopicMetadata]:
        return [TopicMetadata(topic.topic_id, topic.name, topic.partition_count)
                for topic in self.broker.image.topics_by_name.values()]

    def apply(self, effects: Effects, now_ms: int) -> None:
        """Append the records (one batch per offsets partition), then send the replies."""
        by_partition: dict[int, list[Record]] = {}
        for record in effects.records:
            by_partition.setdefault(record.partition, []).append(
                Record(timestamp=now_ms, key=encode_key(record.key), value=record.value))
        for partition, records in sorted(by_partition.items()):
            self.broker.append(TopicPartition(CONSUMER_OFFSETS_TOPIC, partition), build_batch(records), now_ms)
        for future, response in effects.replies:
            if not future.done():
                future.set_result(response)


_nodes: weakref.WeakKeyDictionary[Broker, GroupNode] = weakref.WeakKeyDictionary()


def group_node(broker: Broker, now_ms: int) -> GroupNode:
    if broker not in _nodes:
        _nodes[broker] = GroupNode(broker, now_ms)
    return _nodes[broker]


def tick_groups(broker: Broker, now_ms: int) -> None:
    """The coordinator's timers: session, rebalance and join-delay deadlines, offsets retention."""
    node = group_node(broker, now_ms)
    node.apply(node.coordinator.tick(now_ms, node.topics()), now_ms)


# ---------------------------------------------------------------------------------------------
# FindCoordinator


def handle_find_coordinator(broker: Broker, request, context: RequestContext) -> dict:
    group_node(broker, context.now_ms)
    host, port = broker.config.advertised
    node_id = broker.config.node_id
    known_type = request.key_type in COORDINATOR_KEY_TYPES
    error = ErrorCode.NONE if known_type else ErrorCode.INVALID_REQUEST
    found = {"node_id": node_id if known_type else -1, "host": host if known_type else "",
             "port": port if known_type else -1, "error_code": error,
             "error_message": None if known_type else f"key type {request.key_type}"}
    if context.api_version >= BATCHED_COORDINATOR_KEYS_VERSION:
        return {"coordinators": [{"key": key, **found} for key in request.coordinator_keys]}
    return found


# ---------------------------------------------------------------------------------------------
# Classic protocol


async def handle_join_group(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    future = asyncio.get_running_loop().create_future()
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


async def handle_sync_group(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    future = asyncio.get_running_loop().create_future()
    effects = node.coordinator.sync_group(
        future, group_id=request.group_id, member_id=request.member_id,
        group_instance_id=request.get("group_instance_id"), generation_id=request.generation_id,
        protocol_type=request.get("protocol_type"), protocol_name=request.get("protocol_name"),
        assignments={each.member_id: bytes(each.assignment) for each in request.assignments},
        now_ms=context.now_ms)
    node.apply(effects, context.now_ms)
    response = await future
    return {"throttle_time_ms": 0, **response}


def handle_heartbeat(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    error = node.coordinator.heartbeat(group_id=request.group_id, member_id=request.member_id,
                                       group_instance_id=request.get("group_instance_id"),
                                       generation_id=request.generation_id, now_ms=context.now_ms)
    return {"throttle_time_ms": 0, "error_code": error}


def handle_leave_group(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    if context.api_version >= BATCHED_LEAVE_VERSION:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id, None)]
    error, errors, effects = node.coordinator.leave_group(group_id=request.group_id, members=members,
                                                          now_ms=context.now_ms)
    node.apply(effects, context.now_ms)
    if context.api_version < BATCHED_LEAVE_VERSION and error == ErrorCode.NONE:
        error = errors[0]
    return {"throttle_time_ms": 0, "error_code": error, "members": [
        {"member_id": member_id, "group_instance_id": instance_id, "error_code": member_error}
        for (member_id, instance_id), member_error in zip(members, errors)]}


# ---------------------------------------------------------------------------------------------
# KIP-848


def handle_consumer_group_heartbeat(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
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
    node.apply(effects, context.now_ms)
    return {"throttle_time_ms": 0, **response}


def handle_consumer_group_describe(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    topics = node.topics()
    return {"throttle_time_ms": 0, "groups": [
        {**node.coordinator.describe_consumer_group(group_id, topics),
         "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}
        for group_id in request.group_ids]}


# ---------------------------------------------------------------------------------------------
# Offsets


def handle_offset_commit(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    commits, unknown = [], []
    for topic in request.topics:
        for partition in topic.partitions:
            commit = OffsetCommit(topic.name, partition.partition_index, partition.committed_offset,
                                  partition.get("committed_leader_epoch", -1), partition.committed_metadata)
            known = TopicPartition(topic.name, partition.partition_index) in broker.partitions
            (commits if known else unknown).append(commit)
    generation_id = request.get("generation_id_or_member_epoch", -1)
    errors, effects = node.coordinator.commit_offsets(
        group_id=request.group_id, member_id=request.get("member_id", ""),
        group_instance_id=request.get("group_instance_id"), generation_id=generation_id, offsets=commits,
        now_ms=context.now_ms)
    node.apply(effects, context.now_ms)
    results = {(c.topic, c.partition): error for c, error in zip(commits, errors)}
    results |= {(c.topic, c.partition): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for c in unknown}
    return {"throttle_time_ms": 0, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": results[topic.name, p.partition_index]}
            for p in topic.partitions]}
        for topic in request.topics]}


def handle_offset_fetch(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    if context.api_version >= MULTI_GROUP_OFFSET_FETCH_VERSION:
        return {"throttle_time_ms": 0, "groups": [
            {"group_id": group.group_id, **_fetch_group(node, group.group_id, group.topics,
                                                        group.get("member_id"), group.get("member_epoch", -1))}
            for group in request.groups]}
    return {"throttle_time_ms": 0, **_fetch_group(node, request.group_id, request.topics, None, -1)}


def _fetch_group(node: GroupNode, group_id: str, topics, member_id: str | None, member_epoch: int) -> dict:
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


def handle_offset_delete(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    error, errors, effects = node.coordinator.delete_offsets(group_id=request.group_id, partitions=partitions,
                                                             now_ms=context.now_ms)
    node.apply(effects, context.now_ms)
    results = dict(zip(partitions, errors))
    return {"throttle_time_ms": 0, "error_code": error, "topics": [] if error else [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": results[t.name, p.partition_index]} for p in t.partitions]}
        for t in request.topics]}


# ---------------------------------------------------------------------------------------------
# Group administration


def handle_describe_groups(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    groups = []
    for group_id in request.groups:
        described = node.coordinator.describe_group(group_id)
        if context.api_version < 6 and described["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND:
            described["error_code"] = ErrorCode.NONE  # before v6 a missing group is described as Dead
        groups.append({**described, "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
    return {"throttle_time_ms": 0, "groups": groups}


def handle_list_groups(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "groups": node.coordinator.list_groups(request.get("states_filter") or (),
                                                   request.get("types_filter") or ())}


def handle_delete_groups(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    errors, effects = node.coordinator.delete_groups(list(request.groups_names), context.now_ms)
    node.apply(effects, context.now_ms)
    return {"throttle_time_ms": 0, "results": [
        {"group_id": group_id, "error_code": error} for group_id, error in zip(request.groups_names, errors)]}

