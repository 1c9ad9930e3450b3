"""The controller's metadata state machine: brokers, topics, partitions, as KRaft keeps them.

Commands (register a broker, heartbeat, create a topic, AlterPartition, elect leaders)
are checked against the current state and turned into metadata records; nothing changes
until the records come back through `apply`, in log order, once the Raft quorum committed
them. So every controller, and every broker replaying the metadata log, builds the same
state. Records are JSON-able dicts named after KRaft's: RegisterBrokerRecord,
FenceBrokerRecord, UnfenceBrokerRecord, BrokerRegistrationChangeRecord, TopicRecord, PartitionRecord,
PartitionChangeRecord, ConfigRecord, RemoveTopicRecord.

Rules, as Kafka's QuorumController applies them:
- A broker registers with an incarnation id; the controller gives it a broker epoch. It
  starts fenced, is unfenced by a heartbeat, and is fenced again when heartbeats stop for
  broker.session.timeout.ms. A fenced broker leaves every ISR (not below one member) and
  loses its leaderships to another ISR member. A broker that asked for a controlled
  shutdown is fenced and stays fenced until it registers again: a heartbeat its old
  incarnation sent before it stopped must not bring it back.
- Replicas are assigned round robin over the unfenced brokers (rack-unaware); the first
  replica is the preferred leader.
- Leaders come from the ISR. Only with unclean.leader.election.enable=true on the topic may
  a live replica outside the ISR lead, and then the ISR restarts as that one replica.
- Every change bumps the partition epoch; a change of leader bumps the leader epoch.
- AlterPartition is accepted only from the current leader at the current leader and
  partition epochs, with unfenced ISR members (KIP-497, KIP-841).
- ElectLeaders (KIP-460) moves a partition's leadership to its preferred replica when that
  replica is alive and in the ISR, or, as an unclean election, gives a leaderless partition
  any live replica. With auto.leader.rebalance.enable, the active controller runs preferred
  elections by itself leader.imbalance.check.interval after it sees a partition led by
  another replica than its preferred one.
No clock and no sockets: the heartbeat times it keeps are in memory, as Kafka keeps them, and
so is when the next leader balance is due.
"""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from enum import IntEnum

from reference.protocol.errors import ErrorCode, KafkaError

NO_LEADER = -1
UNCLEAN_ELECTION_CONFIG = "unclean.leader.election.enable"
TOPIC_RESOURCE = 2
GROUP_RESOURCE = 32  # a group's configs (Kafka 4.0, KIP-848's GroupConfig)

log = logging.getLogger("kspec.controller")


class ElectionType(IntEnum):
    """ElectLeaders' election_type (KIP-460)."""
    PREFERRED = 0  # the first replica, when it is alive and in the ISR
    UNCLEAN = 1  # for a partition without a leader: an ISR member, else any live replica


@dataclass
class BrokerRegistration:
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    host: str
    port: int
    fenced: bool = True
    in_controlled_shutdown: bool = False
    listeners: dict[str, tuple[str, int]] = field(default_factory=dict)  # every listener's endpoint, by name


@dataclass
class PartitionRegistration:
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0

    def to_record(self, topic_id: uuid.UUID, partition_id: int) -> dict:
        return {"type": "PartitionRecord", "topic_id": str(topic_id), "partition_id": partition_id,
                "replicas": self.replicas, "isr": self.isr, "leader": self.leader,
                "leader_epoch": self.leader_epoch, "partition_epoch": self.partition_epoch}


@dataclass
class TopicState:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionRegistration] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)


@dataclass
class ControllerState:
    broker_session_timeout_ms: int = 9_000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 300_000
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    topics: dict[uuid.UUID, TopicState] = field(default_factory=dict)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # group id -> its overrides
    last_heartbeat_ms: dict[int, int] = field(default_factory=dict)  # active controller's memory only
    heard_from: set[int] = field(default_factory=set)  # brokers that registered or heartbeated to this active controller
    leader_balance_due_ms: int | None = None  # active controller's memory only

    # ------------------------------------------------------------ replay

    def apply(self, record: dict) -> None:
        kind = record["type"]
        if kind == "RegisterBrokerRecord":
            old = self.brokers.get(record["broker_id"])
            assert old is None or record["broker_epoch"] > old.broker_epoch, record
            self.brokers[record["broker_id"]] = BrokerRegistration(
                record["broker_id"], record["incarnation_id"], record["broker_epoch"], record["host"], record["port"],
                listeners={name: tuple(address) for name, address in record.get("listeners", {}).items()})
        elif kind in ("FenceBrokerRecord", "UnfenceBrokerRecord"):
            broker = self.brokers[record["id"]]
            assert broker.broker_epoch == record["epoch"], (record, broker)
            broker.fenced = kind == "FenceBrokerRecord"
        elif kind == "BrokerRegistrationChangeRecord":
            broker = self.brokers[record["broker_id"]]
            assert broker.broker_epoch == record["broker_epoch"], (record, broker)
            broker.in_controlled_shutdown = record["in_controlled_shutdown"]
        elif kind == "TopicRecord":
            topic_id = uuid.UUID(record["topic_id"])
            assert record["name"] not in self.topic_ids, record
            self.topics[topic_id] = TopicState(record["name"], topic_id)
            self.topic_ids[record["name"]] = topic_id
        elif kind == "PartitionRecord":
            topic = self.topics[uuid.UUID(record["topic_id"])]
            topic.partitions[record["partition_id"]] = PartitionRegistration(
                list(record["replicas"]), list(record["isr"]), record["leader"], record["leader_epoch"],
                record["partition_epoch"])
        elif kind == "PartitionChangeRecord":
            partition = self.topics[uuid.UUID(record["topic_id"])].partitions[record["partition_id"]]
            if "isr" in record:
                partition.isr = list(record["isr"])
            if "leader" in record:
                partition.leader = record["leader"]
                partition.leader_epoch += 1
            partition.partition_epoch += 1
            assert partition.leader == NO_LEADER or partition.leader in partition.isr, partition
        elif kind == "ConfigRecord" and record["resource_type"] == GROUP_RESOURCE:
            apply_config_record(self.group_configs.setdefault(record["resource_name"], {}), record)
            if not self.group_configs[record["resource_name"]]:
                del self.group_configs[record["resource_name"]]
        elif kind == "ConfigRecord":
            assert record["resource_type"] == TOPIC_RESOURCE, record
            apply_config_record(self.topics[self.topic_ids[record["resource_name"]]].configs, record)
        elif kind == "RemoveTopicRecord":
            topic = self.topics.pop(uuid.UUID(record["topic_id"]))
            del self.topic_ids[topic.name]
        else:
            raise ValueError(f"unknown metadata record type {kind!r}")

    def snapshot_records(self) -> list[dict]:
        """Records that rebuild this state from nothing (the metadata snapshot, Raft §7)."""
        records = []
        for broker in self.brokers.values():
            records.append({"type": "RegisterBrokerRecord", "broker_id": broker.broker_id,
                            "incarnation_id": broker.incarnation_id, "broker_epoch": broker.broker_epoch,
                            "host": broker.host, "port": broker.port,
                            **({"listeners": broker.listeners} if broker.listeners else {})})
            if not broker.fenced:
                records.append({"type": "UnfenceBrokerRecord", "id": broker.broker_id, "epoch": broker.broker_epoch})
            if broker.in_controlled_shutdown:
                records.append(_controlled_shutdown_record(broker))
        for topic in self.topics.values():
            records.append({"type": "TopicRecord", "name": topic.name, "topic_id": str(topic.topic_id)})
            records += [partition.to_record(topic.topic_id, index) for index, partition in sorted(topic.partitions.items())]
            records += [{"type": "ConfigRecord", "resource_type": TOPIC_RESOURCE, "resource_name": topic.name,
                         "name": name, "value": value} for name, value in sorted(topic.configs.items())]
        for group_id, configs in sorted(self.group_configs.items()):
            records += [{"type": "ConfigRecord", "resource_type": GROUP_RESOURCE, "resource_name": group_id,
                         "name": name, "value": value} for name, value in sorted(configs.items())]
        return records

    # ------------------------------------------------------------ brokers

    @property
    def unfenced_broker_ids(self) -> list[int]:
        return sorted(b.broker_id for b in self.brokers.values() if not b.fenced)

    def register_broker(self, broker_id: int, incarnation_id: str, host: str, port: int, now_ms: int,
                        listeners: dict[str, list] | None = None) -> list[dict]:
        """BrokerRegistration: a new broker epoch for every new incarnation of the broker; host and
        port are its first listener's (the one between nodes), `listeners` every listener's.
        Another incarnation of a broker whose session is still valid (unfenced, heard from within
        broker.session.timeout.ms) is refused with DUPLICATE_BROKER_REGISTRATION, as Kafka's
        ClusterControlManager does: two processes with one node id must not take turns being it
        (a restarted broker registers once the old session has ended, by its controlled shutdown
        or by its timeout)."""
        if broker_id < 0:
            raise KafkaError(ErrorCode.INVALID_REGISTRATION, f"broker id {broker_id}")
        old = self.brokers.get(broker_id)
        if old is not None and old.incarnation_id == incarnation_id:
            return []  # a retried registration
        # Kafka's active controller gives every registered broker a fresh session when it takes
        # over; this one counts a session only from what it heard itself (a registration or a
        # heartbeat), so a node restarted together with its controller (a combined node, or a
        # controller failover) registers at once instead of waiting out broker.session.timeout.ms.
        if (old is not None and not old.fenced and broker_id in self.heard_from
                and now_ms - self.last_heartbeat_ms.get(broker_id, now_ms) <= self.broker_session_timeout_ms):
            raise KafkaError(ErrorCode.DUPLICATE_BROKER_REGISTRATION, f"broker {broker_id} is registered with "
                             f"incarnation {old.incarnation_id} and its session is valid")
        epoch = 1 + max((b.broker_epoch for b in self.brokers.values()), default=0)
        self.last_heartbeat_ms[broker_id] = now_ms
        self.heard_from.add(broker_id)
        records = [{"type": "RegisterBrokerRecord", "broker_id": broker_id, "incarnation_id": incarnation_id,
                    "broker_epoch": epoch, "host": host, "port": port, **({"listeners": listeners} if listeners else {})}]
        log.info("broker %d registers at %s:%d with broker epoch %d", broker_id, host, port, epoch)
        if old is not None and not old.fenced:
            records = self._fence_records(broker_id) + records  # the old incarnation is gone
        return records

    def heartbeat(self, broker_id: int, broker_epoch: int, now_ms: int, want_shutdown: bool = False) -> list[dict]:
        """BrokerHeartbeat: unfence a registered broker; on controlled shutdown, move its
        leaderships and ISR places away first, then fence it."""
        broker = self.brokers.get(broker_id)
        if broker is None:
            raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id}")
        if broker.broker_epoch != broker_epoch:
            raise KafkaError(ErrorCode.STALE_BROKER_EPOCH, f"broker {broker_id} epoch {broker_epoch}")
        self.note_contact(broker_id, broker_epoch, now_ms)
        if want_shutdown:
            if broker.in_controlled_shutdown:
                return []
            log.info("broker %d (epoch %d) asks for a controlled shutdown", broker_id, broker_epoch)
            return [_controlled_shutdown_record(broker), *(self._fence_records(broker_id) if not broker.fenced else [])]
        if broker.fenced and not broker.in_controlled_shutdown:
            log.info("unfencing broker %d (epoch %d)", broker_id, broker_epoch)
            return [{"type": "UnfenceBrokerRecord", "id": broker_id, "epoch": broker_epoch}]
        return []

    def note_contact(self, broker_id: int, broker_epoch: int, now_ms: int) -> None:
        """A heartbeat arrived: its broker's session counts from now, even while the heartbeat
        waits behind other controller commands (a busy controller must not fence a broker whose
        heartbeats are in its queue)."""
        broker = self.brokers.get(broker_id)
        if broker is not None and broker.broker_epoch == broker_epoch:
            self.last_heartbeat_ms[broker_id] = max(now_ms, self.last_heartbeat_ms.get(broker_id, now_ms))
            self.heard_from.add(broker_id)

    def fence_expired_brokers(self, now_ms: int) -> list[dict]:
        """Fence the first broker whose session expired. One at a time: the next one's
        records must be computed from the state after this one's are applied."""
        for broker_id in self.unfenced_broker_ids:
            silent_ms = now_ms - self.last_heartbeat_ms.get(broker_id, now_ms)
            if silent_ms > self.broker_session_timeout_ms:
                log.info("fencing broker %d: no heartbeat for %d ms (broker.session.timeout.ms=%d)",
                         broker_id, silent_ms, self.broker_session_timeout_ms)
                return self._fence_records(broker_id)
        return []

    def _fence_records(self, broker_id: int) -> list[dict]:
        """Leave every ISR (never emptying it) and every leadership, then be fenced."""
        broker = self.brokers[broker_id]
        alive = set(self.unfenced_broker_ids) - {broker_id}
        records = []
        for topic in self.topics.values():
            for index, partition in topic.partitions.items():
                if broker_id not in partition.isr and partition.leader != broker_id:
                    continue
                isr = [r for r in partition.isr if r != broker_id] or partition.isr
                change = self._change(topic, index, partition, isr, alive)
                if change:
                    records.append(change)
        return records + [{"type": "FenceBrokerRecord", "id": broker_id, "epoch": broker.broker_epoch}]

    # ------------------------------------------------------------ topics

    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     configs: dict[str, str]) -> list[dict]:
        if name in self.topic_ids:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        brokers = self.unfenced_broker_ids
        if not 1 <= replication_factor <= len(brokers):
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"replication factor {replication_factor} needs {replication_factor} live brokers; "
                             f"{len(brokers)} are registered and unfenced")
        topic_id = uuid.uuid4()
        offset = len(self.topics)  # spread the first replicas of successive topics
        records = [{"type": "TopicRecord", "name": name, "topic_id": str(topic_id)}]
        for index in range(num_partitions):
            replicas = [brokers[(offset + index + i) % len(brokers)] for i in range(replication_factor)]
            records.append(PartitionRegistration(replicas, list(replicas), replicas[0]).to_record(topic_id, index))
        records += [{"type": "ConfigRecord", "resource_type": TOPIC_RESOURCE, "resource_name": name,
                     "name": key, "value": value} for key, value in sorted(configs.items())]
        return records

    def alter_partition(self, broker_id: int, broker_epoch: int, topic_id: uuid.UUID, partition_id: int,
                        leader_epoch: int, partition_epoch: int, new_isr: list[int]) -> list[dict]:
        broker = self.brokers.get(broker_id)
        if broker is None or broker.broker_epoch != broker_epoch:
            raise KafkaError(ErrorCode.STALE_BROKER_EPOCH, f"broker {broker_id} epoch {broker_epoch}")
        topic = self.topics.get(topic_id)
        if topic is None or partition_id not in topic.partitions:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic_id}-{partition_id}")
        partition = topic.partitions[partition_id]
        if partition.leader != broker_id or leader_epoch != partition.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {leader_epoch} != {partition.leader_epoch}")
        if partition_epoch != partition.partition_epoch:
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION,
                             f"partition epoch {partition_epoch} != {partition.partition_epoch}")
        alive = set(self.unfenced_broker_ids)
        if broker_id not in new_isr or not set(new_isr) <= set(partition.replicas):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"ISR {new_isr} for replicas {partition.replicas}")
        if any(replica not in alive for replica in new_isr if replica not in partition.isr):
            raise KafkaError(ErrorCode.INELIGIBLE_REPLICA, f"ISR {new_isr} adds a fenced broker")
        return [{"type": "PartitionChangeRecord", "topic_id": str(topic_id), "partition_id": partition_id,
                 "isr": sorted(new_isr)}]

    # ------------------------------------------------------------ elections

    def elect_leaders(self, preferred: bool = True) -> list[dict]:
        """The controller's own elections: a leader for every partition without one, and with
        preferred, the preferred replica for every partition it can lead and does not."""
        records = []
        for topic in self.topics.values():
            for index, partition in topic.partitions.items():
                if preferred and partition.leader != partition.replicas[0]:
                    change = self._preferred_change(topic, index, partition)
                elif partition.leader == NO_LEADER:
                    change = self._change(topic, index, partition, partition.isr, set(self.unfenced_broker_ids))
                else:
                    continue
                if change:
                    records.append(change)
        return records

    def elect_requested_leaders(self, wanted: dict[str, list[int]] | None,
                                election_type: ElectionType) -> tuple[dict[str, dict[int, ErrorCode]], list[dict]]:
        """ElectLeaders: each wanted partition's answer, by topic, and the records that elect.
        wanted None asks for every partition, and then, as Kafka's controller answers, the
        partitions whose election is not needed are left out of the answer."""
        every_partition = wanted is None
        if every_partition:
            wanted = {topic.name: sorted(topic.partitions) for topic in self.topics.values()}
        results: dict[str, dict[int, ErrorCode]] = {}
        records = []
        for name, partition_ids in wanted.items():
            answers = results.setdefault(name, {})
            for partition_id in dict.fromkeys(partition_ids):  # each partition once, in asked order
                error, record = self.elect_leader(name, partition_id, election_type)
                if record is not None:
                    records.append(record)
                if not (every_partition and error == ErrorCode.ELECTION_NOT_NEEDED):
                    answers[partition_id] = error
        assert len(records) == sum(e == ErrorCode.NONE for answers in results.values() for e in answers.values())
        return results, records

    def elect_leader(self, topic_name: str, partition_id: int,
                     election_type: ElectionType) -> tuple[ErrorCode, dict | None]:
        """One partition's election as KRaft's controller decides it (KIP-460): not needed when
        the preferred replica leads already (preferred) or the partition has a leader (unclean),
        else the record that elects, or PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE
        when no replica can lead."""
        topic = self.topics.get(self.topic_ids.get(topic_name))
        if topic is None or partition_id not in topic.partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        partition = topic.partitions[partition_id]
        if election_type is ElectionType.PREFERRED:
            if partition.leader == partition.replicas[0]:
                return ErrorCode.ELECTION_NOT_NEEDED, None
            record = self._preferred_change(topic, partition_id, partition)
            return (ErrorCode.NONE, record) if record else (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None)
        if partition.leader != NO_LEADER:
            return ErrorCode.ELECTION_NOT_NEEDED, None
        record = self._change(topic, partition_id, partition, partition.isr, set(self.unfenced_broker_ids),
                              unclean_allowed=True)
        return (ErrorCode.NONE, record) if record else (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None)

    def balance_partition_leaders(self, now_ms: int) -> list[dict]:
        """auto.leader.rebalance.enable as KRaft's controller runs it (KAFKA-13682): a partition
        led by another replica than its preferred one schedules a leader balance
        leader.imbalance.check.interval later, which then runs the preferred election of every
        partition. (KRaft has no leader.imbalance.per.broker.percentage threshold.)"""
        if not self.auto_leader_rebalance_enable:
            return []
        imbalanced = any(partition.leader != partition.replicas[0]
                         for topic in self.topics.values() for partition in topic.partitions.values())
        if not imbalanced:
            self.leader_balance_due_ms = None
            return []
        if self.leader_balance_due_ms is None:
            self.leader_balance_due_ms = now_ms + self.leader_imbalance_check_interval_ms
        if now_ms < self.leader_balance_due_ms:
            return []
        self.leader_balance_due_ms = None  # scheduled again by the next call, if still imbalanced
        return self.elect_leaders(preferred=True)

    def _preferred_change(self, topic: TopicState, index: int, partition: PartitionRegistration) -> dict | None:
        """The preferred replica leads when it is alive and in the ISR; else a leader stays, and a
        partition without one gets one as when its leader fails."""
        alive = set(self.unfenced_broker_ids)
        preferred = partition.replicas[0]
        assert partition.leader != preferred, partition
        if preferred in alive and preferred in partition.isr:
            return {"type": "PartitionChangeRecord", "topic_id": str(topic.topic_id), "partition_id": index,
                    "leader": preferred}
        if partition.leader == NO_LEADER:
            return self._change(topic, index, partition, partition.isr, alive)
        return None

    def _change(self, topic: TopicState, index: int, partition: PartitionRegistration, isr: list[int],
                alive: set[int], unclean_allowed: bool = False) -> dict | None:
        """The PartitionChangeRecord for this ISR, electing a new leader if the current one is
        not alive in it: clean from the ISR, or unclean when the topic (or the ElectLeaders
        request: unclean_allowed) allows it."""
        record = {"type": "PartitionChangeRecord", "topic_id": str(topic.topic_id), "partition_id": index}
        if isr != partition.isr:
            record["isr"] = isr
        if partition.leader not in alive or partition.leader not in isr:
            candidates = [r for r in partition.replicas if r in isr and r in alive]
            unclean = unclean_allowed or topic.configs.get(UNCLEAN_ELECTION_CONFIG, "false") == "true"
            if not candidates and unclean:
                candidates = [r for r in partition.replicas if r in alive]
                if candidates:
                    record["isr"] = [candidates[0]]  # the data the old ISR had beyond it is gone
            leader = candidates[0] if candidates else NO_LEADER
            if leader != partition.leader:
                record["leader"] = leader
        return record if len(record) > 3 else None


def _controlled_shutdown_record(broker: BrokerRegistration) -> dict:
    return {"type": "BrokerRegistrationChangeRecord", "broker_id": broker.broker_id,
            "broker_epoch": broker.broker_epoch, "in_controlled_shutdown": True}


def apply_config_record(configs: dict[str, str], record: dict) -> None:
    """A ConfigRecord sets its config (a value) or removes it (a null value)."""
    if record["value"] is None:
        configs.pop(record["name"], None)
    else:
        configs[record["name"]] = record["value"]
