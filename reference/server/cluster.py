"""The asyncio shell of a cluster node (reference/node/cluster.py): the BrokerServer plus Kafka's
components for the traffic between nodes, one module each, started here in the node's roles
(process.roles) through the node's Supervisor (restart or stop the node, reference/server/README.md):

- raft_driver.py, RaftDriver (KafkaRaftClient): the controller quorum's Vote, BeginQuorumEpoch,
  EndQuorumEpoch and Fetch of `__cluster_metadata` (KIP-595), every node.
- quorum_controller.py, QuorumController (the controller's event loop, ControllerApis): broker
  registrations, heartbeats, AlterPartition, forwarded admin requests, and its timed duties;
  controllers.
- lifecycle.py, BrokerLifecycleManager: BrokerRegistration and BrokerHeartbeat (KIP-631); brokers.
- node_to_controller.py, ForwardingManager (Envelope, KIP-590), AlterPartitionManager (KIP-497)
  and AutoTopicCreationManager: requests to the active controller.
- replica_fetcher.py, ReplicaFetcherManager: a fetcher per leader this broker follows; brokers.
- purgatory.py: fetches waiting for data, acks=all produces waiting for the ISR.
- peers.py: the connections to other nodes.

Every message between nodes is a Kafka RPC with Kafka's message definitions (the ones the
bundled copy lacks are in reference/protocol/definitions/). Those only nodes send
(INTER_NODE_API_VERSIONS, and a Fetch of the metadata log) are served to principals allowed
CLUSTER_ACTION on the cluster (AUTH-3), and never listed in a client's ApiVersions.

A controller-only node serves no clients: a request other than ApiVersions or DescribeQuorum
closes the connection with one log line, as a Kafka controller's listener does. A broker just
started holds clients' requests until it has caught up with the metadata log and been unfenced
(`_until_serving_clients`). The transaction coordinator's inter-broker requests (markers to
partition leaders, KIP-890 verification) go out through `services.peers`, one connection
per broker.
"""
from __future__ import annotations

import asyncio

from reference.handlers.context import CloseConnection
from reference.node.cluster import CONTROLLER_CLIENT_APIS, ClusterBroker
from reference.node.raft_rpcs import is_metadata_fetch
from reference.protocol.api_keys import ApiKey
from reference.protocol.api_versions import CONTROLLER_LISTENER_APIS, INTER_NODE_API_VERSIONS, is_supported
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.headers import parse_request_header
from reference.protocol.messages import decode_request, encode_response_chunks
from reference.security.checks import acts_for_the_cluster
from reference.security.inter_node import CONTROLLER, INTER_BROKER, client_security, controller_listener_names
from reference.security.session import SASL_APIS, Session
from reference.runtime import node_services
from reference.runtime.capabilities import RpcProducerIdManager
from reference.server.lifecycle import BrokerLifecycleManager
from reference.server.node_to_controller import AlterPartitionManager, AutoTopicCreationManager, ForwardingManager
from reference.server.peers import PeerConnection
from reference.server.purgatory import AcksPurgatory, FetchPurgatory
from reference.server.quorum_controller import QuorumController
from reference.server.raft_driver import RaftDriver
from reference.server.replica_fetcher import ReplicaFetcherManager
from reference.server.server import TICK_INTERVAL_MS, BrokerServer, cancel_and_wait, now_ms, timer_wait_ms
from reference.server.supervisor import Policy

SERVING_CLIENTS_WAIT_S = 30.0  # a client's request to a broker still catching up after its start waits this long
CONTROLLER_APIS = {ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS, ApiKey.ALTER_CONFIGS,
                   ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.INIT_PRODUCER_ID, ApiKey.DESCRIBE_QUORUM,
                   ApiKey.ELECT_LEADERS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS}
# Served before a broker serves clients (and on a controller-only node): the connection's set-up.
UNGATED_APIS = {*CONTROLLER_CLIENT_APIS, *SASL_APIS}
QUORUM_RPCS = {ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH, ApiKey.FETCH}


class ClusterServer(BrokerServer):
    broker: ClusterBroker

    def __init__(self, broker: ClusterBroker) -> None:
        super().__init__(broker)
        # Both purgatories deliver the broker's pending wake-ups before anything waits, so an
        # append wakes the follower fetches parked on it and a follower fetch that moved the
        # high watermark answers the acks=all produces it settles, each in the same turn.
        self.purgatory = FetchPurgatory(self.notify)
        self.acks = AcksPurgatory(self.notify)
        self.services = node_services(broker, now_ms(), replication=self.acks, peers=self._send_request,
                                      producer_ids=RpcProducerIdManager(self._send_request, broker.config.node_id))
        broker.raft.on_storage_failure = lambda reason: self.supervisor.stop_node(f"raft storage failed: {reason}")
        listeners, properties = broker.config.listeners, broker.config.security_properties
        self.controller_listener_names = frozenset(controller_listener_names(properties))
        self.security = {purpose: client_security(properties, listeners, purpose)
                         for purpose in (CONTROLLER, INTER_BROKER)}
        self.raft_driver = RaftDriver(self)
        self.controller = QuorumController(self)
        self.forwarding = ForwardingManager(self)
        self.lifecycle = BrokerLifecycleManager(self)
        self.alter_partitions = AlterPartitionManager(self)
        self.topic_creation = AutoTopicCreationManager(self)
        self.fetchers = ReplicaFetcherManager(self)
        self._broker_connections: dict[int, PeerConnection] = {}
        self._tasks: list[asyncio.Task] = []

    def peer_connection(self, host: str, port: int, client_id: str, purpose: str = INTER_BROKER) -> PeerConnection:
        """A connection to another node's controller listener (CONTROLLER: the voters' addresses)
        or inter-broker listener (INTER_BROKER), with that listener's security protocol."""
        return PeerConnection(host, port, client_id, self.security[purpose])

    def inter_broker_address(self, broker_id: int) -> tuple[str, int] | None:
        """A broker's endpoint on the inter-broker listener, from its registration."""
        registered = self.broker.controller.brokers.get(broker_id)
        if registered is None:
            return None
        listener = self.security[INTER_BROKER].listener
        return tuple(registered.listeners[listener]) if listener in registered.listeners else (registered.host,
                                                                                             registered.port)

    async def start(self) -> tuple[str, int]:
        address = await super().start()
        config = self.broker.config
        loops = self.raft_driver.loops()
        if config.is_broker:
            loops += [("lifecycle", self.lifecycle.loop, Policy.RESTART),
                      ("fetcher-manager", self.fetchers.loop, Policy.RESTART)]
        if config.is_controller:
            loops.append(("controller", self.controller.loop, Policy.STOP_NODE))
        self._tasks = [self.supervisor.start(name, loop, policy) for name, loop, policy in loops]
        return address

    async def stop(self) -> None:
        """A controlled shutdown first (leaderships move away while this node still serves), and
        a leader's resignation (EndQuorumEpoch), then stop."""
        await self.lifecycle.shut_down()
        await self.raft_driver.resign()
        await cancel_and_wait(self._tasks)
        await self.fetchers.stop()
        await self.alter_partitions.stop()
        await self.topic_creation.stop()
        self.acks.wake_all()
        for closeable in (self.raft_driver, self.lifecycle, self.forwarding, *self._broker_connections.values()):
            closeable.close()
        await super().stop()

    # ------------------------------------------------------------ requests

    async def _handle(self, frame, session: Session) -> list | None:
        if session.authenticator is not None and session.authenticator.expects_raw_token:  # SaslHandshake v0
            return await super()._handle(frame, session)
        header, body_offset = parse_request_header(frame)
        api_key, body = header.api_key, frame[body_offset:]
        if api_key in INTER_NODE_API_VERSIONS:
            return await self._inter_node(header, None, body, session)
        if api_key == ApiKey.FETCH and (metadata_fetch := self._metadata_fetch(header, body)) is not None:
            return await self._inter_node(header, metadata_fetch, body, session)
        if session.listener.name in self.controller_listener_names and api_key not in CONTROLLER_LISTENER_APIS:
            raise CloseConnection(f"{ApiKey(api_key).name} from {header.client_id!r} on the controller listener "
                                  f"{session.listener.name}: clients talk to a broker listener")
        if not self.broker.serving_clients and api_key not in UNGATED_APIS and not (
                api_key in CONTROLLER_APIS and self.broker.config.is_controller
                and acts_for_the_cluster(self.broker, session.principal, session.client_host)):
            await self._until_serving_clients(api_key, header.client_id)
        if api_key in CONTROLLER_APIS and not self._is_transactional_init(header, body):
            return await self.forwarding.forward(frame, session)
        chunks = await super()._handle(frame, session)
        self.notify()
        return chunks

    async def handle_as_broker(self, frame, session: Session) -> list | None:
        """A request through the handlers, as a single node serves it (the controller runs admin requests so)."""
        return await super()._handle(frame, session)

    @staticmethod
    def _metadata_fetch(header, body):
        """The request, if it is a Fetch of the metadata log (KRaft's, v13+ naming topics by id)."""
        if header.api_version < 13 or not is_supported(ApiKey.FETCH, header.api_version):
            return None
        request = decode_request(ApiKey.FETCH, header.api_version, body)
        return request if is_metadata_fetch(request) else None

    async def _inter_node(self, header, request, body, session: Session) -> list:
        """A request only nodes send: from a principal allowed CLUSTER_ACTION, else the connection closes."""
        api_key, version = header.api_key, header.api_version
        if (refusal := session.gate(api_key, now_ms())) is not None:
            raise CloseConnection(refusal)
        if self.controller_listener_names and session.listener.name not in self.controller_listener_names:
            raise CloseConnection(f"{ApiKey(api_key).name} on listener {session.listener.name}: the controller's "
                                  f"RPCs are served on {', '.join(sorted(self.controller_listener_names))} only")
        if not acts_for_the_cluster(self.broker, session.principal, session.client_host):
            raise CloseConnection(f"{session.principal} may not send {ApiKey(api_key).name}, "
                                  "a request between the nodes (CLUSTER_ACTION)")
        if request is None:
            if not is_supported(api_key, version, INTER_NODE_API_VERSIONS):
                raise CloseConnection(f"{ApiKey(api_key).name} v{version} is not supported "
                                      f"(client {header.client_id!r})")
            request = decode_request(api_key, version, body)
        if api_key in QUORUM_RPCS:
            response = await self.raft_driver.handle(api_key, request)
        elif api_key == ApiKey.BROKER_REGISTRATION:
            response = await self.controller.broker_registration(request)
        elif api_key == ApiKey.BROKER_HEARTBEAT:
            response = await self.controller.broker_heartbeat(request)
        elif api_key == ApiKey.ALTER_PARTITION:
            response = await self.controller.alter_partition(request, version)
        else:
            assert api_key == ApiKey.ENVELOPE, api_key
            response = await self.controller.envelope(request, session)
        return encode_response_chunks(api_key, version, header.correlation_id, response)

    @staticmethod
    def _is_transactional_init(header, body) -> bool:
        """InitProducerId with a transactional id is for the transaction coordinator, not the controller."""
        return (header.api_key == ApiKey.INIT_PRODUCER_ID and is_supported(header.api_key, header.api_version)
                and decode_request(header.api_key, header.api_version, body).transactional_id is not None)

    async def _send_request(self, broker_id: int, api_key: int, version: int, body: dict):
        address = self.inter_broker_address(broker_id)
        if address is None:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not registered")
        connection = self._broker_connections.get(broker_id)
        if connection is None or connection.address != address:
            connection = self._broker_connections[broker_id] = self.peer_connection(
                *address, f"kspec-broker-{self.broker.config.node_id}")
        return await connection.call(api_key, version, body)

    async def _fetch(self, request, context) -> dict:
        response = await super()._fetch(request, context)
        self.notify()  # a follower's fetch may have moved a high watermark
        return response

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
            await asyncio.wait_for(self.raft_driver.serving_clients.wait(), SERVING_CLIENTS_WAIT_S)
        except asyncio.TimeoutError:
            raise CloseConnection(f"api key {api_key} from {client_id!r}: broker {node_id} has not caught up with "
                                  f"the metadata log and been unfenced within {SERVING_CLIENTS_WAIT_S:.0f} s") from None

    # ------------------------------------------------------------ timers

    def notify(self) -> None:
        self.acks.notify(self.broker.changed)
        self.broker.changed.clear()
        self.purgatory.notify(self.broker.appended)
        self.broker.appended.clear()

    async def _tick_forever(self) -> None:
        wait_ms = TICK_INTERVAL_MS
        while True:
            await asyncio.sleep(wait_ms / 1000)
            wait_ms = TICK_INTERVAL_MS
            now = now_ms()
            self.broker.tick(now)
            if self.broker.broker_epoch >= 0:
                self.alter_partitions.maybe_send(now)
                if self.services.groups.started:  # a cluster makes its offsets topic at the first group request
                    self.services.groups.tick(now)
                self.services.transactions.tick(now)
                wait_ms = timer_wait_ms(self.services, now_ms())
                self.topic_creation.maybe_create()
            self.notify()
