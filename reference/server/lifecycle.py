"""A broker's registration and session with the active controller, as Kafka's
BrokerLifecycleManager (KIP-631): BrokerRegistration until this incarnation is registered (the
metadata log says so: its RegisterBrokerRecord is committed), then a BrokerHeartbeat every
broker.heartbeat.interval.ms, which keeps the broker's session alive and unfences it; on
shutdown, a last heartbeat with WantShutDown (a controlled shutdown: the controller moves this
broker's leaderships away while it still serves).
"""
from __future__ import annotations

import asyncio
import uuid

from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import KafkaError
from reference.server.node_to_controller import ControllerChannel
from reference.server.peers import PEER_ERRORS

REGISTRATION_RETRY_MS = 200
CONTROLLED_SHUTDOWN_WAIT_S = 2.0
BROKER_REGISTRATION_VERSION = 4
BROKER_HEARTBEAT_VERSION = 1
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}  # Kafka's SecurityProtocol ids


class BrokerLifecycleManager:
    def __init__(self, server) -> None:
        self.server = server
        self.broker = server.broker
        self.channel = ControllerChannel(server, "lifecycle")
        self._stopping = False

    async def loop(self) -> None:
        config = self.broker.config
        while not self._stopping:  # shut_down() sends the last heartbeat
            try:
                if self.broker.broker_epoch < 0:
                    await self.channel.call(ApiKey.BROKER_REGISTRATION, BROKER_REGISTRATION_VERSION,
                                            self._registration())
                    await asyncio.sleep(REGISTRATION_RETRY_MS / 1000)
                    continue
                await self._heartbeat(want_shut_down=False)
            except (*PEER_ERRORS, KafkaError):
                pass
            await asyncio.sleep(config.broker_heartbeat_interval_ms / 1000)

    def _registration(self) -> dict:
        """Every broker listener with its advertised address (a controller listener is not a
        broker's endpoint, as in Kafka); the first is the address Metadata names by default."""
        config = self.broker.config
        listeners = [{"name": listener.name, "host": listener.advertised[0], "port": listener.advertised[1],
                      "security_protocol": SECURITY_PROTOCOL_IDS[listener.protocol]}
                     for listener in self.server.listeners if listener.name not in self.server.controller_listener_names]
        if self.server.listeners[0].name == listeners[0]["name"]:
            listeners[0]["host"], listeners[0]["port"] = config.advertised
        return {"broker_id": config.node_id, "cluster_id": self.broker.cluster_id,
                "incarnation_id": uuid.UUID(self.broker.incarnation_id), "listeners": listeners, "features": [],
                "rack": None, "log_dirs": [], "previous_broker_epoch": -1}

    async def _heartbeat(self, want_shut_down: bool):
        return await self.channel.call(ApiKey.BROKER_HEARTBEAT, BROKER_HEARTBEAT_VERSION, {
            "broker_id": self.broker.config.node_id, "broker_epoch": self.broker.broker_epoch,
            "current_metadata_offset": self.broker.raft.applied_offset, "want_fence": False,
            "want_shut_down": want_shut_down})

    async def shut_down(self) -> None:
        """A controlled shutdown first: leaderships move away while this node still serves."""
        self._stopping = True
        if self.broker.broker_epoch >= 0:
            try:
                await asyncio.wait_for(self._heartbeat(want_shut_down=True), CONTROLLED_SHUTDOWN_WAIT_S)
            except (*PEER_ERRORS, KafkaError):
                pass

    def close(self) -> None:
        self.channel.close()
