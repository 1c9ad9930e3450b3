"""The active controller's commands (Kafka's QuorumController): broker registrations and
heartbeats, AlterPartition, the periodic fencing and elections, and the admin requests
forwarded to it (KIP-590). Each turns into metadata records, which are queued only once they
replay on a copy of the state they will meet (`queue`); the shell proposes the queue to the
quorum (`take_pending_records`) and answers once the records are committed.
"""
from __future__ import annotations

import copy
import logging
import uuid
from typing import Protocol

from reference.config import BrokerConfig
from reference.controller.state import GROUP_RESOURCE, TOPIC_RESOURCE, ControllerState, ElectionType
from reference.node.base import PARTITIONS_PER_TOPIC_MAX, check_topic_name
from reference.node.broker import PRODUCER_ID_BLOCK_SIZE
from reference.node.metadata import MetadataImage, TopicImage
from reference.node.quorum import DurableRaftNode
from reference.node.replay import replay
from reference.protocol.errors import ErrorCode, KafkaError
from reference.storage import LogConfig

log = logging.getLogger("kspec.cluster")


class ControllerNode(Protocol):
    """What the commands read of the node they run on (reference/node/cluster.py)."""
    config: BrokerConfig
    controller: ControllerState
    image: MetadataImage
    raft: DurableRaftNode

    @property
    def is_active_controller(self) -> bool: ...
    @property
    def live_broker_count(self) -> int: ...
    def topic(self, name: str) -> TopicImage: ...
    def log_config(self, overrides: dict[str, str]) -> LogConfig: ...
    def create_internal_topic(self, name: str, num_partitions: int, replication_factor: int,
                              configs: dict[str, str], now_ms: int) -> None: ...


class ControllerCommands:
    def __init__(self, node: ControllerNode) -> None:
        self.node = node
        self.pending_records: list[dict] = []  # the active controller's records for the shell to commit
        self.producer_id_next = 0

    def register_broker(self, broker_id: int, incarnation_id: str, host: str, port: int, now_ms: int,
                        listeners: dict[str, list] | None = None) -> int:
        """BrokerRegistration on the active controller; returns the records' count queued."""
        records = self.node.controller.register_broker(broker_id, incarnation_id, host, port, now_ms, listeners)
        self.queue(records)
        return len(records)

    def note_heartbeat(self, broker_id: int, broker_epoch: int, now_ms: int) -> None:
        """A heartbeat reached the active controller; it is decided later, in turn."""
        if self.node.is_active_controller:
            self.node.controller.note_contact(broker_id, broker_epoch, now_ms)

    def broker_heartbeat(self, broker_id: int, broker_epoch: int, want_shutdown: bool, now_ms: int) -> None:
        self.queue(self.node.controller.heartbeat(broker_id, broker_epoch, now_ms, want_shutdown))

    def alter_partition(self, request: dict) -> None:
        self.queue(self.node.controller.alter_partition(
            request["broker_id"], request["broker_epoch"], uuid.UUID(request["topic_id"]), request["partition"],
            request["leader_epoch"], request["partition_epoch"], request["new_isr"]))

    def controller_tick(self, now_ms: int) -> None:
        """Fence a broker whose session expired, else elect leaders for offline partitions, else
        balance leaders when a balance is due."""
        self.queue(self.node.controller.fence_expired_brokers(now_ms) or self.node.controller.elect_leaders(preferred=False)
                    or self.node.controller.balance_partition_leaders(now_ms))

    def elect_leaders(self, wanted: dict[str, list[int]] | None,
                      election_type: ElectionType) -> dict[str, dict[int, ErrorCode]]:
        """ElectLeaders on the active controller: each partition's answer; the elections' records
        are queued, so the answer goes out once they are committed."""
        results, records = self.node.controller.elect_requested_leaders(wanted, election_type)
        self.queue(records)
        return results

    def queue(self, records: list[dict]) -> None:
        """Queue a command's records for the quorum once they replay on a copy of the state they
        will meet (applied, then proposed, then queued before them). A record that fails there
        would stop every node that replays it (halt_on_replay_failure), so the command is refused."""
        if not records:
            return
        controller, image = copy.deepcopy((self.node.controller, self.node.image))
        for record in [*self.records_not_yet_applied(), *records]:
            try:
                replay(controller, image, record)
            except Exception as error:  # whatever replay would raise on every node
                log.error("the active controller refuses a record that would not replay: %s", record, exc_info=True)
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                 f"record {record} would not replay: {error!r}") from error
        self.pending_records += records

    def records_not_yet_applied(self) -> list[dict]:
        """This controller's records that the state it decides from lacks: proposed to the quorum
        and not yet applied, then pending."""
        unapplied = self.node.raft.log[self.node.raft.applied_offset - self.node.raft.log_start_offset:]
        return [*(entry.record for entry in unapplied if entry.record["type"] != "LeaderChangeMessage"),
                *self.pending_records]

    def take_pending_records(self) -> list[dict]:
        records, self.pending_records = self.pending_records, []
        return records

    # -- admin requests (forwarded to the active controller, KIP-590) ----------------

    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     configs: dict[str, str], validate_only: bool, now_ms: int) -> TopicImage:
        """CreateTopics on the active controller. Elsewhere (Metadata's auto-creation on any node)
        the topic is asked of the active controller, and the asker hears LEADER_NOT_AVAILABLE
        meanwhile, as from Kafka's AutoTopicCreationManager (KIP-590)."""
        check_topic_name(name)
        if not self.node.is_active_controller:
            self.node.create_internal_topic(name, num_partitions, replication_factor, configs, now_ms)
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"topic {name!r} is being created by the controller")
        if name in self._topic_names_not_yet_applied():
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} is being created")
        num_partitions = self.node.config.num_partitions if num_partitions == -1 else num_partitions
        if replication_factor == -1:  # default.replication.factor, capped by the brokers alive to hold the replicas
            replication_factor = max(1, min(self.node.config.default_replication_factor, self.node.live_broker_count))
        if not 1 <= num_partitions <= PARTITIONS_PER_TOPIC_MAX:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"num_partitions {num_partitions}")
        self.node.log_config(configs)  # validates
        records = self.node.controller.create_topic(name, num_partitions, replication_factor, configs)
        if not validate_only:
            self.queue(records)
        return TopicImage(name, uuid.UUID(records[0]["topic_id"]), num_partitions, dict(configs))

    def _topic_names_not_yet_applied(self) -> set[str]:
        """Topics in this controller's records that are not applied yet: pending, or proposed to the
        quorum and not yet committed. The state the controller decides from lacks them, and a second
        ask for one of them would otherwise commit its TopicRecord twice."""
        return {record["name"] for record in self.records_not_yet_applied() if record["type"] == "TopicRecord"}

    def delete_topic(self, name: str, now_ms: int) -> None:
        topic = self.node.topic(name)
        self.queue([{"type": "RemoveTopicRecord", "topic_id": str(topic.topic_id)}])

    def create_partitions(self, name: str, count: int, validate_only: bool, now_ms: int) -> None:
        topic = self.node.topic(name)
        if count <= topic.partition_count:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                             f"topic has {topic.partition_count} partitions; the new count must be larger")
        if count > PARTITIONS_PER_TOPIC_MAX:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"count {count} > {PARTITIONS_PER_TOPIC_MAX}")
        existing = self.node.controller.topics[topic.topic_id].partitions
        replication_factor = len(existing[0].replicas)
        brokers = self.node.controller.unfenced_broker_ids
        if replication_factor > len(brokers):
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, f"{len(brokers)} unfenced broker(s)")
        records = []
        for index in range(topic.partition_count, count):
            replicas = [brokers[(index + i) % len(brokers)] for i in range(replication_factor)]
            records.append({"type": "PartitionRecord", "topic_id": str(topic.topic_id), "partition_id": index,
                            "replicas": replicas, "isr": replicas, "leader": replicas[0], "leader_epoch": 0,
                            "partition_epoch": 0})
        if not validate_only:
            self.queue(records)

    def alter_topic_configs(self, name: str, configs: dict[str, str | None], validate_only: bool,
                            now_ms: int) -> None:
        topic = self.node.topic(name)
        updated = {key: value for key, value in {**topic.configs, **configs}.items() if value is not None}
        self.node.log_config(updated)
        if not validate_only:
            self.queue([{"type": "ConfigRecord", "resource_type": TOPIC_RESOURCE, "resource_name": name,
                          "name": key, "value": value} for key, value in sorted(configs.items())])

    def alter_group_configs(self, group_id: str, configs: dict[str, str | None], validate_only: bool,
                            now_ms: int) -> None:
        if not validate_only:
            self.queue([{"type": "ConfigRecord", "resource_type": GROUP_RESOURCE, "resource_name": group_id,
                          "name": key, "value": value} for key, value in sorted(configs.items())])

    def allocate_producer_id(self, now_ms: int) -> int:
        if self.producer_id_next >= self.node.image.next_producer_id + sum(
                PRODUCER_ID_BLOCK_SIZE for r in self.pending_records if r["type"] == "ProducerIdsRecord"):
            block_end = max(self.producer_id_next, self.node.image.next_producer_id) + PRODUCER_ID_BLOCK_SIZE
            self.producer_id_next = block_end - PRODUCER_ID_BLOCK_SIZE
            self.queue([{"type": "ProducerIdsRecord", "node_id": self.node.config.node_id,
                          "next_producer_id": block_end}])
        producer_id = self.producer_id_next
        self.producer_id_next += 1
        return producer_id


    def commit_security_records(self, records: list[dict], now_ms: int) -> None:
        """ACL and SCRAM changes on the active controller (CreateAcls, DeleteAcls and
        AlterUserScramCredentials are forwarded to it): committed like every command's records."""
        if not self.node.is_active_controller:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "not the active controller")
        self.queue(records)
