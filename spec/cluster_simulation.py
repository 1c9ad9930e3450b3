"""A seeded simulation of real replica cores: three brokers, a controller, a faulty network.

Each broker runs the reference's PartitionReplica over a real Log in a temporary directory.
The simulation plays everything around them: a controller that elects leaders cleanly from
the ISR and commits AlterPartition proposals, a network that delays, reorders, drops and
partitions messages, a clock, a producer with acks=all, a consumer reading from the leader,
and broker crashes and restarts. Every choice comes from one random.Random(seed), so a run
is reproduced exactly by its seed. After every event the checker asks:

  DUR-1  every record acknowledged to the acks=all producer is on every live ISR member
  REP-1  live replicas agree on every offset below both their high watermarks
  REP-2  no two live replicas lead the same leader epoch
  VIS-1  the consumer never received a record at or above the leader's high watermark
  VIS-2  a record read at an offset is what that offset holds in every later read
"""
from __future__ import annotations

import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field

from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import Record, build_batch, iter_batches
from reference.replication import LeaderEpochCache, PartitionChange, PartitionReplica, ReplicaConfig, ReplicationBugs
from reference.replication.replica import (NO_LEADER, AlterPartitionRequest, EpochEndOffset, EpochEndOffsetRequest,
                                           FetchAnswer, ReplicaFetch, Role)
from reference.storage import Log, LogConfig

BROKERS = 3
FETCH_BYTES_MAX = 1 << 20
ACKS_ALL = -1
REPLICA_LAG_TIME_MAX_MS = 1_000
DELAY_MS_MAX = 300
TICK_MS_MAX = 400
PARTITION_MS_MAX = 3_000
CRASHES_MAX = 4
RECORDS_MAX = 40
CONTROLLER = -1
# Relative weights of the events the simulation picks from at each step.
EVENTS = {"deliver": 30, "fetch": 25, "produce": 6, "consume": 4, "tick": 8, "shrink": 4, "drop": 2,
          "cut": 0.5, "crash": 0.5, "restart": 2, "elect": 0.3}


@dataclass
class Message:
    deliver_at_ms: int
    source: int
    destination: int
    payload: object
    request: object = None  # for answers: the request they answer


@dataclass
class Violation:
    guarantee_id: str
    problem: str
    step: int


@dataclass
class ClusterSimulation:
    seed: int
    bugs: ReplicationBugs = ReplicationBugs()
    root: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="kspec-simulation-"))

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.now_ms = 0
        self.config = ReplicaConfig(replica_lag_time_max_ms=REPLICA_LAG_TIME_MAX_MS, min_insync_replicas=2,
                                    bugs=self.bugs)
        self.brokers = {b: self._open(b, high_watermark=0) for b in range(BROKERS)}
        self.live = set(self.brokers)
        self.network: list[Message] = []
        self.cut_until_ms: dict[frozenset[int], int] = {}
        self.change = PartitionChange(NO_LEADER, -1, 0, tuple(self.brokers), tuple(self.brokers))
        self.next_value = 0
        self.pending_acks: list[tuple[int, int, int, bytes]] = []  # (leader, epoch, offset, value)
        self.acked: dict[int, bytes] = {}
        self.consumed: dict[int, bytes] = {}
        self.crashes = 0
        self.steps = 0
        self.events: list[str] = []
        self._elect()

    def close(self) -> None:
        for replica in self.brokers.values():
            for segment in replica.log.segments:
                segment.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def _open(self, broker: int, high_watermark: int) -> PartitionReplica:
        directory = os.path.join(self.root, f"broker-{broker}", "topic-0")
        log = Log(directory, LogConfig(), now_ms=self.now_ms)
        return PartitionReplica(broker, log, LeaderEpochCache.in_dir(directory), self.config, high_watermark)

    # -- controller ----------------------------------------------------------------------

    def _publish(self, change: PartitionChange) -> None:
        self.change = change
        for broker in self.brokers:
            self._send(CONTROLLER, broker, change)

    def _elect(self, exclude: int = NO_LEADER) -> None:
        """A clean election: any live ISR member other than `exclude`, or no leader at all."""
        candidates = sorted(b for b in self.change.isr if b in self.live and b != exclude)
        leader = self.rng.choice(candidates) if candidates else NO_LEADER
        self._publish(PartitionChange(leader, self.change.leader_epoch + 1, self.change.partition_epoch + 1,
                                      self.change.replicas, self.change.isr))

    def _alter_partition(self, request: AlterPartitionRequest) -> ErrorCode:
        change = self.change
        if (request.leader_epoch, request.partition_epoch) != (change.leader_epoch, change.partition_epoch):
            return ErrorCode.FENCED_LEADER_EPOCH
        if any(b not in self.live for b in set(request.new_isr) - set(change.isr)):
            return ErrorCode.INELIGIBLE_REPLICA
        self._publish(PartitionChange(change.leader_id, change.leader_epoch, change.partition_epoch + 1,
                                      change.replicas, request.new_isr))
        return ErrorCode.NONE

    # -- network -------------------------------------------------------------------------

    def _send(self, source: int, destination: int, payload: object, request: object = None) -> None:
        self.network.append(Message(self.now_ms + self.rng.randint(0, DELAY_MS_MAX), source, destination,
                                    payload, request))

    def _deliverable(self) -> list[Message]:
        return [m for m in self.network if m.deliver_at_ms <= self.now_ms
                and self.cut_until_ms.get(frozenset((m.source, m.destination)), -1) < self.now_ms]

    def _deliver(self, message: Message) -> None:
        self.network.remove(message)
        payload, destination = message.payload, message.destination
        if destination == CONTROLLER:
            error = self._alter_partition(payload)
            if error != ErrorCode.NONE:
                self._send(CONTROLLER, message.source, error)
            return
        if destination not in self.live:
            return
        replica = self.brokers[destination]
        if isinstance(payload, PartitionChange):
            replica.apply_partition_change(payload, self.now_ms)
        elif isinstance(payload, ErrorCode):
            replica.handle_alter_partition_error(payload)
        elif isinstance(payload, ReplicaFetch):
            proposed = replica.pending_alter_partition
            self._send(destination, message.source, replica.handle_follower_fetch(payload, FETCH_BYTES_MAX,
                                                                                  self.now_ms), payload)
            if replica.pending_alter_partition is not None and replica.pending_alter_partition != proposed:
                self._send(destination, CONTROLLER, replica.pending_alter_partition)  # an ISR expansion
        elif isinstance(payload, EpochEndOffsetRequest):
            self._send(destination, message.source, replica.offset_for_leader_epoch(payload), payload)
        elif isinstance(payload, FetchAnswer):
            replica.handle_fetch_answer(message.request, payload, self.now_ms)
        elif isinstance(payload, EpochEndOffset):
            replica.handle_epoch_end_offset(payload)
        else:
            raise AssertionError(f"unknown message {payload!r}")

    # -- events ----------------------------------------------------------------------------

    def step(self) -> None:
        self.steps += 1
        event = self.rng.choices(list(EVENTS), weights=list(EVENTS.values()))[0]
        getattr(self, f"_event_{event}")()
        self._collect_acks()

    def _event_deliver(self) -> None:
        ready = self._deliverable()
        if ready:
            message = self.rng.choice(ready)  # any ready message: reordering
            self.events.append(f"deliver {type(message.payload).__name__} {message.source}->{message.destination}")
            self._deliver(message)

    def _event_drop(self) -> None:
        """Any message but metadata: brokers read the metadata log in order and never miss a record."""
        droppable = [m for m in self.network if not isinstance(m.payload, PartitionChange)]
        if droppable:
            message = self.rng.choice(droppable)
            self.network.remove(message)
            self.events.append(f"drop {type(message.payload).__name__} {message.source}->{message.destination}")

    def _event_fetch(self) -> None:
        broker = self.rng.choice(sorted(self.live))
        replica = self.brokers[broker]
        request = replica.epoch_end_offset_request() or replica.fetch_request()
        if request is not None and replica.leader_id != NO_LEADER:
            self.events.append(f"{broker} sends {type(request).__name__} to {replica.leader_id}")
            self._send(broker, replica.leader_id, request)

    def _event_produce(self) -> None:
        leaders = [b for b in sorted(self.live) if self.brokers[b].role is Role.LEADER]
        if not leaders or self.next_value >= RECORDS_MAX:
            return
        leader = self.rng.choice(leaders)
        value = b"v%d" % self.next_value
        replica = self.brokers[leader]
        try:
            info = replica.append_as_leader(build_batch([Record(0, self.now_ms, None, value)]), ACKS_ALL, self.now_ms)
        except KafkaError:
            return
        self.next_value += 1
        self.pending_acks.append((leader, replica.leader_epoch, info.last_offset, value))
        self.events.append(f"produce {value.decode()} at {leader} offset {info.last_offset}")

    def _event_consume(self) -> None:
        leaders = [b for b in sorted(self.live) if self.brokers[b].role is Role.LEADER]
        if not leaders:
            return
        replica = self.brokers[self.rng.choice(leaders)]
        read = replica.read_for_consumer(replica.log.log_start_offset, FETCH_BYTES_MAX)
        for batch in iter_batches(read.records):
            for record in batch.records():
                if record.offset >= replica.high_watermark:
                    raise _Found("VIS-1", f"consumer got offset {record.offset} from broker {replica.broker_id} "
                                          f"at or above its high watermark {replica.high_watermark}")
                seen = self.consumed.setdefault(record.offset, record.value)
                if seen != record.value:
                    raise _Found("VIS-2", f"offset {record.offset} was read as {seen!r}, now {record.value!r}")

    def _event_tick(self) -> None:
        self.now_ms += self.rng.randint(1, TICK_MS_MAX)

    def _event_shrink(self) -> None:
        for broker in sorted(self.live):
            request = self.brokers[broker].maybe_shrink_isr(self.now_ms)
            if request is not None:
                self._send(broker, CONTROLLER, request)

    def _event_cut(self) -> None:
        a, b = self.rng.sample([CONTROLLER, *self.brokers], 2)
        self.cut_until_ms[frozenset((a, b))] = self.now_ms + self.rng.randint(1, PARTITION_MS_MAX)
        self.events.append(f"network partition between {a} and {b}")

    def _event_crash(self) -> None:
        if self.crashes >= CRASHES_MAX or len(self.live) == 1:
            return
        broker = self.rng.choice(sorted(self.live))
        self.crashes += 1
        self.live.discard(broker)
        self.events.append(f"crash {broker}")
        change = self.change
        if broker in change.isr and len(change.isr) > 1:
            isr = tuple(b for b in change.isr if b != broker)
            leader = change.leader_id if change.leader_id != broker else NO_LEADER
            self.change = PartitionChange(leader, change.leader_epoch, change.partition_epoch, change.replicas, isr)
        if change.leader_id == broker:
            self._elect(exclude=broker)
        else:
            self._publish(PartitionChange(self.change.leader_id, self.change.leader_epoch,
                                          self.change.partition_epoch + 1, self.change.replicas, self.change.isr))

    def _event_restart(self) -> None:
        down = sorted(set(self.brokers) - self.live)
        if not down:
            return
        broker = self.rng.choice(down)
        old = self.brokers[broker]
        for segment in old.log.segments:
            segment.close()
        self.brokers[broker] = self._open(broker, old.high_watermark)
        self.live.add(broker)
        self.events.append(f"restart {broker}")
        self.brokers[broker].apply_partition_change(self.change, self.now_ms)
        if self.change.leader_id == NO_LEADER:
            self._elect()

    def _event_elect(self) -> None:
        self.events.append("controller moves leadership")
        self._elect(exclude=self.change.leader_id)

    def _collect_acks(self) -> None:
        still = []
        for leader, epoch, offset, value in self.pending_acks:
            replica = self.brokers[leader]
            status = replica.acks_all_status(offset + 1) if leader in self.live and replica.leader_epoch == epoch \
                else ErrorCode.NOT_LEADER_OR_FOLLOWER
            if status is None:
                still.append((leader, epoch, offset, value))
            elif status == ErrorCode.NONE:
                self.acked[offset] = value
                self.events.append(f"ack {value.decode()} at offset {offset}")
        self.pending_acks = still

    # -- the checker -----------------------------------------------------------------------

    def values(self, broker: int) -> list[bytes]:
        log = self.brokers[broker].log
        read = log.read(log.log_start_offset, FETCH_BYTES_MAX)
        return [r.value for batch in iter_batches(read.records) for r in batch.records()]

    def check(self) -> None:
        logs = {b: self.values(b) for b in sorted(self.live)}
        for offset, value in self.acked.items():
            for broker in self.change.isr:
                if broker in self.live and (offset >= len(logs[broker]) or logs[broker][offset] != value):
                    raise _Found("DUR-1", f"acked {value!r} at offset {offset} is missing on ISR member {broker}")
        for a in logs:
            for b in logs:
                below = min(self.brokers[a].high_watermark, self.brokers[b].high_watermark)
                if a < b and logs[a][:below] != logs[b][:below]:
                    raise _Found("REP-1", f"brokers {a} and {b} disagree below offset {below}")
        leading = [(self.brokers[b].leader_epoch, b) for b in logs if self.brokers[b].role is Role.LEADER]
        if len({epoch for epoch, _ in leading}) != len(leading):
            raise _Found("REP-2", f"two live leaders in one epoch: {leading}")


class _Found(Exception):
    def __init__(self, guarantee_id: str, problem: str) -> None:
        super().__init__(problem)
        self.guarantee_id, self.problem = guarantee_id, problem


def run(seed: int, steps: int, bugs: ReplicationBugs = ReplicationBugs()) -> tuple[ClusterSimulation, Violation | None]:
    """Run `steps` events from `seed`; the simulation (for its figures and event log) and the
    first violation, if any."""
    simulation = ClusterSimulation(seed, bugs)
    try:
        for _ in range(steps):
            simulation.step()
            simulation.check()
        return simulation, None
    except _Found as found:
        return simulation, Violation(found.guarantee_id, found.problem, simulation.steps)
    except AssertionError as error:
        # The cores assert their own invariants (a leader epoch cache only grows, a follower
        # appends at its log end): one firing means the replicas' logs went apart.
        return simulation, Violation("REP-1", f"a replica core's own assertion failed: {error!r}", simulation.steps)
    finally:
        simulation.close()
