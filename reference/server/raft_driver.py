"""The Raft core's shell, as Kafka's KafkaRaftClient with its RaftManager: it ticks the sans-IO
core (reference/controller/raft.py), moves its messages as Kafka's KRaft RPCs
(reference/node/raft_rpcs.py), persists before anything is sent, replays what committed into
the node, and lets the controller wait for its records to commit.

Every node runs it: a voter (process.roles has controller) and an observer (a broker-only node,
KIP-595) alike.

Requests and their answers. The core puts requests (VoteRequest, BeginQuorumEpoch,
EndQuorumEpoch, FetchRequest) in its outbox addressed to a voter; each goes out on one of two
connections to that voter, the fetch channel (Fetch of `__cluster_metadata`) or the quorum
channel (the rest), so that a Fetch the leader holds never delays a vote. A request that
arrives is handed to the core with a waiter for the answer the core owes its sender (a
VoteResponse for a Vote, a FetchResponse for a Fetch): when the outbox holds that answer, the
waiter gets it instead of a connection, and it goes back as the RPC's response. The core answers
a Vote at once; the leader may hold a Fetch up to its MaxWaitMs (the long poll) and answer it
when entries are appended or the high watermark moves. Where the core has no answer (a voter's
Fetch to a node that is not the leader, a Vote to an observer) the response carries an error
and this node's leader and epoch, and the requester's core is not told: Raft treats it as a
message lost. The requester hands an answer to its own core; a lost request or answer is a
lost message, which Raft tolerates (it retries by itself).
"""
from __future__ import annotations

import asyncio
import functools
import logging

from reference.controller.raft import FetchRequest
from reference.node.raft_rpcs import ANSWERED_BY, from_request, from_response, request_error, to_request, to_response
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode, KafkaError
from reference.security.inter_node import CONTROLLER
from reference.server.peers import PEER_ERRORS
from reference.server.server import now_ms
from reference.server.supervisor import Policy

log = logging.getLogger("kspec.raft")

RAFT_TICK_MIN_MS = 5  # the Raft loop sleeps at least this long between ticks
RAFT_TICK_MAX_MS = 500  # and at most this long, whatever the core says is due next
RAFT_QUEUE_MAX = 100  # requests waiting for one peer's channel; older ones are dropped (Raft tolerates loss)
RAFT_SEND_TIMEOUT_S = 1.0  # one request's round trip, besides the max wait of a Fetch the leader may hold
COMMIT_TIMEOUT_S = 5.0
RESIGN_TIMEOUT_S = 0.5  # a leader that shuts down waits this long for its EndQuorumEpoch requests
FETCH_CHANNEL, QUORUM_CHANNEL = "fetch", "quorum"
UNANSWERED = {ApiKey.FETCH: ErrorCode.NOT_LEADER_OR_FOLLOWER, ApiKey.VOTE: ErrorCode.INCONSISTENT_VOTER_SET}


class RaftDriver:
    def __init__(self, server) -> None:
        self.server = server
        self.broker = server.broker
        self.raft = self.broker.raft
        node_id = self.broker.config.node_id
        peers = [voter for voter in self.broker.voters if voter != node_id]
        self._queues = {(peer, channel): asyncio.Queue() for peer in peers
                        for channel in (FETCH_CHANNEL, QUORUM_CHANNEL)}
        self._connections = {key: server.peer_connection(*self.broker.voters[key[0]], f"kspec-raft-{node_id}",
                                                         CONTROLLER)
                             for key in self._queues}
        self._answers: dict[tuple[int, type], asyncio.Future] = {}  # (requester, answer type) -> its waiter
        self._due = asyncio.Event()  # an input moved the core's next tick before _wake_ms
        self._wake_ms = 0  # when the raft loop wakes next
        self._commit_waiters: list[tuple[int, asyncio.Future]] = []
        self.serving_clients = asyncio.Event()  # set once, as broker.serving_clients

    def loops(self) -> list:
        return [("raft", self._raft_loop, Policy.STOP_NODE),
                *((f"raft-sender-{peer}-{channel}", functools.partial(self._sender, peer, channel), Policy.RESTART)
                  for peer, channel in self._queues)]

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()

    # ------------------------------------------------------------ the core's clock and outputs

    async def _raft_loop(self) -> None:
        """Tick the core when it has timed work due (a held Fetch whose max wait is up, a
        follower's unanswered Fetch, an election or quorum timeout), or sooner when an input moved
        that time earlier; not on a fixed period, so an idle quorum costs a few wake-ups a second."""
        while True:
            self.raft.tick(now_ms())
            self.after_raft()
            self._due.clear()
            now = now_ms()
            sleep_ms = min(max(self.raft.next_tick_ms - now, RAFT_TICK_MIN_MS), RAFT_TICK_MAX_MS)
            self._wake_ms = now + sleep_ms
            try:
                await asyncio.wait_for(self._due.wait(), sleep_ms / 1000)
            except asyncio.TimeoutError:
                pass

    def after_raft(self) -> None:
        """After any input to the core: persist, hand out the outbox, replay what committed."""
        now = now_ms()
        self.raft.persist(now)  # quorum-state; a failure there, or on the metadata log, stops the node
        for destination, message in self.raft.take_outbox():
            waiter = self._answers.pop((destination, type(message)), None)
            if waiter is not None:
                if not waiter.done():
                    waiter.set_result(message)  # the response to that node's request
                continue
            queue = self._queues.get((destination, FETCH_CHANNEL if isinstance(message, FetchRequest)
                                      else QUORUM_CHANNEL))
            if queue is None or type(message) in ANSWERED_BY.values():
                continue  # an answer whose requester stopped waiting: lost, as on a network
            if queue.qsize() >= RAFT_QUEUE_MAX:
                queue.get_nowait()
            queue.put_nowait(message)
        self.broker.apply_committed(now)
        if self.broker.serving_clients:
            self.serving_clients.set()
        if self.raft.next_tick_ms < self._wake_ms:
            self._due.set()  # the raft loop sleeps past what is now due: wake it
        waiting = []
        for offset, committed in self._commit_waiters:
            if committed.done():
                continue
            if self.raft.applied_offset >= offset:
                committed.set_result(None)
            elif not self.broker.is_active_controller:
                committed.set_exception(KafkaError(ErrorCode.NOT_CONTROLLER, "leadership lost before commit"))
            else:
                waiting.append((offset, committed))
        self._commit_waiters = waiting
        self.server.notify()

    # ------------------------------------------------------------ requests out

    async def _sender(self, peer: int, channel: str) -> None:
        queue, connection = self._queues[peer, channel], self._connections[peer, channel]
        while True:
            message = await queue.get()
            api_key, version, body = to_request(message, self.broker.cluster_id, peer)
            wait_s = message.max_wait_ms / 1000 if isinstance(message, FetchRequest) else 0
            try:
                response = await connection.call(api_key, version, body, RAFT_SEND_TIMEOUT_S + wait_s)
            except PEER_ERRORS:
                continue  # lost, as on a real network; Raft retries by itself
            answer = from_response(message, peer, response)
            if answer is not None:
                self.raft.receive(answer, now_ms())
                self.after_raft()

    async def resign(self) -> None:
        """On shutdown, a leader's EndQuorumEpoch to the other voters, sent before the senders stop."""
        self.raft.resign(now_ms())
        calls = []
        for destination, message in self.raft.take_outbox():
            if (destination, QUORUM_CHANNEL) in self._connections:
                api_key, version, body = to_request(message, self.broker.cluster_id, destination)
                calls.append(self._connections[destination, QUORUM_CHANNEL].call(api_key, version, body,
                                                                                   RESIGN_TIMEOUT_S))
        await asyncio.gather(*calls, return_exceptions=True)

    # ------------------------------------------------------------ requests in

    async def handle(self, api_key: int, request) -> dict:
        """A KRaft request from another node -> its response, once the core has answered it."""
        if request.get("cluster_id") not in (None, self.broker.cluster_id):
            return to_response(api_key, None, self.raft.leader_id, self.raft.epoch, ErrorCode.INCONSISTENT_CLUSTER_ID)
        if (error := request_error(api_key, request, self.raft.voters, self.raft.node_id)) is not None:
            return to_response(api_key, None, self.raft.leader_id, self.raft.epoch, error)
        message = from_request(api_key, request)
        answer_type = ANSWERED_BY.get(api_key)
        requester = getattr(message, "replica_id", getattr(message, "candidate_id", -1))
        waiter = None
        if answer_type is not None:
            overtaken = self._answers.pop((requester, answer_type), None)
            if overtaken is not None and not overtaken.done():
                overtaken.set_result(None)  # as the core drops a held Fetch that a newer one overtakes
            waiter = self._answers[requester, answer_type] = asyncio.get_running_loop().create_future()
        self.raft.receive(message, now_ms())
        self.after_raft()
        if waiter is None:  # BeginQuorumEpoch, EndQuorumEpoch: acknowledged with what this node now knows
            return to_response(api_key, None, self.raft.leader_id, self.raft.epoch)
        try:
            if not waiter.done() and api_key == ApiKey.FETCH and self.raft.holds_fetch_of(requester):
                await asyncio.wait_for(asyncio.shield(waiter), RAFT_SEND_TIMEOUT_S + message.max_wait_ms / 1000)
        except asyncio.TimeoutError:  # e.g. a leader that stepped down dropped the held Fetch
            pass
        finally:
            if self._answers.get((requester, answer_type)) is waiter:
                del self._answers[requester, answer_type]
        answer = waiter.result() if waiter.done() else None
        if answer is None:
            return to_response(api_key, None, self.raft.leader_id, self.raft.epoch, UNANSWERED[api_key])
        return to_response(api_key, answer, self.raft.leader_id, self.raft.epoch)

    # ------------------------------------------------------------ the active controller's commits

    async def commit(self, records: list[dict]) -> None:
        """Propose records and wait until this node has applied them."""
        if not records:
            return
        if not self.broker.is_active_controller:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no longer the active controller")
        self.raft.propose(records)
        await self.applied()

    async def applied(self) -> None:
        """Wait until this node has applied its whole metadata log. The active controller decides
        from applied state, so a command first waits for the records it proposed before: one
        retried after a commit timed out (a registration, say) would otherwise propose them again."""
        offset = self.raft.log_end_offset
        committed = asyncio.get_running_loop().create_future()
        self._commit_waiters.append((offset, committed))
        self.after_raft()
        try:
            await asyncio.wait_for(committed, COMMIT_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "metadata records not committed in time") from None
