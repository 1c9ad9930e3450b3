"""The active controller's shell, as Kafka's QuorumController event loop with its ControllerApis:
one command at a time (`lock`), each decided from the applied metadata and answered once its
records are committed (reference/server/raft_driver.py).

Commands: the brokers' BrokerRegistration and BrokerHeartbeat (KIP-631) and AlterPartition
(KIP-497); admin requests, run here on the active controller or arriving forwarded from another
node inside an Envelope (KIP-590); and the controller's own periodic duties (`loop`): fence
brokers whose session expired, elect leaders for offline partitions and, when a leader balance
is due, preferred leaders. A command that reaches a node that is not (or no longer) the active
controller is answered NOT_CONTROLLER, and its sender asks the next one.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import struct
import uuid

from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.primitives import Reader, Writer
from reference.security.principal import KafkaPrincipal
from reference.security.session import Session
from reference.server.server import now_ms

log = logging.getLogger("kspec.controller")

CONTROLLER_TICK_INTERVAL_MS = 200
FRAME_SIZE = struct.Struct(">i")
PRINCIPAL_DATA_VERSION = 0  # Kafka's DefaultPrincipalData, as DefaultKafkaPrincipalBuilder serializes it


class QuorumController:
    def __init__(self, server) -> None:
        self.server = server
        self.broker = server.broker
        self.raft_driver = server.raft_driver
        self.lock = asyncio.Lock()

    async def loop(self) -> None:
        while True:
            await asyncio.sleep(CONTROLLER_TICK_INTERVAL_MS / 1000)
            if not self.broker.is_active_controller:
                continue
            async with self.lock:
                try:
                    await self.raft_driver.applied()
                    self.broker.controller_tick(now_ms())
                    await self.raft_driver.commit(self.broker.take_pending_records())
                except KafkaError as e:
                    log.info("controller tick: %s", e)

    async def _command(self, decide) -> ErrorCode:
        """Run `decide()` (which queues records) as the active controller and commit its records."""
        async with self.lock:
            if not self.broker.is_active_controller:
                return ErrorCode.NOT_CONTROLLER
            try:
                await self.raft_driver.applied()
                decide()
                await self.raft_driver.commit(self.broker.take_pending_records())
            except KafkaError as e:
                self.broker.take_pending_records()
                return ErrorCode(e.code)
        return ErrorCode.NONE

    async def run_as_controller(self, frame, session: Session) -> list | None:
        """An admin request on this node as the active controller: decided from the applied
        metadata, answered once its records are committed; NOT_CONTROLLER when it is not."""
        async with self.lock:
            if not self.broker.is_active_controller:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "not the active controller")
            await self.raft_driver.applied()
            chunks = await self.server.handle_as_broker(frame, session)
            await self.raft_driver.commit(self.broker.take_pending_records())
        return chunks

    # ------------------------------------------------------------ the brokers' RPCs (KIP-631, KIP-497)

    async def broker_registration(self, request) -> dict:
        listeners = {listener.name: [listener.host, listener.port] for listener in request.listeners}
        first = request.listeners[0] if request.listeners else None
        if first is None:
            return {"error_code": ErrorCode.INVALID_REQUEST, "broker_epoch": -1}
        error = await self._command(lambda: self.broker.register_broker(
            request.broker_id, str(request.incarnation_id), first.host, first.port, now_ms(), listeners))
        registered = self.broker.controller.brokers.get(request.broker_id)
        epoch = registered.broker_epoch if error == ErrorCode.NONE and registered is not None else -1
        return {"error_code": error, "broker_epoch": epoch}

    async def broker_heartbeat(self, request) -> dict:
        self.broker.note_heartbeat(request.broker_id, request.broker_epoch, now_ms())
        error = await self._command(lambda: self.broker.broker_heartbeat(
            request.broker_id, request.broker_epoch, request.want_shut_down, now_ms()))
        registered = self.broker.controller.brokers.get(request.broker_id)
        return {"error_code": error, "is_caught_up": error == ErrorCode.NONE,
                "is_fenced": registered is None or registered.fenced, "should_shut_down": False}

    async def alter_partition(self, request, version: int) -> dict:
        """Each partition's ISR change decided in turn, all committed together."""
        answers: dict[tuple, ErrorCode] = {}

        def decide() -> None:
            for topic in request.topics:
                for partition in topic.partitions:
                    new_isr = (list(partition.new_isr) if version < 3
                               else [state.broker_id for state in partition.new_isr_with_epochs])
                    try:
                        self.broker.alter_partition({
                            "broker_id": request.broker_id, "broker_epoch": request.broker_epoch,
                            "topic_id": str(topic.topic_id), "partition": partition.partition_index,
                            "leader_epoch": partition.leader_epoch, "partition_epoch": partition.partition_epoch,
                            "new_isr": new_isr})
                        answers[topic.topic_id, partition.partition_index] = ErrorCode.NONE
                    except KafkaError as e:
                        answers[topic.topic_id, partition.partition_index] = ErrorCode(e.code)

        error = await self._command(decide)
        topics = []
        for topic in request.topics:
            partitions = []
            for partition in topic.partitions:
                partition_error = error if error != ErrorCode.NONE else answers[topic.topic_id, partition.partition_index]
                registration = self._registration(topic.topic_id, partition.partition_index)
                entry = {"partition_index": partition.partition_index, "error_code": partition_error}
                if partition_error == ErrorCode.NONE and registration is not None:
                    entry.update(leader_id=registration.leader, leader_epoch=registration.leader_epoch,
                                 isr=list(registration.isr), partition_epoch=registration.partition_epoch)
                partitions.append(entry)
            topics.append({"topic_id": topic.topic_id, "partitions": partitions})
        return {"error_code": ErrorCode.NONE, "topics": topics}

    def _registration(self, topic_id: uuid.UUID, index: int):
        topic = self.broker.controller.topics.get(topic_id)
        return topic.partitions.get(index) if topic is not None else None

    # ------------------------------------------------------------ forwarded admin requests (KIP-590)

    async def envelope(self, request, session: Session) -> dict:
        """A client's request forwarded by another node, run as that client (its principal and
        address travel in the Envelope); its response goes back inside the EnvelopeResponse."""
        try:
            client = Session(session.listener, socket.inet_ntop(_family(request.client_host_address),
                                                                bytes(request.client_host_address)),
                             read_principal(bytes(request.request_principal)))
        except ValueError as e:
            log.warning("an envelope from %s does not decode: %s", session.client_host, e)
            return {"error_code": ErrorCode.INVALID_REQUEST, "response_data": None}
        try:
            chunks = await self.run_as_controller(bytes(request.request_data), client)
        except KafkaError as e:  # NOT_CONTROLLER, or records not committed in time (REQUEST_TIMED_OUT)
            return {"error_code": e.code, "response_data": None}
        frame = b"".join(bytes(chunk) for chunk in chunks or ())
        return {"error_code": ErrorCode.NONE, "response_data": frame[FRAME_SIZE.size:] if frame else None}


def _family(address) -> int:
    return socket.AF_INET if len(address) == 4 else socket.AF_INET6


def client_host_address(host: str) -> bytes:
    """An Envelope's ClientHostAddress: the client's IP address as its 4 or 16 bytes."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.inet_pton(family, host)


def write_principal(principal: KafkaPrincipal) -> bytes:
    """An Envelope's RequestPrincipal as Kafka's DefaultKafkaPrincipalBuilder writes it: the
    version (int16), then DefaultPrincipalData (Type, Name, TokenAuthenticated; flexible)."""
    writer = Writer()
    writer.int16(PRINCIPAL_DATA_VERSION)
    writer.compact_string(principal.principal_type)
    writer.compact_string(principal.name)
    writer.boolean(False)
    writer.tagged_fields([])
    return writer.getvalue()


def read_principal(data: bytes) -> KafkaPrincipal:
    reader = Reader(data)
    if reader.int16() != PRINCIPAL_DATA_VERSION:
        raise ValueError("unknown DefaultPrincipalData version")
    principal_type, name = reader.compact_string(), reader.compact_string()
    reader.boolean()
    reader.tagged_fields()
    return KafkaPrincipal(principal_type, name)
