"""One node of a replicated kspec cluster, in any of KRaft's process.roles (KIP-500, KIP-631).

- broker,controller (combined mode): a voter of the controller quorum (DurableRaftNode over
  `__cluster_metadata-0`) and a broker.
- controller: a voter only. It may become the active controller; it never registers as a
  broker, so it hosts no partitions and no coordinators, and Metadata never lists it.
- broker: an observer of the metadata log (not in controller.quorum.voters): it replicates
  and replays the log but has no vote, and is never the active controller.

Everything it knows of the cluster comes from replaying the committed metadata
log, in order, into two views: ControllerState (brokers, partitions with leaders, ISRs and
epochs; what the active controller decides from) and MetadataImage (topics, configs and
producer-id blocks; what the single-node handlers read). Each partition with a replica here
is a PartitionReplica over its Log, told of every change of its partition record.

While it is the Raft leader (only a node with the controller role can be) and has committed an
entry of its own epoch (so it has applied everything before), the node is the active
controller: admin requests, broker registrations and heartbeats, and AlterPartition turn into
records (`pending_records`) that the shell proposes to the quorum and waits to see committed
before it answers.

A (re)started broker acts on its partitions only once its own registration is committed: the
registration fences its previous incarnation, which moves that incarnation's leaderships
away, so a broker that lost the tail of its log never serves as the leader it was.

Every node must replay every committed record, or its view diverges from the quorum's for
good. So the active controller replays a command's records on a copy of its state before it
queues them, and refuses the command when one would not replay; and a node whose replay of a
committed record fails anyway logs the record and stops the process at once, as Kafka's
controller does through its fatal fault handler (ProcessTerminatingFaultHandler).

Sans-IO: no sockets and no clock; the shell (reference/server/cluster.py and the components it
builds) moves messages, as Kafka's RPCs.
"""
from __future__ import annotations

import base64
import copy
import hashlib
import logging
import os
import uuid

from reference.config import BrokerConfig, parse_voters
from reference.controller.raft import RaftConfig, RaftRole
from reference.controller.state import GROUP_RESOURCE, NO_LEADER, TOPIC_RESOURCE, ControllerState, ElectionType
from reference.node.broker import METADATA_PARTITION_DIR, PRODUCER_ID_BLOCK_SIZE, Broker, TopicPartition, check_topic_name
from reference.node.metadata import MetadataImage, TopicImage
from reference.node.quorum import DurableRaftNode
from reference.protocol.api_keys import ApiKey
from reference.protocol.api_versions import (
    CLUSTER_ONLY_API_VERSIONS,
    CONTROLLER_LISTENER_APIS,
    INTER_NODE_API_VERSIONS,
    SUPPORTED_API_VERSIONS,
)
from reference.protocol.errors import ErrorCode, KafkaError
from reference.security.inter_node import controller_listener_names
from reference.security.records import RECORD_TYPES as SECURITY_RECORD_TYPES
from reference.replication import (
    AlterPartitionRequest,
    EpochEndOffsetRequest,
    LeaderEpochCache,
    PartitionChange,
    PartitionReplica,
    ReplicaConfig,
    ReplicaFetch,
    ReplicationBugs,
    Role,
)
from reference.storage import AppendOrigin, Log
from reference.storage import cleaner
from reference.storage.atomic import replace_file
from reference.storage.log_dir_failure import LogDirFailureChannel

# What a controller-only node (process.roles=controller) answers outside the quorum.
CONTROLLER_CLIENT_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.DESCRIBE_QUORUM})
# Records for the MetadataImage only (ControllerState never sees them), and those for both.
IMAGE_ONLY_RECORD_TYPES = {"ProducerIdsRecord", *SECURITY_RECORD_TYPES}
IMAGE_RECORD_TYPES = {"TopicRecord", "PartitionRecord", "ConfigRecord", "RemoveTopicRecord", *IMAGE_ONLY_RECORD_TYPES}
METADATA_REPLAY_FAILED_EXIT_STATUS = 1  # Kafka's ProcessTerminatingFaultHandler halts with 1
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
ALTER_PARTITION_RESEND_MS = 2000  # a proposal nobody answered is sent again (e.g. to a new controller)

log = logging.getLogger("kspec.cluster")


def replay(controller: ControllerState, image: MetadataImage, record: dict) -> None:
    """One metadata record into the node's two views; raises when the record contradicts them."""
    kind = record["type"]
    if kind not in IMAGE_ONLY_RECORD_TYPES:
        controller.apply(record)
    if kind in IMAGE_RECORD_TYPES:
        image.apply(record)


def halt_on_replay_failure(offset: int, record: dict) -> None:
    """The last line of defence: a node that cannot replay a committed record stops, loudly,
    instead of serving from a view that lacks it (and the rest of its batch) from now on."""
    log.critical("metadata record at offset %d failed to replay; stopping this node: %s", offset, record,
                 exc_info=True)
    logging.shutdown()  # flush the log before the process is gone
    os._exit(METADATA_REPLAY_FAILED_EXIT_STATUS)  # no shutdown steps: they would act on the diverged view


class ClusterBroker(Broker):
    def __init__(self, config: BrokerConfig, now_ms: int) -> None:
        assert config.log_dirs and config.controller_quorum_voters
        self.log_dir_failures = LogDirFailureChannel()
        self.config = config
        self.data_dir = config.log_dirs
        os.makedirs(self.data_dir, exist_ok=True)
        self.voters = parse_voters(config.controller_quorum_voters)
        assert config.is_controller == (config.node_id in self.voters), "controllers are the voters (config.check)"
        self.cluster_id = self._load_meta_properties()
        self.raft = DurableRaftNode.open(
            os.path.join(self.data_dir, METADATA_PARTITION_DIR), config.node_id, tuple(sorted(self.voters)),
            RaftConfig(config.controller_quorum_election_timeout_ms, config.controller_quorum_fetch_timeout_ms),
            now_ms)
        self.controller = ControllerState(config.broker_session_timeout_ms, config.auto_leader_rebalance_enable,
                                          config.leader_imbalance_check_interval_seconds * 1000)
        self.image = MetadataImage()
        self.partitions: dict[TopicPartition, PartitionReplica] = {}
        self.incarnation_id = str(uuid.uuid4())
        self.registered = False  # our RegisterBrokerRecord is committed
        # Clients are served once this incarnation has replayed the metadata log up to its own
        # registration and been unfenced (KIP-631); until then its view may be a stale one that
        # names this node the leader of partitions that moved while it was down.
        self.serving_clients = False
        self.pending_records: list[dict] = []  # the active controller's records for the shell to commit
        # topics for the shell to create through the active controller: internal ones, and auto-created ones
        self.wanted_internal_topics: dict[str, tuple[int, int, dict[str, str]]] = {}
        self.appended: set[TopicPartition] = set()
        self.changed: set[TopicPartition] = set()  # HW or role moved: wake acks=all waiters
        self._dirty: set[TopicPartition] = set()
        self._active_epoch = -1  # the Raft epoch in which this node became a ready active controller
        self._producer_id_next = 0
        self._last_retention_check_ms = now_ms
        self._last_cleaner_run_ms = now_ms
        self._last_checkpoint_ms = now_ms
        self._last_flush_ms: dict[TopicPartition, int] = {}
        self._alter_partition_sent_ms: dict[TopicPartition, tuple[AlterPartitionRequest, int]] = {}
        self._checkpointed_hw = self._read_hw_checkpoint()
        self.bugs = ReplicationBugs(config.kspec_bug_truncation, config.kspec_bug_ack_before_isr,
                                    config.kspec_bug_count_fenced_follower_into_hw, config.kspec_bug_read_above_hw)

    def _new_cluster_id(self) -> str:
        # Kafka's nodes get their cluster id from `kafka-storage format`; kspec nodes derive it from
        # the voters list, so every node of one launch agrees without a format step.
        digest = hashlib.sha256(self.config.controller_quorum_voters.encode()).digest()[:16]
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    # ------------------------------------------------------------ the controller quorum

    def api_versions(self) -> dict:
        """A single node's table plus what only a quorum member serves (DescribeQuorum). All of
        it is handled on the active controller too, in requests forwarded to it (KIP-590)."""
        return {**SUPPORTED_API_VERSIONS, **CLUSTER_ONLY_API_VERSIONS}

    def advertised_api_versions(self, listener: str = "") -> dict:
        """A controller listener (controller.listener.names) lists the controller's APIs and the RPCs
        between nodes, as Kafka's does; a controller-only node's other listeners just what it
        answers clients; a broker's listeners no RPC between nodes."""
        table = self.api_versions()
        if listener in controller_listener_names(self.config.security_properties):
            return {**{key: table[key] for key in CONTROLLER_LISTENER_APIS if key in table}, **INTER_NODE_API_VERSIONS}
        return table if self.config.is_broker else {key: table[key] for key in CONTROLLER_CLIENT_APIS}

    @property
    def active_controller_id(self) -> int:
        """The Raft leader: where registrations, heartbeats, AlterPartition and admin requests go."""
        return self.raft.leader_id

    @property
    def controller_id(self) -> int:
        """The ControllerId clients see in Metadata and DescribeCluster. In combined mode, the
        active controller. With separate controllers clients cannot reach a controller, so, as
        Kafka's KRaft brokers do, a live broker (this one, once live), which forwards the admin
        requests clients send it (KIP-590)."""
        if self.config.is_controller:
            return self.active_controller_id
        live = self.controller.unfenced_broker_ids
        if self.broker_epoch >= 0 and self.config.node_id in live:
            return self.config.node_id
        return live[0] if live else NO_LEADER

    @property
    def is_active_controller(self) -> bool:
        return self.raft.role is RaftRole.LEADER and self._active_epoch == self.raft.epoch

    def apply_committed(self, now_ms: int) -> None:
        """Replay newly committed metadata records, then bring the touched partitions up to date."""
        for offset, entry in self.raft.take_committed():
            if entry.record["type"] == "LeaderChangeMessage":
                if self.raft.role is RaftRole.LEADER and entry.epoch == self.raft.epoch:
                    self._active_epoch = self.raft.epoch
                    log.info("node %d is the active controller (epoch %d)", self.config.node_id, self.raft.epoch)
                    self._producer_id_next = self.image.next_producer_id  # never reuse a predecessor's ids
                    # Heartbeats are not in the log: a new controller starts every broker's session
                    # now, so a broker that died with the previous controller is fenced in time.
                    self.controller.last_heartbeat_ms = dict.fromkeys(self.controller.brokers, now_ms)
                    self.controller.leader_balance_due_ms = None  # a predecessor's schedule is not ours
                continue
            try:
                self._apply(entry.record)
            except Exception:  # any exception: the view is now unknown
                halt_on_replay_failure(offset, entry.record)
        if self.raft.role is not RaftRole.LEADER:
            self._active_epoch = -1
            self.pending_records.clear()  # decided from a state a later controller may have changed
        if not self.serving_clients and self.config.is_broker and self.own_broker_live:
            self.serving_clients = True
            log.info("broker %d caught up with the metadata log and unfenced: serving clients", self.config.node_id)
        if self.registered:
            for topic_partition in sorted(self._dirty):
                self._sync_partition(topic_partition, now_ms)
            self._dirty.clear()

    def _apply(self, record: dict) -> None:
        kind = record["type"]
        if kind == "RemoveTopicRecord":
            topic = self.controller.topics[uuid.UUID(record["topic_id"])]
            for index in topic.partitions:
                replica = self.partitions.pop(TopicPartition(topic.name, index), None)
                if replica is not None:
                    replica.log.delete()
        replay(self.controller, self.image, record)
        if kind == "RegisterBrokerRecord" and record["incarnation_id"] == self.incarnation_id:
            self.registered = True
            self._dirty |= {TopicPartition(topic.name, index) for topic in self.controller.topics.values()
                            for index in topic.partitions}
        elif kind in ("PartitionRecord", "PartitionChangeRecord"):
            topic = self.controller.topics[uuid.UUID(record["topic_id"])]
            self._dirty.add(TopicPartition(topic.name, record["partition_id"]))
        elif (kind == "ConfigRecord" and record["resource_type"] == TOPIC_RESOURCE
              and record["resource_name"] in self.image.topics_by_name):
            topic = self.image.topics_by_name[record["resource_name"]]
            self._dirty |= {TopicPartition(topic.name, index) for index in range(topic.partition_count)}

    def _sync_partition(self, topic_partition: TopicPartition, now_ms: int) -> None:
        topic_id = self.controller.topic_ids.get(topic_partition.topic)
        if topic_id is None:
            return
        registration = self.controller.topics[topic_id].partitions.get(topic_partition.partition)
        if registration is None or self.config.node_id not in registration.replicas:
            return
        topic = self.image.topics_by_name[topic_partition.topic]
        log_config = self.log_config(topic.configs)
        replica_config = ReplicaConfig(self.config.replica_lag_time_max_ms, log_config.min_insync_replicas, self.bugs)
        replica = self.partitions.get(topic_partition)
        if replica is None:
            path = os.path.join(self.data_dir, str(topic_partition))
            log = Log(path, log_config, now_ms=now_ms)
            replica = PartitionReplica(self.config.node_id, log, LeaderEpochCache.in_dir(path), replica_config,
                                       self._checkpointed_hw.get(topic_partition, 0))
            replica.topic_id = topic_id
            self.partitions[topic_partition] = replica
        replica.log.config, replica.config = log_config, replica_config
        replica.apply_partition_change(PartitionChange(
            registration.leader, registration.leader_epoch, registration.partition_epoch,
            tuple(registration.replicas), tuple(registration.isr)), now_ms)
        self.changed.add(topic_partition)

    # ------------------------------------------------------------ controller commands

    def register_broker(self, broker_id: int, incarnation_id: str, host: str, port: int, now_ms: int,
                        listeners: dict[str, list] | None = None) -> int:
        """BrokerRegistration on the active controller; returns the records' count queued."""
        records = self.controller.register_broker(broker_id, incarnation_id, host, port, now_ms, listeners)
        self._queue(records)
        return len(records)

    def note_heartbeat(self, broker_id: int, broker_epoch: int, now_ms: int) -> None:
        """A heartbeat reached the active controller; it is decided later, in turn."""
        if self.is_active_controller:
            self.controller.note_contact(broker_id, broker_epoch, now_ms)

    def broker_heartbeat(self, broker_id: int, broker_epoch: int, want_shutdown: bool, now_ms: int) -> None:
        self._queue(self.controller.heartbeat(broker_id, broker_epoch, now_ms, want_shutdown))

    def alter_partition(self, request: dict) -> None:
        self._queue(self.controller.alter_partition(
            request["broker_id"], request["broker_epoch"], uuid.UUID(request["topic_id"]), request["partition"],
            request["leader_epoch"], request["partition_epoch"], request["new_isr"]))

    def controller_tick(self, now_ms: int) -> None:
        """Fence a broker whose session expired, else elect leaders for offline partitions, else
        balance leaders when a balance is due."""
        self._queue(self.controller.fence_expired_brokers(now_ms) or self.controller.elect_leaders(preferred=False)
                    or self.controller.balance_partition_leaders(now_ms))

    def elect_leaders(self, wanted: dict[str, list[int]] | None,
                      election_type: ElectionType) -> dict[str, dict[int, ErrorCode]]:
        """ElectLeaders on the active controller: each partition's answer; the elections' records
        are queued, so the answer goes out once they are committed."""
        results, records = self.controller.elect_requested_leaders(wanted, election_type)
        self._queue(records)
        return results

    def _queue(self, records: list[dict]) -> None:
        """Queue a command's records for the quorum once they replay on a copy of the state they
        will meet (applied, then proposed, then queued before them). A record that fails there
        would stop every node that replays it (halt_on_replay_failure), so the command is refused."""
        if not records:
            return
        controller, image = copy.deepcopy((self.controller, self.image))
        for record in [*self._records_not_yet_applied(), *records]:
            try:
                replay(controller, image, record)
            except Exception as error:  # whatever replay would raise on every node
                log.error("the active controller refuses a record that would not replay: %s", record, exc_info=True)
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                 f"record {record} would not replay: {error!r}") from error
        self.pending_records += records

    def _records_not_yet_applied(self) -> list[dict]:
        """This controller's records that the state it decides from lacks: proposed to the quorum
        and not yet applied, then pending."""
        unapplied = self.raft.log[self.raft.applied_offset - self.raft.log_start_offset:]
        return [*(entry.record for entry in unapplied if entry.record["type"] != "LeaderChangeMessage"),
                *self.pending_records]

    def take_pending_records(self) -> list[dict]:
        records, self.pending_records = self.pending_records, []
        return records

    # ------------------------------------------------------------ admin, on the active controller

    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     configs: dict[str, str], validate_only: bool, now_ms: int) -> TopicImage:
        """CreateTopics on the active controller. Elsewhere (Metadata's auto-creation on any node)
        the topic is asked of the active controller, and the asker hears LEADER_NOT_AVAILABLE
        meanwhile, as from Kafka's AutoTopicCreationManager (KIP-590)."""
        check_topic_name(name)
        if not self.is_active_controller:
            self.create_internal_topic(name, num_partitions, replication_factor, configs, now_ms)
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"topic {name!r} is being created by the controller")
        if name in self._topic_names_not_yet_applied():
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} is being created")
        num_partitions = self.config.num_partitions if num_partitions == -1 else num_partitions
        if replication_factor == -1:  # default.replication.factor, capped by the brokers alive to hold the replicas
            replication_factor = max(1, min(self.config.default_replication_factor, self.live_broker_count))
        if not 1 <= num_partitions:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"num_partitions {num_partitions}")
        self.log_config(configs)  # validates
        records = self.controller.create_topic(name, num_partitions, replication_factor, configs)
        if not validate_only:
            self._queue(records)
        return TopicImage(name, uuid.UUID(records[0]["topic_id"]), num_partitions, dict(configs))

    def _topic_names_not_yet_applied(self) -> set[str]:
        """Topics in this controller's records that are not applied yet: pending, or proposed to the
        quorum and not yet committed. The state the controller decides from lacks them, and a second
        ask for one of them would otherwise commit its TopicRecord twice."""
        return {record["name"] for record in self._records_not_yet_applied() if record["type"] == "TopicRecord"}

    def delete_topic(self, name: str, now_ms: int) -> None:
        topic = self.topic(name)
        self._queue([{"type": "RemoveTopicRecord", "topic_id": str(topic.topic_id)}])

    def create_partitions(self, name: str, count: int, validate_only: bool, now_ms: int) -> None:
        topic = self.topic(name)
        if count <= topic.partition_count:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                             f"topic has {topic.partition_count} partitions; the new count must be larger")
        existing = self.controller.topics[topic.topic_id].partitions
        replication_factor = len(existing[0].replicas)
        brokers = self.controller.unfenced_broker_ids
        if replication_factor > len(brokers):
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, f"{len(brokers)} unfenced broker(s)")
        records = []
        for index in range(topic.partition_count, count):
            replicas = [brokers[(index + i) % len(brokers)] for i in range(replication_factor)]
            records.append({"type": "PartitionRecord", "topic_id": str(topic.topic_id), "partition_id": index,
                            "replicas": replicas, "isr": replicas, "leader": replicas[0], "leader_epoch": 0,
                            "partition_epoch": 0})
        if not validate_only:
            self._queue(records)

    def alter_topic_configs(self, name: str, configs: dict[str, str | None], validate_only: bool,
                            now_ms: int) -> None:
        topic = self.topic(name)
        updated = {key: value for key, value in {**topic.configs, **configs}.items() if value is not None}
        self.log_config(updated)
        if not validate_only:
            self._queue([{"type": "ConfigRecord", "resource_type": TOPIC_RESOURCE, "resource_name": name,
                          "name": key, "value": value} for key, value in sorted(configs.items())])

    def alter_group_configs(self, group_id: str, configs: dict[str, str | None], validate_only: bool,
                            now_ms: int) -> None:
        if not validate_only:
            self._queue([{"type": "ConfigRecord", "resource_type": GROUP_RESOURCE, "resource_name": group_id,
                          "name": key, "value": value} for key, value in sorted(configs.items())])

    def allocate_producer_id(self, now_ms: int) -> int:
        if self._producer_id_next >= self.image.next_producer_id + sum(
                PRODUCER_ID_BLOCK_SIZE for r in self.pending_records if r["type"] == "ProducerIdsRecord"):
            block_end = max(self._producer_id_next, self.image.next_producer_id) + PRODUCER_ID_BLOCK_SIZE
            self._producer_id_next = block_end - PRODUCER_ID_BLOCK_SIZE
            self._queue([{"type": "ProducerIdsRecord", "node_id": self.config.node_id,
                          "next_producer_id": block_end}])
        producer_id = self._producer_id_next
        self._producer_id_next += 1
        return producer_id

    @property
    def own_broker_live(self) -> bool:
        """This incarnation is registered, and unfenced in the metadata this node has replayed."""
        return self.broker_epoch >= 0 and not self.controller.brokers[self.config.node_id].fenced

    @property
    def live_broker_count(self) -> int:
        return len(self.controller.unfenced_broker_ids)

    # ------------------------------------------------------------ metadata for clients

    def metadata_brokers(self) -> list[tuple[int, str, int, bool]]:
        """(id, host, port, fenced) of every registered broker. This node shows itself fenced until
        its own incarnation is registered and unfenced: the registration replayed before that is a
        killed predecessor's, which the controller counts live until the new one fences it. (A Kafka
        broker serves clients only once registered, caught up and unfenced, KIP-631.)"""
        own_broker_live = self.own_broker_live
        return [(b.broker_id, b.host, b.port, b.fenced or (b.broker_id == self.config.node_id and not own_broker_live))
                for b in sorted(self.controller.brokers.values(), key=lambda b: b.broker_id)]

    def partition_metadata(self, name: str, index: int) -> dict:
        registration = self.controller.topics[self.controller.topic_ids[name]].partitions[index]
        alive = set(self.controller.unfenced_broker_ids)
        error = ErrorCode.NONE if registration.leader != NO_LEADER else ErrorCode.LEADER_NOT_AVAILABLE
        return {"error_code": error, "partition_index": index, "leader_id": registration.leader,
                "leader_epoch": registration.leader_epoch, "replica_nodes": list(registration.replicas),
                "isr_nodes": list(registration.isr),
                "offline_replicas": [r for r in registration.replicas if r not in alive]}

    # ------------------------------------------------------------ coordinators

    def create_internal_topic(self, name: str, num_partitions: int, replication_factor: int,
                              configs: dict[str, str], now_ms: int) -> None:
        """Ask the shell to create a topic through the active controller."""
        if name not in self.image.topics_by_name:
            self.wanted_internal_topics[name] = (num_partitions, replication_factor, configs)

    def led_partitions(self, topic: str) -> dict[int, tuple[int, bool]]:
        led = {}
        for topic_partition, replica in self.partitions.items():
            if topic_partition.topic == topic and replica.role is Role.LEADER:
                led[topic_partition.partition] = (replica.leader_epoch,
                                                  replica.high_watermark >= replica.log.log_end_offset)
        return led

    def partition_leader(self, topic: str, index: int) -> tuple[int, str, int] | None:
        topic_id = self.controller.topic_ids.get(topic)
        registration = self.controller.topics[topic_id].partitions.get(index) if topic_id else None
        if registration is None or registration.leader == NO_LEADER:
            return None
        address = self.broker_address(registration.leader)
        return (registration.leader, *address) if address else None

    # ------------------------------------------------------------ data

    def replica(self, topic_partition: TopicPartition) -> PartitionReplica:
        if topic_partition not in self.partitions:
            topic_id = self.controller.topic_ids.get(topic_partition.topic)
            if topic_id is not None and topic_partition.partition in self.controller.topics[topic_id].partitions:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"no replica of {topic_partition} here")
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(topic_partition))
        return self.partitions[topic_partition]

    def partition(self, topic_partition: TopicPartition) -> PartitionReplica:
        """The partition as its leader: clients produce to and fetch from leaders only."""
        replica = self.replica(topic_partition)
        if replica.role is not Role.LEADER:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {self.config.node_id} is not the leader of {topic_partition}")
        return replica

    def append(self, topic_partition: TopicPartition, records: bytes, now_ms: int, acks: int = 1,
               origin: AppendOrigin = AppendOrigin.CLIENT):
        with self.storage_io():
            info = self.replica(topic_partition).append_as_leader(records, acks, now_ms, origin)
        self.appended.add(topic_partition)
        self.changed.add(topic_partition)
        return info

    def follower_fetch(self, topic_partition: TopicPartition, fetch: ReplicaFetch, max_bytes: int, now_ms: int):
        replica = self.replica(topic_partition)
        high_watermark = replica.high_watermark
        answer = replica.handle_follower_fetch(fetch, max_bytes, now_ms)
        if replica.high_watermark != high_watermark:
            self.appended.add(topic_partition)  # consumers may now read further
            self.changed.add(topic_partition)
        return answer

    def offset_for_leader_epoch(self, topic_partition: TopicPartition, current_leader_epoch: int, leader_epoch: int):
        return self.replica(topic_partition).offset_for_leader_epoch(
            EpochEndOffsetRequest(current_leader_epoch, leader_epoch))

    def followed_partitions(self) -> dict[int, list[tuple[TopicPartition, PartitionReplica]]]:
        """Follower replicas here, by the broker id of their leader."""
        by_leader: dict[int, list] = {}
        for topic_partition, replica in sorted(self.partitions.items()):
            if replica.role is Role.FOLLOWER:
                by_leader.setdefault(replica.leader_id, []).append((topic_partition, replica))
        return by_leader

    def commit_security_records(self, records: list[dict], now_ms: int) -> None:
        """ACL and SCRAM changes on the active controller (CreateAcls, DeleteAcls and
        AlterUserScramCredentials are forwarded to it): committed like every command's records."""
        if not self.is_active_controller:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "not the active controller")
        self._queue(records)

    def listener_endpoints(self, listener: str) -> dict[tuple[str, int], tuple[str, int]]:
        """Every registered broker's first-listener address -> its address on `listener`."""
        return {(b.host, b.port): tuple(b.listeners[listener]) for b in self.controller.brokers.values()
                if listener in b.listeners}

    def broker_address(self, broker_id: int) -> tuple[str, int] | None:
        broker = self.controller.brokers.get(broker_id)
        return (broker.host, broker.port) if broker else None

    @property
    def broker_epoch(self) -> int:
        broker = self.controller.brokers.get(self.config.node_id)
        return broker.broker_epoch if broker and broker.incarnation_id == self.incarnation_id else -1

    def alter_partition_requests(self, now_ms: int) -> list[dict]:
        """ISR changes to send to the controller: shrinks due now, and expansions or shrinks
        proposed earlier and not yet sent (or sent long ago without an answer)."""
        requests = []
        for topic_partition, replica in self.partitions.items():
            replica.maybe_shrink_isr(now_ms)
            proposal = replica.pending_alter_partition
            if proposal is None:
                continue
            sent = self._alter_partition_sent_ms.get(topic_partition)
            if sent is not None and sent[0] == proposal and now_ms - sent[1] < ALTER_PARTITION_RESEND_MS:
                continue
            self._alter_partition_sent_ms[topic_partition] = (proposal, now_ms)
            requests.append({"broker_id": self.config.node_id, "broker_epoch": self.broker_epoch,
                             "topic_id": str(replica.topic_id), "partition": topic_partition.partition,
                             "topic": topic_partition.topic, "leader_epoch": proposal.leader_epoch,
                             "partition_epoch": proposal.partition_epoch, "new_isr": list(proposal.new_isr)})
        return requests

    def alter_partition_failed(self, topic_partition: TopicPartition, error: ErrorCode) -> None:
        replica = self.partitions.get(topic_partition)
        if replica is not None and replica.pending_alter_partition is not None:
            replica.handle_alter_partition_error(error)
        self._alter_partition_sent_ms.pop(topic_partition, None)

    def _tick(self, now_ms: int) -> None:
        for topic_partition, replica in self.partitions.items():
            if now_ms - self._last_flush_ms.setdefault(topic_partition, now_ms) >= replica.log.config.flush_ms:
                replica.log.flush(now_ms)
                self._last_flush_ms[topic_partition] = now_ms
        if now_ms - self._last_retention_check_ms >= self.config.log_retention_check_interval_ms:
            self._last_retention_check_ms = now_ms
            for replica in self.partitions.values():
                if replica.role is Role.LEADER:
                    replica.log.enforce_retention(now_ms, high_watermark=replica.high_watermark)
        if self.config.log_cleaner_enable and now_ms - self._last_cleaner_run_ms >= self.config.log_cleaner_backoff_ms:
            # Compaction below the high watermark, on leaders: a follower takes the cleaned log's
            # gaps as they come (Log.append_as_follower) and keeps its own copy uncleaned.
            self._last_cleaner_run_ms = now_ms
            for replica in self.partitions.values():
                if replica.role is Role.LEADER and replica.log.config.compact:
                    cleaner.clean(replica.log, now_ms, high_watermark=replica.high_watermark)
        if now_ms - self._last_checkpoint_ms >= self.config.replica_high_watermark_checkpoint_interval_ms:
            self._last_checkpoint_ms = now_ms
            self._write_hw_checkpoint()

    def close(self) -> None:
        self._write_hw_checkpoint()
        for replica in self.partitions.values():
            replica.log.close()
        self.raft.close()

    # ------------------------------------------------------------ replication-offset-checkpoint

    def _write_hw_checkpoint(self) -> None:
        """Kafka's format: a version line (0), a count line, then `topic partition offset` lines."""
        lines = [f"{tp.topic} {tp.partition} {replica.high_watermark}" for tp, replica in sorted(self.partitions.items())]
        path = os.path.join(self.data_dir, REPLICATION_OFFSET_CHECKPOINT)
        replace_file(path, ("\n".join(["0", str(len(lines)), *lines]) + "\n").encode())

    def _read_hw_checkpoint(self) -> dict[TopicPartition, int]:
        path = os.path.join(self.data_dir, REPLICATION_OFFSET_CHECKPOINT)
        if not os.path.exists(path):
            return {}
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        assert lines[0] == "0", f"{path}: unknown version {lines[0]!r}"
        checkpoint = {}
        for line in lines[2:2 + int(lines[1])]:
            topic, partition, offset = line.split()
            checkpoint[TopicPartition(topic, int(partition))] = int(offset)
        return checkpoint


def replica_fetch_from(fetch_partition, replica_id: int) -> ReplicaFetch:
    return ReplicaFetch(replica_id, fetch_partition.fetch_offset, fetch_partition.get("last_fetched_epoch", -1),
                        fetch_partition.get("current_leader_epoch", -1))
