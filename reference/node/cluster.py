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
import hashlib
import logging
import os
import uuid

from reference.config import BrokerConfig, parse_voters
from reference.controller.raft import RaftConfig, RaftRole
from reference.controller.state import NO_LEADER, TOPIC_RESOURCE, ControllerState, ElectionType
from reference.node.base import METADATA_PARTITION_DIR, BrokerBase, TopicPartition
from reference.node.controller_commands import ControllerCommands
from reference.node.hw_checkpoint import read_hw_checkpoint, write_hw_checkpoint
from reference.node.metadata import TopicImage
from reference.node.quorum import DurableRaftNode
from reference.node.replay import halt_on_replay_failure, replay
from reference.protocol.api_keys import ApiKey
from reference.protocol.api_versions import (CLUSTER_ONLY_API_VERSIONS, CONTROLLER_LISTENER_APIS,
                                             INTER_NODE_API_VERSIONS, SUPPORTED_API_VERSIONS)
from reference.protocol.errors import ErrorCode, KafkaError
from reference.replication import (AlterPartitionRequest, EpochEndOffsetRequest, LeaderEpochCache, PartitionChange,
                                   PartitionReplica, ReplicaConfig, ReplicaFetch, ReplicationBugs, Role)
from reference.security.inter_node import controller_listener_names
from reference.storage import AppendOrigin, Log, cleaner

# What a controller-only node (process.roles=controller) answers outside the quorum.
CONTROLLER_CLIENT_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.DESCRIBE_QUORUM})
ALTER_PARTITION_RESEND_MS = 2000  # a proposal nobody answered is sent again (e.g. to a new controller)

log = logging.getLogger("kspec.cluster")


class ClusterBroker(BrokerBase):
    """A node of a KRaft cluster: replicas instead of plain logs, the metadata from the quorum."""

    def __init__(self, config: BrokerConfig, now_ms: int) -> None:
        assert config.controller_quorum_voters
        self.voters = parse_voters(config.controller_quorum_voters)
        assert config.is_controller == (config.node_id in self.voters), "controllers are the voters (config.check)"
        super().__init__(config, now_ms)
        self.raft = DurableRaftNode.open(
            os.path.join(self.data_dir, METADATA_PARTITION_DIR), config.node_id, tuple(sorted(self.voters)),
            RaftConfig(config.controller_quorum_election_timeout_ms, config.controller_quorum_fetch_timeout_ms),
            now_ms)
        self.controller = ControllerState(config.broker_session_timeout_ms, config.auto_leader_rebalance_enable,
                                          config.leader_imbalance_check_interval_seconds * 1000)
        self.partitions: dict[TopicPartition, PartitionReplica] = {}
        self.incarnation_id = str(uuid.uuid4())
        self.registered = False  # our RegisterBrokerRecord is committed
        # Clients are served once this incarnation has replayed the metadata log up to its own
        # registration and been unfenced (KIP-631); until then its view may be a stale one that
        # names this node the leader of partitions that moved while it was down.
        self.serving_clients = False
        # topics for the shell to create through the active controller: internal ones, and auto-created ones
        self.wanted_internal_topics: dict[str, tuple[int, int, dict[str, str]]] = {}
        self.changed: set[TopicPartition] = set()  # HW or role moved: wake acks=all waiters
        self._dirty: set[TopicPartition] = set()
        self._active_epoch = -1  # the Raft epoch in which this node became a ready active controller
        self._last_checkpoint_ms = now_ms
        self._last_flush_ms: dict[TopicPartition, int] = {}
        self._alter_partition_sent_ms: dict[TopicPartition, tuple[AlterPartitionRequest, int]] = {}
        self._checkpointed_hw = read_hw_checkpoint(self.data_dir)
        self.commands = ControllerCommands(self)  # what this node does while the active controller
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
        """The ControllerId clients see in Metadata and DescribeCluster: a broker listed in the
        same answer, which forwards the admin requests a client sends it to the active controller
        (KIP-590). Kafka's KRaft brokers name a random live broker (KRaftMetadataCache), never a
        Raft leader as such, and -1 only while no broker is live: librdkafka, told -1 (a quorum
        between leaders) or an id the answer gives no address for, asks again only when one of
        its connections changes state, so its admin requests would wait out their whole timeout
        after an election that took a second. kspec names the active controller while it is a
        listed broker (combined mode, between elections), else this broker once listed, else the
        lowest listed one."""
        listed = [node_id for node_id, _, _, fenced in self.metadata_brokers() if not fenced]
        for candidate in (self.active_controller_id, self.config.node_id):
            if candidate in listed:
                return candidate
        return listed[0] if listed else NO_LEADER

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
                    self.commands.producer_id_next = self.image.next_producer_id  # never reuse a predecessor's ids
                    # Heartbeats are not in the log: a new controller starts every broker's session
                    # now, so a broker that died with the previous controller is fenced in time.
                    self.controller.last_heartbeat_ms = dict.fromkeys(self.controller.brokers, now_ms)
                    self.controller.heard_from = set()  # registrations: see ControllerState.register_broker
                    self.controller.leader_balance_due_ms = None  # a predecessor's schedule is not ours
                continue
            try:
                self._apply(entry.record)
            except Exception:  # any exception: the view is now unknown
                halt_on_replay_failure(offset, entry.record)
        if self.raft.role is not RaftRole.LEADER:
            self._active_epoch = -1
            self.commands.pending_records.clear()  # decided from a state a later controller may have changed
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

    # ------------------------------------------------------------ the active controller's commands

    def register_broker(self, broker_id: int, incarnation_id: str, host: str, port: int, now_ms: int,
                        listeners: dict[str, list] | None = None) -> int:
        return self.commands.register_broker(broker_id, incarnation_id, host, port, now_ms, listeners)

    def note_heartbeat(self, broker_id: int, broker_epoch: int, now_ms: int) -> None:
        self.commands.note_heartbeat(broker_id, broker_epoch, now_ms)

    def broker_heartbeat(self, broker_id: int, broker_epoch: int, want_shutdown: bool, now_ms: int) -> None:
        self.commands.broker_heartbeat(broker_id, broker_epoch, want_shutdown, now_ms)

    def alter_partition(self, request: dict) -> None:
        self.commands.alter_partition(request)

    def controller_tick(self, now_ms: int) -> None:
        self.commands.controller_tick(now_ms)

    def elect_leaders(self, wanted: dict[str, list[int]] | None,
                      election_type: ElectionType) -> dict[str, dict[int, ErrorCode]]:
        return self.commands.elect_leaders(wanted, election_type)

    @property
    def pending_records(self) -> list[dict]:
        return self.commands.pending_records

    def take_pending_records(self) -> list[dict]:
        return self.commands.take_pending_records()

    # ------------------------------------------------------------ admin (BrokerNode), on the active controller

    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     configs: dict[str, str], validate_only: bool, now_ms: int) -> TopicImage:
        return self.commands.create_topic(name, num_partitions, replication_factor, configs, validate_only, now_ms)

    def delete_topic(self, name: str, now_ms: int) -> None:
        self.commands.delete_topic(name, now_ms)

    def create_partitions(self, name: str, count: int, validate_only: bool, now_ms: int) -> None:
        self.commands.create_partitions(name, count, validate_only, now_ms)

    def alter_topic_configs(self, name: str, configs: dict[str, str | None], validate_only: bool,
                            now_ms: int) -> None:
        self.commands.alter_topic_configs(name, configs, validate_only, now_ms)

    def alter_group_configs(self, group_id: str, configs: dict[str, str | None], validate_only: bool,
                            now_ms: int) -> None:
        self.commands.alter_group_configs(group_id, configs, validate_only, now_ms)

    def allocate_producer_id(self, now_ms: int) -> int:
        return self.commands.allocate_producer_id(now_ms)

    def commit_security_records(self, records: list[dict], now_ms: int) -> None:
        self.commands.commit_security_records(records, now_ms)

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

    def follower_replica(self, topic_partition: TopicPartition) -> PartitionReplica | None:
        """This node's replica of the partition when it follows the leader (consumers may read
        it from Fetch v11, KIP-392), else None."""
        replica = self.partitions.get(topic_partition)
        return replica if replica is not None and replica.role is Role.FOLLOWER else None

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
        if replica is None or replica.pending_alter_partition is None:  # a kept proposal waits to be resent
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
            write_hw_checkpoint(self.data_dir, self.partitions)

    def close(self) -> None:
        write_hw_checkpoint(self.data_dir, self.partitions)
        for replica in self.partitions.values():
            replica.log.close()
        self.raft.close()

def replica_fetch_from(fetch_partition, replica_id: int) -> ReplicaFetch:
    return ReplicaFetch(replica_id, fetch_partition.fetch_offset, fetch_partition.get("last_fetched_epoch", -1),
                        fetch_partition.get("current_leader_epoch", -1))
