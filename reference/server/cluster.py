"""The asyncio shell of a cluster node (reference/node/cluster.py): the BrokerServer plus the
traffic between nodes.

Tasks, each a loop around the sans-IO cores (which ones run depends on process.roles), each
started through the node's Supervisor (restart or stop the node, see reference/server/README.md):
- raft (every node): ticks the Raft core when it has timed work due, sends its outbox (one sender per voter,
  over KspecController "raft" requests), persists before sending, and replays what was committed.
  Between voters a raft message is one-way: the request carries it, the response is empty, and the
  answer travels as a request of its own. An observer (a broker-only node) is in nobody's voters
  list, so no node knows its address: its Fetch is answered in the response to the observer's own
  request. The receiving voter registers a waiter for the observer before handing the Fetch to its
  core, and when the core's outbox holds a message for that observer the shell completes the
  waiter with it instead of queueing it; the leader may hold the Fetch (the long poll) and answer
  it when there is news, as for a voter. The observer's sender feeds the answer to its own core.
- lifecycle (brokers): registers this broker with the active controller, then heartbeats (KIP-631), over
  connections of its own.
- controller (controllers): while active, fences brokers whose session expired, elects leaders for
  offline partitions and, when a leader balance is due, preferred leaders; answers registrations,
  heartbeats and AlterPartition from brokers and admin requests (ElectLeaders among them) that
  other nodes forward (KIP-590), one command at a time, each answered after its records are
  committed.
- replica fetchers (brokers): one per leader this node follows; OffsetForLeaderEpoch while a replica
  truncates, then Fetch with the replica id, long-polling on the leader.
- tick: ISR shrinks and expansions go to the controller as AlterPartition, one batch in flight.
- groups and transactions: the coordinators' timers, and internal topics they want created
  through the active controller (replication factor capped by the live brokers).
- inter-broker requests for the transaction coordinator (`services.peers`): markers to
  partition leaders, KIP-890 verification, producer ids; one connection per broker.

A controller-only node serves no clients: a request other than ApiVersions or DescribeQuorum
closes the connection with one log line, as a Kafka controller's listener does. A broker just
started holds clients' requests until it has caught up with the metadata log and been unfenced
(`_until_serving_clients`).
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging
import socket

from reference.controller.raft import FetchRequest
from reference.handlers.context import CloseConnection
from reference.node.broker import TopicPartition
from reference.node.cluster import CONTROLLER_CLIENT_APIS, ClusterBroker
from reference.node.quorum import decode_raft_message, encode_raft_message
from reference.protocol.api_keys import ApiKey
from reference.protocol.api_versions import is_supported
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.framing import FrameDecoder, FrameTooLarge
from reference.protocol.headers import parse_request_header
from reference.protocol.messages import decode_request, decode_response, encode_request, encode_response_chunks
from reference.replication import EpochEndOffset, FetchAnswer
from reference.runtime import node_services
from reference.runtime.capabilities import RpcProducerIdManager
from reference.security.checks import acts_for_the_cluster
from reference.security.principal import KafkaPrincipal
from reference.security.session import Session
from reference.server.purgatory import AcksPurgatory, FetchPurgatory
from reference.server.server import TICK_INTERVAL_MS, BrokerServer, cancel_and_wait, now_ms, timer_wait_ms
from reference.server.supervisor import Policy

log = logging.getLogger("kspec.cluster")

RAFT_TICK_MIN_MS = 5  # the Raft loop sleeps at least this long between ticks
RAFT_TICK_MAX_MS = 500  # and at most this long, whatever the core says is due next
CONTROLLER_TICK_INTERVAL_MS = 200
REGISTRATION_RETRY_MS = 200
FETCHER_IDLE_MS = 50
PEER_TIMEOUT_S = 5.0
PEER_ERRORS = (OSError, asyncio.TimeoutError)  # a peer that is gone, refuses, or closes mid-call
PEER_RESPONSE_MAX_BYTES = 100 * 1024 * 1024  # a response frame from another node (socket.request.max.bytes)
COMMIT_TIMEOUT_S = 5.0
SERVING_CLIENTS_WAIT_S = 30.0  # a client's request to a broker still catching up after its start waits this long
RAFT_QUEUE_MAX = 100  # raft messages waiting for one peer; older ones are dropped (Raft tolerates loss)
RAFT_SEND_TIMEOUT_S = 1.0  # one raft message's delivery; an observer's Fetch also waits its max_wait_ms
FORWARD_WAIT_S = 5.0  # how long a forwarded admin request waits for an active controller
FETCH_VERSION = 12  # the last version naming topics by name with a ReplicaId field
REPLICA_FETCH_RESPONSE_MAX_BYTES = 10 * 1024 * 1024  # Kafka's replica.fetch.response.max.bytes default
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
CONTROLLER_APIS = {ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS, ApiKey.ALTER_CONFIGS,
                   ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.INIT_PRODUCER_ID, ApiKey.DESCRIBE_QUORUM,
                   ApiKey.ELECT_LEADERS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS}
CONTROLLER_ONLY_APIS = {ApiKey.KSPEC_CONTROLLER, *CONTROLLER_CLIENT_APIS}  # all a node not serving clients answers


class PeerConnection:
    """One connection to another node; one request in flight at a time, reconnecting after errors.

    A plain non-blocking socket, as the server's connections are (reference/server/server.py):
    a response is received straight into the FrameDecoder's buffer for it and decoded in place,
    so a fetched 1 MB batch reaches the follower's log without a copy on the way."""

    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.address = (host, port)
        self.client_id = client_id
        self._lock = asyncio.Lock()
        self._socket: socket.socket | None = None
        self._decoder = FrameDecoder(PEER_RESPONSE_MAX_BYTES)
        self._correlation_id = 0

    async def call(self, api_key: int, version: int, body: dict, timeout_s: float = PEER_TIMEOUT_S):
        async with self._lock:
            try:
                return await asyncio.wait_for(self._call(api_key, version, body), timeout_s)
            except BaseException:
                self.close()
                raise

    async def _call(self, api_key: int, version: int, body: dict):
        loop = asyncio.get_running_loop()
        if self._socket is None:
            self._socket = await _connect(*self.address)
        self._correlation_id += 1
        await loop.sock_sendall(self._socket,
                                encode_request(api_key, version, self._correlation_id, self.client_id, body))
        frames = []
        while not frames:
            received = await loop.sock_recv_into(self._socket, self._decoder.get_buffer())
            if not received:
                raise ConnectionResetError(f"{self.address} closed the connection")
            try:
                frames = self._decoder.buffer_updated(received)
            except FrameTooLarge as e:
                raise ConnectionResetError(str(e)) from e
        assert len(frames) == 1, "one request in flight, so one response"
        correlation_id, response = decode_response(api_key, version, frames[0])
        assert correlation_id == self._correlation_id, (correlation_id, self._correlation_id)
        return response

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
            self._decoder = FrameDecoder(PEER_RESPONSE_MAX_BYTES)  # a half-received frame is gone


async def _connect(host: str, port: int) -> socket.socket:
    loop = asyncio.get_running_loop()
    family, _, _, _, address = (await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))[0]
    connection = socket.socket(family, socket.SOCK_STREAM)
    try:
        connection.setblocking(False)
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await loop.sock_connect(connection, address)
    except BaseException:
        connection.close()
        raise
    return connection


def _envelope(session: Session, frame) -> bytes:
    """A forwarded request with who sent it (Kafka's EnvelopeRequest carries the principal and
    the client's address, KIP-590): one JSON line, then the request frame."""
    sender = {"principal": str(session.principal), "client_host": session.client_host}
    return json.dumps(sender).encode() + b"\n" + bytes(frame)


def _open_envelope(payload: bytes, listener) -> tuple[Session, bytes]:
    sender, _, frame = payload.partition(b"\n")
    sender = json.loads(sender)
    return Session(listener, sender["client_host"], KafkaPrincipal.parse(sender["principal"])), frame


class ClusterServer(BrokerServer):
    broker: ClusterBroker

    def __init__(self, broker: ClusterBroker) -> None:
        super().__init__(broker)
        # Both purgatories deliver the broker's pending wake-ups before anything waits, so an
        # append wakes the follower fetches parked on it and a follower fetch that moved the
        # high watermark answers the acks=all produces it settles, each in the same turn.
        self.purgatory = FetchPurgatory(self._notify)
        self.acks = AcksPurgatory(self._notify)
        self.services = node_services(broker, now_ms(), replication=self.acks, peers=self._send_request,
                                      producer_ids=RpcProducerIdManager(self._send_request, broker.config.node_id))
        broker.raft.on_storage_failure = lambda reason: self.supervisor.stop_node(f"raft storage failed: {reason}")
        client_id = f"kspec-node-{broker.config.node_id}"
        self._voter_connections = {node_id: PeerConnection(host, port, client_id)
                                   for node_id, (host, port) in broker.voters.items()}
        self._raft_connections = {node_id: PeerConnection(host, port, client_id)
                                  for node_id, (host, port) in broker.voters.items()}
        # Heartbeats have connections of their own: queued behind slow commands to a controller
        # that is gone, they would miss the session timeout and get a live broker fenced.
        self._lifecycle_connections = {node_id: PeerConnection(host, port, client_id)
                                       for node_id, (host, port) in broker.voters.items()}
        self._alter_partition_task: asyncio.Task | None = None  # one batch of ISR changes in flight
        self._raft_queues: dict[int, asyncio.Queue] = {}
        self._raft_due = asyncio.Event()  # an input moved the Raft core's next tick before _raft_wake_ms
        self._raft_wake_ms = 0  # when the Raft loop wakes next
        self._observer_fetches: dict[int, asyncio.Future] = {}  # observer id -> its pending Fetch's answer
        self._broker_connections: dict[int, PeerConnection] = {}
        self._fetchers: dict[int, asyncio.Task] = {}
        self._creating: dict[str, asyncio.Task] = {}  # internal topics being created through the controller
        self._commit_waiters: list[tuple[int, asyncio.Future]] = []
        self._controller_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self._serving_clients = asyncio.Event()  # set once, as broker.serving_clients

    async def start(self) -> tuple[str, int]:
        address = await super().start()
        self._raft_queues = {node_id: asyncio.Queue() for node_id in self.broker.voters
                             if node_id != self.broker.config.node_id}
        config = self.broker.config
        loops = [("raft", self._raft_loop, Policy.STOP_NODE),
                 *((f"raft-sender-{node_id}", functools.partial(self._raft_sender, node_id), Policy.RESTART)
                   for node_id in self._raft_queues)]
        if config.is_broker:
            loops += [("lifecycle", self._lifecycle_loop, Policy.RESTART),
                      ("fetcher-manager", self._fetcher_manager_loop, Policy.RESTART)]
        if config.is_controller:
            loops.append(("controller", self._controller_loop, Policy.STOP_NODE))
        self._tasks = [self.supervisor.start(name, loop, policy) for name, loop, policy in loops]
        return address

    async def stop(self) -> None:
        """Controlled shutdown first (leaderships move away while this node still serves), then stop."""
        self._stopping = True
        if self.broker.broker_epoch >= 0:
            try:
                await asyncio.wait_for(self._controller_call("broker_heartbeat", {
                    "broker_id": self.broker.config.node_id, "broker_epoch": self.broker.broker_epoch,
                    "want_shutdown": True}), 2.0)
            except (*PEER_ERRORS, KafkaError):
                pass
        await cancel_and_wait([*self._tasks, *self._fetchers.values(),
                               *([self._alter_partition_task] if self._alter_partition_task else [])])
        self.acks.wake_all()
        for connection in [*self._voter_connections.values(), *self._raft_connections.values(),
                           *self._lifecycle_connections.values(), *self._broker_connections.values()]:
            connection.close()
        await super().stop()

    # ------------------------------------------------------------ requests

    async def _handle(self, frame, session: Session) -> list | None:
        if session.authenticator is not None and session.authenticator.expects_raw_token:  # SaslHandshake v0
            return await super()._handle(frame, session)
        header, body_offset = parse_request_header(frame)
        api_key = header.api_key
        if not self.broker.serving_clients and api_key not in CONTROLLER_ONLY_APIS:
            await self._until_serving_clients(api_key, header.client_id)
        if api_key == ApiKey.KSPEC_CONTROLLER:
            if (refusal := session.gate(api_key, now_ms())) is not None:
                raise CloseConnection(refusal)
            if not acts_for_the_cluster(self.broker, session.principal, session.client_host):
                raise CloseConnection(f"{session.principal} may not send the nodes' RPCs (CLUSTER_ACTION)")
            request = decode_request(api_key, header.api_version, frame[body_offset:])
            error, payload = await self._on_internal(request.kind, bytes(request.payload))
            return encode_response_chunks(api_key, header.api_version, header.correlation_id,
                                          {"error_code": error, "payload": payload})
        if api_key in CONTROLLER_APIS and not self._is_transactional_init(header, frame[body_offset:]):
            return await self._on_controller_api(frame, session)
        chunks = await super()._handle(frame, session)
        self._notify()
        return chunks

    @staticmethod
    def _is_transactional_init(header, body) -> bool:
        """InitProducerId with a transactional id is for the transaction coordinator, not the controller."""
        return (header.api_key == ApiKey.INIT_PRODUCER_ID and is_supported(header.api_key, header.api_version)
                and decode_request(header.api_key, header.api_version, body).transactional_id is not None)

    async def _send_request(self, broker_id: int, api_key: int, version: int, body: dict):
        address = self.broker.broker_address(broker_id)
        if address is None:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not registered")
        connection = self._broker_connections.get(broker_id)
        if connection is None or connection.address != address:
            connection = self._broker_connections[broker_id] = PeerConnection(
                *address, f"kspec-broker-{self.broker.config.node_id}")
        return await connection.call(api_key, version, body)

    async def _fetch(self, request, context) -> dict:
        response = await super()._fetch(request, context)
        self._notify()  # a follower's fetch may have moved a high watermark
        return response

    async def _on_controller_api(self, frame, session: Session) -> list | None:
        """Admin requests run on the active controller; another node forwards them (KIP-590).
        One that loses the leadership before its records commit is run again on the next
        controller, as Kafka's forwarding retries on NOT_CONTROLLER (its records may still
        commit, so a retried CreateTopics may find its topic there: TOPIC_ALREADY_EXISTS)."""
        deadline = asyncio.get_running_loop().time() + FORWARD_WAIT_S
        while asyncio.get_running_loop().time() < deadline:
            if self.broker.is_active_controller:
                try:
                    return await self._run_as_controller(frame, session)
                except KafkaError as e:
                    if e.code != ErrorCode.NOT_CONTROLLER:
                        raise
            elif (controller_id := self.broker.active_controller_id) >= 0:
                try:
                    error, payload = await self._call_voter(controller_id, "envelope", _envelope(session, frame))
                    if error == ErrorCode.NONE:
                        return [payload]
                except PEER_ERRORS:
                    pass
            await asyncio.sleep(0.1)
        raise CloseConnection("no active controller to forward to")

    async def _run_as_controller(self, frame, session: Session) -> list | None:
        """An admin request on this node as the active controller: decided from the applied
        metadata, answered once its records are committed; NOT_CONTROLLER when it is not."""
        async with self._controller_lock:
            if not self.broker.is_active_controller:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "not the active controller")
            await self._applied()
            chunks = await super()._handle(frame, session)
            await self._commit(self.broker.take_pending_records())
        return chunks

    async def _until_serving_clients(self, api_key: int, client_id: str | None) -> None:
        """A client's request waits, on a broker just started, until the broker has caught up
        with the metadata log and been unfenced (a Kafka broker opens its client listener only
        then): answered from the view it replayed so far, it could name this broker the leader
        of partitions that moved while it was down. A controller-only node never serves clients."""
        node_id = self.broker.config.node_id
        if not self.broker.config.is_broker:
            raise CloseConnection(f"api key {api_key} from {client_id!r}: node {node_id} is a controller only "
                                  "(process.roles=controller); clients talk to brokers")
        try:
            await asyncio.wait_for(self._serving_clients.wait(), SERVING_CLIENTS_WAIT_S)
        except asyncio.TimeoutError:
            raise CloseConnection(f"api key {api_key} from {client_id!r}: broker {node_id} has not caught up with "
                                  f"the metadata log and been unfenced within {SERVING_CLIENTS_WAIT_S:.0f} s") from None

    async def _on_internal(self, kind: str, payload: bytes) -> tuple[ErrorCode, bytes]:
        if kind == "raft":
            return ErrorCode.NONE, await self._on_raft_message(decode_raft_message(payload))
        if kind == "envelope":
            try:
                session, frame = _open_envelope(payload, self.listeners[0])
                chunks = await self._run_as_controller(frame, session)
            except KafkaError as e:
                if e.code != ErrorCode.NOT_CONTROLLER:
                    raise
                return ErrorCode.NOT_CONTROLLER, b""  # the forwarding node asks the next controller
            return ErrorCode.NONE, b"".join(bytes(chunk) for chunk in chunks)
        return await self._controller_command(kind, json.loads(payload))

    async def _controller_command(self, kind: str, request: dict) -> tuple[ErrorCode, bytes]:
        """A broker's registration, heartbeat or AlterPartition, on the active controller."""
        if kind == "broker_heartbeat":
            self.broker.note_heartbeat(request["broker_id"], request["broker_epoch"], now_ms())
        async with self._controller_lock:
            if not self.broker.is_active_controller:
                return ErrorCode.NOT_CONTROLLER, b""
            try:
                await self._applied()
                if kind == "broker_registration":
                    self.broker.register_broker(request["broker_id"], request["incarnation_id"], request["host"],
                                                request["port"], now_ms(), request.get("listeners"))
                elif kind == "broker_heartbeat":
                    self.broker.broker_heartbeat(request["broker_id"], request["broker_epoch"],
                                                 request["want_shutdown"], now_ms())
                elif kind == "alter_partition":
                    self.broker.alter_partition(request)
                elif kind == "create_internal_topic":
                    if request["name"] in self.broker.image.topics_by_name:
                        return ErrorCode.NONE, b""
                    self.broker.create_topic(
                        request["name"], request["num_partitions"],
                        min(request["replication_factor"], self.broker.live_broker_count), request["configs"],
                        validate_only=False, now_ms=now_ms())
                else:
                    return ErrorCode.INVALID_REQUEST, b""
                await self._commit(self.broker.take_pending_records())
            except KafkaError as e:
                self.broker.take_pending_records()
                return e.code, b""
        return ErrorCode.NONE, b""

    async def _controller_call(self, kind: str, request: dict,
                               connections: dict[int, PeerConnection] | None = None) -> ErrorCode:
        """Send a command to the active controller (this node or another)."""
        if self.broker.is_active_controller:
            error, _ = await self._controller_command(kind, request)
            return error
        controller_id = self.broker.active_controller_id
        if controller_id < 0:
            return ErrorCode.NOT_CONTROLLER
        error, _ = await self._call_voter(controller_id, kind, json.dumps(request).encode(), connections)
        return error

    async def _call_voter(self, node_id: int, kind: str, payload: bytes,
                          connections: dict[int, PeerConnection] | None = None) -> tuple[ErrorCode, bytes]:
        connection = (connections or self._voter_connections)[node_id]
        response = await connection.call(ApiKey.KSPEC_CONTROLLER, 0, {"kind": kind, "payload": payload})
        return ErrorCode(response.error_code), bytes(response.payload)

    # ------------------------------------------------------------ the quorum

    async def _commit(self, records: list[dict]) -> None:
        """Propose records and wait until this node has applied them."""
        if not records:
            return
        if not self.broker.is_active_controller:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no longer the active controller")
        self.broker.raft.propose(records)
        await self._applied()

    async def _applied(self) -> None:
        """Wait until this node has applied its whole metadata log. The active controller decides
        from applied state, so a command first waits for the records it proposed before: one
        retried after a commit timed out (a registration, say) would otherwise propose them again."""
        offset = self.broker.raft.log_end_offset
        committed = asyncio.get_running_loop().create_future()
        self._commit_waiters.append((offset, committed))
        self._after_raft()
        try:
            await asyncio.wait_for(committed, COMMIT_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "metadata records not committed in time") from None

    def _after_raft(self) -> None:
        """After any Raft input: persist, hand the outbox to the senders, replay what committed."""
        now = now_ms()
        raft = self.broker.raft
        raft.persist(now)  # quorum-state; a failure there, or on the metadata log, stops the node
        for destination, message in raft.take_outbox():
            if destination not in self._raft_queues:  # an observer: the answer rides on its pending request
                answer = self._observer_fetches.pop(destination, None)
                if answer is not None and not answer.done():
                    answer.set_result(message)
                continue
            queue = self._raft_queues[destination]
            if queue.qsize() >= RAFT_QUEUE_MAX:
                queue.get_nowait()
            queue.put_nowait(message)
        self.broker.apply_committed(now)
        if self.broker.serving_clients:
            self._serving_clients.set()
        if raft.next_tick_ms < self._raft_wake_ms:
            self._raft_due.set()  # the Raft loop sleeps past what is now due: wake it
        waiting = []
        for offset, committed in self._commit_waiters:
            if committed.done():
                continue
            if raft.applied_offset >= offset:
                committed.set_result(None)
            elif not self.broker.is_active_controller:
                committed.set_exception(KafkaError(ErrorCode.NOT_CONTROLLER, "leadership lost before commit"))
            else:
                waiting.append((offset, committed))
        self._commit_waiters = waiting
        self._notify()

    def _notify(self) -> None:
        self.acks.notify(self.broker.changed)
        self.broker.changed.clear()
        self.purgatory.notify(self.broker.appended)
        self.broker.appended.clear()

    async def _raft_loop(self) -> None:
        """Tick the Raft core when it has timed work due (a held Fetch whose max wait is up, a
        follower's unanswered Fetch, an election or quorum timeout), or sooner when an input moved
        that time earlier; not on a fixed period, so an idle quorum costs a few wake-ups a second."""
        while True:
            self.broker.raft.tick(now_ms())
            self._after_raft()
            self._raft_due.clear()
            now = now_ms()
            sleep_ms = min(max(self.broker.raft.next_tick_ms - now, RAFT_TICK_MIN_MS), RAFT_TICK_MAX_MS)
            self._raft_wake_ms = now + sleep_ms
            try:
                await asyncio.wait_for(self._raft_due.wait(), sleep_ms / 1000)
            except asyncio.TimeoutError:
                pass

    async def _on_raft_message(self, message) -> bytes:
        """Hand a raft message to the core; b"" back, or, for an observer's Fetch, the answer."""
        from_observer = isinstance(message, FetchRequest) and message.replica_id not in self.broker.voters
        if from_observer:
            overtaken = self._observer_fetches.pop(message.replica_id, None)
            if overtaken is not None and not overtaken.done():
                overtaken.set_result(None)  # as the core drops a held Fetch that a newer one overtakes
            answer = self._observer_fetches[message.replica_id] = asyncio.get_running_loop().create_future()
        self.broker.raft.receive(message, now_ms())
        self._after_raft()
        if not from_observer:
            return b""
        try:
            response = await asyncio.wait_for(answer, RAFT_SEND_TIMEOUT_S + message.max_wait_ms / 1000)
        except asyncio.TimeoutError:  # e.g. a leader that stepped down dropped the held Fetch
            return b""
        finally:
            if self._observer_fetches.get(message.replica_id) is answer:
                del self._observer_fetches[message.replica_id]
        return b"" if response is None else encode_raft_message(response)

    async def _raft_sender(self, node_id: int) -> None:
        queue = self._raft_queues[node_id]
        while True:
            message = await queue.get()
            wait_s = message.max_wait_ms / 1000 if isinstance(message, FetchRequest) and self.broker.raft.is_observer else 0
            try:
                response = await self._raft_connections[node_id].call(
                    ApiKey.KSPEC_CONTROLLER, 0, {"kind": "raft", "payload": encode_raft_message(message)},
                    RAFT_SEND_TIMEOUT_S + wait_s)
            except PEER_ERRORS:
                continue  # lost, as on a real network; Raft retries by itself
            if response.payload:  # the answer to this observer's Fetch
                self.broker.raft.receive(decode_raft_message(bytes(response.payload)), now_ms())
                self._after_raft()

    # ------------------------------------------------------------ broker lifecycle and controller duties

    async def _lifecycle_loop(self) -> None:
        config = self.broker.config
        host, port = config.advertised
        while not self._stopping:  # stop() sends the last heartbeat, asking for a controlled shutdown
            try:
                if self.broker.broker_epoch < 0:
                    await self._controller_call("broker_registration", {
                        "broker_id": config.node_id, "incarnation_id": self.broker.incarnation_id,
                        "host": host, "port": port,
                        "listeners": {listener.name: list(listener.advertised) for listener in self.listeners}},
                        self._lifecycle_connections)
                    await asyncio.sleep(REGISTRATION_RETRY_MS / 1000)
                    continue
                await self._controller_call("broker_heartbeat", {
                    "broker_id": config.node_id, "broker_epoch": self.broker.broker_epoch, "want_shutdown": False},
                    self._lifecycle_connections)
            except (*PEER_ERRORS, KafkaError):
                pass
            await asyncio.sleep(config.broker_heartbeat_interval_ms / 1000)

    async def _controller_loop(self) -> None:
        while True:
            await asyncio.sleep(CONTROLLER_TICK_INTERVAL_MS / 1000)
            if not self.broker.is_active_controller:
                continue
            async with self._controller_lock:
                try:
                    await self._applied()
                    self.broker.controller_tick(now_ms())
                    await self._commit(self.broker.take_pending_records())
                except KafkaError as e:
                    log.info("controller tick: %s", e)

    async def _tick_forever(self) -> None:
        wait_ms = TICK_INTERVAL_MS
        while True:
            await asyncio.sleep(wait_ms / 1000)
            wait_ms = TICK_INTERVAL_MS
            now = now_ms()
            self.broker.tick(now)
            if self.broker.broker_epoch >= 0:
                if self._alter_partition_task is None or self._alter_partition_task.done():
                    requests = self.broker.alter_partition_requests(now)
                    if requests:
                        self._alter_partition_task = asyncio.create_task(self._send_alter_partitions(requests))
                if self.services.groups.started:  # a cluster makes its offsets topic at the first group request
                    self.services.groups.tick(now)
                self.services.transactions.tick(now)
                wait_ms = timer_wait_ms(self.services, now_ms())
                for name, (partitions, replication_factor, configs) in self.broker.wanted_internal_topics.items():
                    if name not in self._creating:
                        self._creating[name] = asyncio.create_task(self._create_internal_topic(
                            name, partitions, replication_factor, configs))
            self._notify()

    async def _create_internal_topic(self, name: str, num_partitions: int, replication_factor: int,
                                     configs: dict[str, str]) -> None:
        try:
            error = await self._controller_call("create_internal_topic", {
                "name": name, "num_partitions": num_partitions, "replication_factor": replication_factor,
                "configs": configs})
            if error == ErrorCode.NONE:
                self.broker.wanted_internal_topics.pop(name, None)
        except (*PEER_ERRORS, KafkaError):
            pass  # asked again on a later tick
        finally:
            del self._creating[name]

    async def _send_alter_partitions(self, requests: list[dict]) -> None:
        """One batch of ISR changes at a time, as Kafka's AlterPartitionManager keeps one request
        in flight: a controller that stopped answering costs one timeout, not one per partition."""
        for request in requests:
            try:
                error = await self._controller_call("alter_partition", request)
            except (*PEER_ERRORS, KafkaError):
                return  # the rest are sent again after ALTER_PARTITION_RESEND_MS
            if error != ErrorCode.NONE:
                self.broker.alter_partition_failed(TopicPartition(request["topic"], request["partition"]), error)

    # ------------------------------------------------------------ replica fetchers

    async def _fetcher_manager_loop(self) -> None:
        while True:
            for leader_id in self.broker.followed_partitions():
                if leader_id not in self._fetchers or self._fetchers[leader_id].done():
                    self._fetchers[leader_id] = self.supervisor.start(
                        f"replica-fetcher-{leader_id}", functools.partial(self._fetch_from, leader_id), Policy.RESTART)
            await asyncio.sleep(TICK_INTERVAL_MS / 1000)

    async def _fetch_from(self, leader_id: int) -> None:
        """The replica fetcher for one leader: truncate by epoch where needed, then fetch."""
        connection = None
        while (followed := self.broker.followed_partitions().get(leader_id)) is not None:
            address = self.broker.broker_address(leader_id)
            if connection is None or connection.address != address:
                connection = PeerConnection(*address, f"kspec-fetcher-{self.broker.config.node_id}")
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
