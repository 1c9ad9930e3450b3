"""Group APIs: the classic group protocol, KIP-848, offsets, group admin.

Every handler turns a request into calls on the sans-IO GroupCoordinator and its Effects
into I/O: records are appended to `__consumer_offsets` (a compacted internal topic, one
partition per group-id hash) before any reply is sent, so an acknowledged commit is in
the log. JoinGroup and SyncGroup are coroutines: each waits on an asyncio future that the
coordinator completes when the rebalance phase ends, during another member's request or a
timer tick (`tick_groups`). On start the coordinator replays the offsets topic (GRP-2).

A node coordinates the groups whose `__consumer_offsets` partition it leads (GroupNode).
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
from reference.handlers.authorized_operations import authorized_operations
from reference.handlers.context import RequestContext
from reference.node.broker import Broker, TopicPartition
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import Record, build_batch, iter_batches
from reference.transaction.partition import committed_records

MULTI_GROUP_OFFSET_FETCH_VERSION = 8  # OffsetFetch v8+ (KIP-709)
BATCHED_LEAVE_VERSION = 3  # LeaveGroup v3+ (KIP-345)
REQUIRE_KNOWN_MEMBER_ID_VERSION = 4  # JoinGroup v4+ (KIP-394)
NO_OFFSET = -1
READ_BYTES_MAX = 1 << 20
OFFSETS_COMMIT_TIMEOUT_MS = 5000  # offsets.commit.timeout.ms: how long a coordinator write waits for the ISR
ACKS_ALL = -1


class GroupNode:
    """The group coordinator of one broker, over the `__consumer_offsets` partitions it leads.

    A partition's groups and offsets are loaded (replayed) once this node leads it and its log
    is committed to the end, and dropped when it stops leading (Kafka's onElection and
    onResignation); meanwhile requests for its groups get COORDINATOR_LOAD_IN_PROGRESS or
    NOT_COORDINATOR. Records are appended with acks=all; with replicas (a cluster's
    AcksPurgatory) the replies wait until the high watermark covers them.
    """

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
        ), random.Random(), now_ms, group_configs=lambda group_id: broker.image.group_configs.get(group_id, {}))
        self.loaded: dict[int, int] = {}  # offsets partition -> the leader epoch it was loaded in
        self.leading: set[int] = set()
        self.waiting: dict[int, set[asyncio.Future]] = {}  # JoinGroup/SyncGroup replies, by offsets partition
        self._replicating: set[asyncio.Task] = set()
        broker.create_internal_topic(
            CONSUMER_OFFSETS_TOPIC, config.offsets_topic_num_partitions, config.offsets_topic_replication_factor,
            {"cleanup.policy": "compact", "segment.bytes": str(config.offsets_topic_segment_bytes)}, now_ms)
        if CONSUMER_OFFSETS_TOPIC in broker.image.topics_by_name:
            topic = broker.topic(CONSUMER_OFFSETS_TOPIC)
            assert topic.partition_count == config.offsets_topic_num_partitions, (
                f"{CONSUMER_OFFSETS_TOPIC} has {topic.partition_count} partitions; "
                f"offsets.topic.num.partitions={config.offsets_topic_num_partitions} cannot change")
        self.follow_leadership(now_ms)

    def follow_leadership(self, now_ms: int) -> None:
        """Load the offsets partitions this node now leads, drop those it no longer leads."""
        led = self.broker.led_partitions(CONSUMER_OFFSETS_TOPIC)
        for partition, epoch in list(self.loaded.items()):
            if led.get(partition, (None,))[0] != epoch:
                self._unload(partition)
        for partition, (epoch, ready) in sorted(led.items()):
            if ready and partition not in self.loaded:
                self._load(partition, epoch, now_ms)
        self.leading = set(led)

    def error_for(self, group_id: str) -> ErrorCode:
        partition = self.coordinator.partition_for(group_id)
        if partition in self.loaded:
            return ErrorCode.NONE
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if partition in self.leading else ErrorCode.NOT_COORDINATOR

    def _load(self, partition: int, leader_epoch: int, now_ms: int) -> None:
        """Replay in log order; offsets of aborted or open transactions (TxnOffsetCommit) are skipped."""
        log = self.broker.partitions[TopicPartition(CONSUMER_OFFSETS_TOPIC, partition)].log
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
        self.loaded[partition] = leader_epoch

    def _unload(self, partition: int) -> None:
        del self.loaded[partition]
        coordinator = self.coordinator
        for group_id in [g for g in {*coordinator.groups, *coordinator.offsets}
                         if coordinator.partition_for(g) == partition]:
            coordinator.groups.pop(group_id, None)
            coordinator.offsets.pop(group_id, None)
        for future in self.waiting.pop(partition, ()):
            if not future.done():
                future.set_result({"error_code": ErrorCode.NOT_COORDINATOR})

    def reply_future(self, group_id: str) -> asyncio.Future:
        """A future for a JoinGroup or SyncGroup reply, answered NOT_COORDINATOR on resignation."""
        future = asyncio.get_running_loop().create_future()
        waiting = self.waiting.setdefault(self.coordinator.partition_for(group_id), set())
        waiting.add(future)
        future.add_done_callback(waiting.discard)
        return future

    def topics(self) -> list[TopicMetadata]:
        return [TopicMetadata(topic.topic_id, topic.name, topic.partition_count)
                for topic in self.broker.image.topics_by_name.values()]

    def apply(self, effects: Effects, now_ms: int) -> asyncio.Task | None:
        """Append the records (one batch per offsets partition, acks=all), then send the replies.
        With replicas the replies wait for the high watermark; the returned task gives the
        error (NONE once replicated) for the caller's own response."""
        by_partition: dict[int, list[Record]] = {}
        for record in effects.records:
            by_partition.setdefault(record.partition, []).append(
                Record(timestamp=now_ms, key=encode_key(record.key), value=record.value))
        required: list[tuple[TopicPartition, int]] = []
        error = ErrorCode.NONE
        for partition, records in sorted(by_partition.items()):
            topic_partition = TopicPartition(CONSUMER_OFFSETS_TOPIC, partition)
            try:
                info = self.broker.append(topic_partition, build_batch(records), now_ms, acks=ACKS_ALL)
                required.append((topic_partition, info.last_offset + 1))
            except KafkaError as e:
                error = coordinator_error(e.code)
        if self.broker.acks_purgatory is None or not required or error != ErrorCode.NONE:
            self._reply(effects, error)
            return None
        task = asyncio.get_running_loop().create_task(self._replicate(effects, required))
        self._replicating.add(task)
        task.add_done_callback(self._replicating.discard)
        return task

    async def _replicate(self, effects: Effects, required: list[tuple[TopicPartition, int]]) -> ErrorCode:
        error = ErrorCode.NONE
        for topic_partition, offset in required:
            status = await self.broker.acks_purgatory.wait_for_replication(
                self.broker, topic_partition, offset, OFFSETS_COMMIT_TIMEOUT_MS)
            if status != ErrorCode.NONE:
                error = coordinator_error(status)
        self._reply(effects, error)
        return error

    @staticmethod
    def _reply(effects: Effects, error: ErrorCode) -> None:
        for future, response in effects.replies:
            if not future.done():
                future.set_result(response if error == ErrorCode.NONE else {**response, "error_code": error})


def coordinator_error(code: ErrorCode) -> ErrorCode:
    """A failed write to a coordinator topic (__consumer_offsets, __transaction_state) as the client sees it
    (Kafka's GroupCoordinator mapping)."""
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return code


async def _once_replicated(replicated: asyncio.Task, response: dict, on_error) -> dict:
    error = await replicated
    if error != ErrorCode.NONE:
        on_error(response, error)
    return response


def _respond(replicated: asyncio.Task | None, response: dict, on_error=None):
    """The response, or a coroutine giving it once the coordinator's records are replicated."""
    if replicated is None:
        return response
    return _once_replicated(replicated, response, on_error or (lambda r, error: r.update(error_code=error)))


_nodes: weakref.WeakKeyDictionary[Broker, GroupNode] = weakref.WeakKeyDictionary()


def group_node(broker: Broker, now_ms: int) -> GroupNode:
    if broker not in _nodes:
        _nodes[broker] = GroupNode(broker, now_ms)
    node = _nodes[broker]
    node.follow_leadership(now_ms)
    return node


def has_group_node(broker: Broker) -> bool:
    """Whether any group request reached this broker yet (a cluster creates its offsets topic then)."""
    return broker in _nodes


def groups_next_deadline_ms(broker: Broker) -> int | None:
    """When the group coordinator's timers next have work (None before any group request)."""
    return _nodes[broker].coordinator.next_deadline_ms() if broker in _nodes else None


def tick_groups(broker: Broker, now_ms: int) -> None:
    """The coordinator's timers: session, rebalance and join-delay deadlines, offsets retention."""
    node = group_node(broker, now_ms)
    node.apply(node.coordinator.tick(now_ms, node.topics()), now_ms)


# ---------------------------------------------------------------------------------------------
# Classic protocol


async def handle_join_group(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
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


async def handle_sync_group(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
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


def handle_heartbeat(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    if error := node.error_for(request.group_id):
        return {"throttle_time_ms": 0, "error_code": error}
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
    if error := node.error_for(request.group_id):
        return {"throttle_time_ms": 0, "error_code": error, "members": []}
    error, errors, effects = node.coordinator.leave_group(group_id=request.group_id, members=members,
                                                          now_ms=context.now_ms)
    replicated = node.apply(effects, context.now_ms)
    if context.api_version < BATCHED_LEAVE_VERSION and error == ErrorCode.NONE:
        error = errors[0]
    return _respond(replicated, {"throttle_time_ms": 0, "error_code": error, "members": [
        {"member_id": member_id, "group_instance_id": instance_id, "error_code": member_error}
        for (member_id, instance_id), member_error in zip(members, errors)]})


# ---------------------------------------------------------------------------------------------
# KIP-848


def handle_consumer_group_heartbeat(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
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
    return _respond(node.apply(effects, context.now_ms), {"throttle_time_ms": 0, **response})


def handle_consumer_group_describe(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    topics = node.topics()
    operations = authorized_operations("group", request.include_authorized_operations)
    return {"throttle_time_ms": 0, "groups": [
        {**node.coordinator.describe_consumer_group(group_id, topics),
         "authorized_operations": operations} if not (error := node.error_for(group_id))
        else {"group_id": group_id, "error_code": error, "authorized_operations": authorized_operations("group", False)}
        for group_id in request.group_ids]}


# ---------------------------------------------------------------------------------------------
# Offsets


def handle_offset_commit(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
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
    replicated = node.apply(effects, context.now_ms)
    results = {(c.topic, c.partition): error for c, error in zip(commits, errors)}
    results |= {(c.topic, c.partition): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for c in unknown}
    response = {"throttle_time_ms": 0, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": results[topic.name, p.partition_index]}
            for p in topic.partitions]}
        for topic in request.topics]}
    return _respond(replicated, response, _fail_partitions)


def _fail_partitions(response: dict, error: ErrorCode) -> None:
    for topic in response["topics"]:
        for partition in topic["partitions"]:
            if partition["error_code"] == ErrorCode.NONE:
                partition["error_code"] = error


def partition_exists(broker: Broker, topic: str, partition: int) -> bool:
    image = broker.image.topics_by_name.get(topic)
    return image is not None and 0 <= partition < image.partition_count


def handle_offset_fetch(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    if context.api_version >= MULTI_GROUP_OFFSET_FETCH_VERSION:
        return {"throttle_time_ms": 0, "groups": [
            {"group_id": group.group_id, **_fetch_group(node, group.group_id, group.topics,
                                                        group.get("member_id"), group.get("member_epoch", -1))}
            for group in request.groups]}
    return {"throttle_time_ms": 0, **_fetch_group(node, request.group_id, request.topics, None, -1)}


def _fetch_group(node: GroupNode, group_id: str, topics, member_id: str | None, member_epoch: int) -> dict:
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


def handle_offset_delete(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    if error := node.error_for(request.group_id):
        return {"throttle_time_ms": 0, "error_code": error, "topics": []}
    partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    error, errors, effects = node.coordinator.delete_offsets(group_id=request.group_id, partitions=partitions,
                                                             now_ms=context.now_ms)
    replicated = node.apply(effects, context.now_ms)
    results = dict(zip(partitions, errors))
    return _respond(replicated, {"throttle_time_ms": 0, "error_code": error, "topics": [] if error else [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": results[t.name, p.partition_index]} for p in t.partitions]}
        for t in request.topics]})


# ---------------------------------------------------------------------------------------------
# Group administration


def handle_describe_groups(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    operations = authorized_operations("group", request.get("include_authorized_operations", False))  # v3+
    groups = []
    for group_id in request.groups:
        if error := node.error_for(group_id):
            groups.append({"group_id": group_id, "error_code": error,
                           "authorized_operations": authorized_operations("group", False)})
            continue
        described = node.coordinator.describe_group(group_id)
        if context.api_version < 6 and described["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND:
            described["error_code"] = ErrorCode.NONE  # before v6 a missing group is described as Dead
        groups.append({**described, "authorized_operations": operations})
    return {"throttle_time_ms": 0, "groups": groups}


def handle_list_groups(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "groups": node.coordinator.list_groups(request.get("states_filter") or (),
                                                   request.get("types_filter") or ())}


def handle_delete_groups(broker: Broker, request, context: RequestContext) -> dict:
    node = group_node(broker, context.now_ms)
    here = [group_id for group_id in request.groups_names if not node.error_for(group_id)]
    errors, effects = node.coordinator.delete_groups(here, context.now_ms)
    results = dict(zip(here, errors))
    response = {"throttle_time_ms": 0, "results": [
        {"group_id": group_id, "error_code": results.get(group_id) or node.error_for(group_id)}
        for group_id in request.groups_names]}
    return _respond(node.apply(effects, context.now_ms), response, _fail_results)


def _fail_results(response: dict, error: ErrorCode) -> None:
    for result in response["results"]:
        if result["error_code"] == ErrorCode.NONE:
            result["error_code"] = error

