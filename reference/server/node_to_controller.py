"""Requests from this node to the active controller, as Kafka's NodeToControllerChannelManager
and the managers that use it:

- ForwardingManager: admin requests a client sent to this node go to the active controller
  inside an Envelope, with the client's principal and address (KIP-590); the controller's
  response is the client's.
- AlterPartitionManager: this broker's ISR changes as AlterPartition (KIP-497), one request in
  flight, all pending partitions in it.
- AutoTopicCreationManager: internal topics the coordinators need (`__consumer_offsets`,
  `__transaction_state`) and topics auto-created by Metadata, as CreateTopics with the configured
  replication factor. While fewer brokers are unfenced the controller refuses it
  (INVALID_REPLICATION_FACTOR) and it is asked again on a later tick: Kafka enforces
  `offsets.topic.replication.factor` at creation (KIP-115), so a topic made while a broker is
  fenced does not keep fewer replicas than configured for good.

The active controller is the Raft leader this node knows of. Each user has connections of its
own (`ControllerChannel`): a heartbeat queued behind a slow command to a controller that is gone
would miss the session timeout and get a live broker fenced.
"""
from __future__ import annotations

import asyncio
import logging
import struct
import uuid

from reference.handlers.context import CloseConnection
from reference.handlers.error_responses import error_response
from reference.node.broker import TopicPartition
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.headers import parse_request_header
from reference.protocol.messages import decode_request, encode_response_chunks
from reference.security.inter_node import CONTROLLER
from reference.security.session import Session
from reference.server.peers import PEER_ERRORS
from reference.server.quorum_controller import client_host_address, write_principal

# How long a forwarded admin request waits for an active controller is kspec.forwarding.timeout.ms:
# Kafka's forwarding channel retries for 60 s (BrokerServer, retryTimeoutMs). Metadata names a
# live broker as ControllerId during an election too, so admin requests arrive here while the
# quorum has no leader.
FORWARD_RETRY_S = 0.1
ENVELOPE_VERSION = 0
ALTER_PARTITION_VERSION = 2  # topic ids; v3 adds the ISR members' broker epochs (KIP-903)
CREATE_TOPICS_VERSION = 7
FRAME_SIZE = struct.Struct(">i")

log = logging.getLogger("kspec.broker")


class ControllerChannel:
    """Calls to the active controller over connections of one's own, one per voter."""

    def __init__(self, server, name: str) -> None:
        self.broker = server.broker
        client_id = f"kspec-{name}-{self.broker.config.node_id}"
        self._connections = {node_id: server.peer_connection(host, port, client_id, CONTROLLER)
                             for node_id, (host, port) in self.broker.voters.items()}

    async def call(self, api_key: int, version: int, body: dict):
        """The active controller's response; KafkaError(NOT_CONTROLLER) when none is known."""
        controller_id = self.broker.active_controller_id
        if controller_id not in self._connections:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"no active controller known (leader id {controller_id})")
        return await self._connections[controller_id].call(api_key, version, body)

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()


class ForwardingManager:
    def __init__(self, server) -> None:
        self.server = server
        self.channel = ControllerChannel(server, "forwarding")

    async def forward(self, frame, session: Session) -> list | None:
        """Admin requests run on the active controller; another node forwards them. One that
        loses the leadership before its records commit is run again on the next controller, as
        Kafka's forwarding retries on NOT_CONTROLLER (its records may still commit, so a retried
        CreateTopics may find its topic there: TOPIC_ALREADY_EXISTS). One whose records the
        controller did not commit in time (REQUEST_TIMED_OUT; they may still commit) closes the
        connection with that said, as the client cannot be told which of its changes were made.
        One that finds no active controller within kspec.forwarding.timeout.ms is answered
        REQUEST_TIMED_OUT in its own response schema, as Kafka's ForwardingManager answers on
        its channel's timeout: nothing was proposed, and the client may retry."""
        broker, loop = self.server.broker, asyncio.get_running_loop()
        deadline = loop.time() + broker.config.kspec_forwarding_timeout_ms / 1000
        while loop.time() < deadline:
            try:
                if broker.is_active_controller:
                    return await self.server.controller.run_as_controller(frame, session)
                response = await self.channel.call(ApiKey.ENVELOPE, ENVELOPE_VERSION, {
                    "request_data": bytes(frame), "request_principal": write_principal(session.principal),
                    "client_host_address": client_host_address(session.client_host)})
                if response.error_code == ErrorCode.NONE:
                    data = bytes(response.response_data or b"")
                    return [FRAME_SIZE.pack(len(data)) + data] if data else None
                if response.error_code == ErrorCode.REQUEST_TIMED_OUT:
                    raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "in the Envelope's answer")
            except KafkaError as e:
                if e.code == ErrorCode.REQUEST_TIMED_OUT:  # the records were proposed and may still commit
                    raise CloseConnection(f"{ApiKey(parse_request_header(frame)[0].api_key).name}: the active "
                                          f"controller did not commit its records in time ({e})") from None
                if e.code != ErrorCode.NOT_CONTROLLER:
                    raise
            except PEER_ERRORS:
                pass
            await asyncio.sleep(FORWARD_RETRY_S)
        return self._timed_out(frame)

    def _timed_out(self, frame) -> list:
        """REQUEST_TIMED_OUT for every part of the request, in the request's own response."""
        header, body_offset = parse_request_header(frame)
        request = decode_request(header.api_key, header.api_version, frame[body_offset:])
        timeout_ms = self.server.broker.config.kspec_forwarding_timeout_ms
        log.info("%s from %r: no active controller within %d ms; answered REQUEST_TIMED_OUT",
                 ApiKey(header.api_key).name, header.client_id, timeout_ms)
        body = error_response(header.api_key, request, ErrorCode.REQUEST_TIMED_OUT,
                              f"no active controller to forward the request to within {timeout_ms} ms")
        return encode_response_chunks(header.api_key, header.api_version, header.correlation_id, body)

    def close(self) -> None:
        self.channel.close()


class AlterPartitionManager:
    def __init__(self, server) -> None:
        self.broker = server.broker
        self.channel = ControllerChannel(server, "alter-partition")
        self._in_flight: asyncio.Task | None = None

    def maybe_send(self, now: int) -> None:
        """One request at a time, as Kafka's AlterPartitionManager keeps one in flight: a
        controller that stopped answering costs one timeout, not one per partition."""
        if self._in_flight is None or self._in_flight.done():
            requests = self.broker.alter_partition_requests(now)
            if requests:
                self._in_flight = asyncio.create_task(self._send(requests))

    async def _send(self, requests: list[dict]) -> None:
        topics: dict[str, list] = {}
        for request in requests:
            topics.setdefault(request["topic_id"], []).append(request)
        body = {"broker_id": self.broker.config.node_id, "broker_epoch": self.broker.broker_epoch, "topics": [
            {"topic_id": uuid.UUID(topic_id), "partitions": [
                {"partition_index": r["partition"], "leader_epoch": r["leader_epoch"], "new_isr": r["new_isr"],
                 "leader_recovery_state": 0, "partition_epoch": r["partition_epoch"]} for r in partitions]}
            for topic_id, partitions in topics.items()]}
        try:
            response = await self.channel.call(ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSION, body)
        except (*PEER_ERRORS, KafkaError):
            return  # sent again after ALTER_PARTITION_RESEND_MS
        topic_of = {request["topic_id"]: request["topic"] for request in requests}
        for topic in response.topics:
            for partition in topic.partitions:
                error = ErrorCode(response.error_code or partition.error_code)
                if error != ErrorCode.NONE:
                    self.broker.alter_partition_failed(
                        TopicPartition(topic_of[str(topic.topic_id)], partition.partition_index), error)

    async def stop(self) -> None:
        if self._in_flight is not None:
            self._in_flight.cancel()
            await asyncio.gather(self._in_flight, return_exceptions=True)
        self.channel.close()


class AutoTopicCreationManager:
    def __init__(self, server) -> None:
        self.broker = server.broker
        self.channel = ControllerChannel(server, "topic-creation")
        self._creating: dict[str, asyncio.Task] = {}
        self._refused: dict[str, ErrorCode] = {}  # the last refusal logged, by topic: logged once per change

    def maybe_create(self) -> None:
        for name, (partitions, replication_factor, configs) in self.broker.wanted_internal_topics.items():
            if name not in self._creating:
                self._creating[name] = asyncio.create_task(self._create(name, partitions, replication_factor, configs))

    async def _create(self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str]) -> None:
        try:
            response = await self.channel.call(ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION, {
                "timeout_ms": 5000, "validate_only": False, "topics": [{
                    "name": name, "num_partitions": num_partitions, "replication_factor": replication_factor,
                    "assignments": [], "configs": [{"name": key, "value": value} for key, value in configs.items()]}]})
            answer = response.topics[0]
            if answer.error_code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                self.broker.wanted_internal_topics.pop(name, None)
                self._refused.pop(name, None)
            elif self._refused.get(name) != answer.error_code:
                self._refused[name] = ErrorCode(answer.error_code)
                log.warning("auto topic creation failed for %s with error %s: %s (asked again)",
                            name, ErrorCode(answer.error_code).name, answer.error_message)
        except (*PEER_ERRORS, KafkaError):
            pass  # asked again on a later tick
        finally:
            del self._creating[name]

    async def stop(self) -> None:
        for task in list(self._creating.values()):
            task.cancel()
        await asyncio.gather(*self._creating.values(), return_exceptions=True)
        self.channel.close()
