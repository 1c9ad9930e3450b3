"""A broker's replica fetchers, as Kafka's ReplicaFetcherManager and ReplicaFetcherThread: one
fetcher per leader this broker follows partitions of, each a loop of OffsetForLeaderEpoch while
a replica truncates to where its log and the leader's agree (KIP-101, KIP-279), then Fetch with
the replica id, long-polling on the leader; the answers go to the sans-IO replicas
(reference/replication/replica.py).
"""
from __future__ import annotations

import asyncio
import functools

from reference.node.broker import TopicPartition
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from reference.replication import EpochEndOffset, FetchAnswer
from reference.server.peers import PEER_ERRORS, PEER_TIMEOUT_S, PeerConnection
from reference.server.server import TICK_INTERVAL_MS, cancel_and_wait, now_ms
from reference.server.supervisor import Policy

FETCHER_IDLE_MS = 50
FETCH_VERSION = 12  # the last version naming topics by name with a ReplicaId field
REPLICA_FETCH_RESPONSE_MAX_BYTES = 10 * 1024 * 1024  # Kafka's replica.fetch.response.max.bytes default
OFFSET_FOR_LEADER_EPOCH_VERSION = 4


class ReplicaFetcherManager:
    def __init__(self, server) -> None:
        self.server = server
        self.broker = server.broker
        self._fetchers: dict[int, asyncio.Task] = {}

    async def stop(self) -> None:
        await cancel_and_wait(self._fetchers.values())

    async def loop(self) -> None:
        while True:
            for leader_id in self.broker.followed_partitions():
                if leader_id not in self._fetchers or self._fetchers[leader_id].done():
                    self._fetchers[leader_id] = self.server.supervisor.start(
                        f"replica-fetcher-{leader_id}", functools.partial(self._fetch_from, leader_id), Policy.RESTART)
            await asyncio.sleep(TICK_INTERVAL_MS / 1000)

    async def _fetch_from(self, leader_id: int) -> None:
        """The replica fetcher for one leader: truncate by epoch where needed, then fetch."""
        connection = None
        while (followed := self.broker.followed_partitions().get(leader_id)) is not None:
            address = self.server.inter_broker_address(leader_id)
            if connection is None or connection.address != address:
                connection = self.server.peer_connection(*address, f"kspec-fetcher-{self.broker.config.node_id}")
            try:
                progressed = await self._truncate(connection, leader_id, followed)
                progressed = await self._replica_fetch(connection, followed) or progressed
            except PEER_ERRORS:
                connection.close()
                progressed = False
            if not progressed:
                await asyncio.sleep(FETCHER_IDLE_MS / 1000)
        if connection is not None:
            connection.close()

    async def _truncate(self, connection: PeerConnection, leader_id: int, followed) -> bool:
        asking = [(tp, replica, request) for tp, replica in followed
                  if (request := replica.epoch_end_offset_request()) is not None]
        if not asking:
            return False
        topics: dict[str, list] = {}
        for tp, _, request in asking:
            topics.setdefault(tp.topic, []).append({"partition": tp.partition,
                                                    "current_leader_epoch": request.current_leader_epoch,
                                                    "leader_epoch": request.leader_epoch})
        response = await connection.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, {
            "replica_id": self.broker.config.node_id,
            "topics": [{"topic": topic, "partitions": partitions} for topic, partitions in topics.items()]})
        answers = {TopicPartition(topic.topic, p.partition): p for topic in response.topics for p in topic.partitions}
        progressed = False  # a leader that has not yet heard of its epoch is asked again after a pause
        for tp, replica, request in asking:
            answer = answers.get(tp)
            if answer is None or replica.leader_id != leader_id or replica.leader_epoch != request.current_leader_epoch:
                continue
            error = ErrorCode(answer.error_code)
            progressed = progressed or error == ErrorCode.NONE
            replica.handle_epoch_end_offset(EpochEndOffset(error, answer.leader_epoch, answer.end_offset))
        return progressed

    async def _replica_fetch(self, connection: PeerConnection, followed) -> bool:
        config = self.broker.config
        fetching = [(tp, replica, request) for tp, replica in followed
                    if (request := replica.fetch_request()) is not None]
        if not fetching:
            return False
        topics: dict[str, list] = {}
        for tp, _, request in fetching:
            topics.setdefault(tp.topic, []).append({
                "partition": tp.partition, "current_leader_epoch": request.current_leader_epoch,
                "fetch_offset": request.fetch_offset, "last_fetched_epoch": request.last_fetched_epoch,
                "log_start_offset": -1, "partition_max_bytes": config.replica_fetch_max_bytes})
        wait_ms = config.replica_fetch_wait_max_ms
        response = await connection.call(ApiKey.FETCH, FETCH_VERSION, {
            "replica_id": config.node_id, "max_wait_ms": wait_ms, "min_bytes": 1,
            "max_bytes": REPLICA_FETCH_RESPONSE_MAX_BYTES, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": partitions} for topic, partitions in topics.items()]},
            PEER_TIMEOUT_S + wait_ms / 1000)
        answers = {TopicPartition(topic.topic, p.partition_index): p
                   for topic in response.responses for p in topic.partitions}
        progressed = False
        now = now_ms()
        for tp, replica, request in fetching:
            answer = answers.get(tp)
            if answer is None:
                continue
            error = ErrorCode(answer.error_code)
            progressed = progressed or error == ErrorCode.NONE
            # Fetch does not carry the leader's log end offset; on OFFSET_OUT_OF_RANGE its high
            # watermark (<= its log end offset) tells a follower that is ahead to truncate.
            with self.broker.storage_io():
                replica.handle_fetch_answer(request, FetchAnswer(
                    error, answer.records or b"", answer.high_watermark, answer.log_start_offset,
                    answer.high_watermark), now)
        return progressed
