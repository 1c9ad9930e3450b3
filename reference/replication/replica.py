"""One partition replica on one broker, as leader or follower: sans-IO.

The leader appends produced batches stamped with its leader epoch, serves follower fetches,
tracks each follower's log end offset, advances the high watermark to the minimum log end
offset over the ISR, and proposes ISR changes (AlterPartition) when a follower falls behind
for replica.lag.time.max.ms or catches up. A follower first finds where its log diverges
from the leader's (OffsetForLeaderEpoch, KIP-101/279), truncates there, then fetches from
its log end offset and copies the leader's batches as they are.

Inputs are method calls with `now_ms`; outputs are return values (fetch answers, the
AlterPartition request to send). The caller moves requests between replicas: the asyncio
shell over sockets, a test by hand, a simulator in any order it likes.

Historical bugs can be switched back on (ReplicationBugs, all off by default) so tests and
the conformance kit can show the guarantee each fix protects.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import iter_batches
from reference.replication.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from reference.storage import Log
from reference.storage.log import AppendOrigin, LogAppendInfo, LogReadInfo

NO_LEADER = -1
UNKNOWN_OFFSET = -1
NO_LEADER_EPOCH = -1  # a fetch or OffsetForLeaderEpoch that skips the KIP-320 check
TRUNCATION_RULES = ("hw", "kip101", "kip279")


@dataclass(frozen=True)
class ReplicationBugs:
    """Historical replication bugs, re-created on request; the defaults are today's Kafka.

    truncation: "hw" truncates a new follower to its high watermark (before KIP-101);
        "kip101" truncates to the leader's end offset for the follower's latest epoch
        without comparing epochs (before KIP-279); "kip279" walks back epoch by epoch.
    ack_before_isr: acks=all is answered once the leader has the record.
    count_fenced_follower_into_hw: the leader serves, and counts into the high watermark,
        fetches from a follower in another leader epoch (before KIP-320).
    read_above_hw: consumers may read up to the log end offset.
    """
    truncation: str = "kip279"
    ack_before_isr: bool = False
    count_fenced_follower_into_hw: bool = False
    read_above_hw: bool = False

    def __post_init__(self) -> None:
        assert self.truncation in TRUNCATION_RULES, self.truncation


@dataclass(frozen=True)
class ReplicaConfig:
    replica_lag_time_max_ms: int = 30_000
    min_insync_replicas: int = 1
    bugs: ReplicationBugs = ReplicationBugs()


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    NONE = "none"  # no partition state from the controller yet


class FetchState(enum.Enum):
    TRUNCATING = "truncating"  # finding the divergence point with OffsetForLeaderEpoch
    FETCHING = "fetching"


@dataclass(frozen=True)
class PartitionChange:
    """The controller's state of the partition, as the metadata log carries it."""
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class AlterPartitionRequest:
    """A leader's proposal of a new ISR; the controller accepts it only for the current
    leader epoch and partition epoch (KIP-497)."""
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


@dataclass(frozen=True)
class ReplicaFetch:
    replica_id: int
    fetch_offset: int
    last_fetched_epoch: int
    current_leader_epoch: int


@dataclass(frozen=True)
class FetchAnswer:
    error: ErrorCode
    records: bytes | memoryview = b""  # whole batches, as the leader's log holds them
    high_watermark: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    log_end_offset: int = UNKNOWN_OFFSET


@dataclass(frozen=True)
class EpochEndOffsetRequest:
    current_leader_epoch: int
    leader_epoch: int


@dataclass(frozen=True)
class EpochEndOffset:
    error: ErrorCode
    leader_epoch: int = UNDEFINED_EPOCH
    end_offset: int = UNDEFINED_EPOCH_OFFSET


@dataclass
class FollowerState:
    """What the leader knows of one follower, from its fetches in this leader epoch."""
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_time_ms: int = 0
    last_fetch_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET


@dataclass
class PartitionReplica:
    broker_id: int
    log: Log
    epoch_cache: LeaderEpochCache
    config: ReplicaConfig = field(default_factory=ReplicaConfig)
    high_watermark: int = 0  # from the broker's checkpoint after a restart

    role: Role = Role.NONE
    leader_id: int = NO_LEADER
    leader_epoch: int = NO_LEADER_EPOCH
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    # leader only
    leader_epoch_start_offset: int = UNKNOWN_OFFSET
    followers: dict[int, FollowerState] = field(default_factory=dict)
    pending_alter_partition: AlterPartitionRequest | None = None
    # follower only
    fetch_state: FetchState = FetchState.TRUNCATING

    def __post_init__(self) -> None:
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
        self.epoch_cache.truncate_from_end(self.log.log_end_offset)  # a crash may have cut the log

    # ---------------------------------------------------------------- metadata

    def apply_partition_change(self, change: PartitionChange, now_ms: int) -> None:
        """A partition record from the controller. Older leader epochs are ignored (REP-2);
        a new leader epoch makes this replica leader or follower; the same leader epoch with
        a newer partition epoch is an ISR change."""
        assert change.leader_id == NO_LEADER or change.leader_id in change.replicas, change
        assert self.broker_id in change.replicas, (self.broker_id, change)
        if change.leader_epoch < self.leader_epoch:
            return
        if change.leader_epoch == self.leader_epoch:
            if change.partition_epoch > self.partition_epoch:
                self.partition_epoch, self.replicas, self.isr = change.partition_epoch, change.replicas, change.isr
                if self.role is Role.LEADER:
                    self.pending_alter_partition = None
                    self._maybe_advance_high_watermark()
            return
        self.leader_id, self.leader_epoch = change.leader_id, change.leader_epoch
        self.partition_epoch, self.replicas, self.isr = change.partition_epoch, change.replicas, change.isr
        self.pending_alter_partition = None
        if change.leader_id == self.broker_id:
            self._become_leader(now_ms)
        else:
            self._become_follower()

    def _become_leader(self, now_ms: int) -> None:
        self.role = Role.LEADER
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.epoch_cache.assign(self.leader_epoch, self.leader_epoch_start_offset)
        self.followers = {
            replica: FollowerState(last_caught_up_time_ms=now_ms if replica in self.isr else 0)
            for replica in self.replicas if replica != self.broker_id
        }
        self._maybe_advance_high_watermark()

    def _become_follower(self) -> None:
        self.role = Role.FOLLOWER if self.leader_id != NO_LEADER else Role.NONE
        self.followers = {}
        self.fetch_state = FetchState.TRUNCATING
        if self.config.bugs.truncation == "hw":
            # Before KIP-101: the high watermark was taken as the point where logs agree.
            self._truncate_to(self.high_watermark)
            self.fetch_state = FetchState.FETCHING
        elif self.epoch_cache.latest_epoch == UNDEFINED_EPOCH:
            self.fetch_state = FetchState.FETCHING  # nothing written yet: nothing can diverge

    def handle_alter_partition_error(self, error: ErrorCode) -> None:
        """The controller refused the proposal. A stale partition or leader epoch
        (INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH) may mean that it applied this very
        proposal and the answer was lost, the resend then refused: the change is kept until
        the metadata says which ISR is committed, so the HW goes on counting the replica being
        added, which the controller may already elect (Kafka's Partition keeps the pending
        state for these errors). Other errors mean nothing was applied: the proposal is
        dropped, and the next check proposes again from the current state."""
        assert error != ErrorCode.NONE
        if error not in (ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.FENCED_LEADER_EPOCH):
            self.pending_alter_partition = None

    # ---------------------------------------------------------------- leader

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the high watermark is computed over: the committed ISR plus any replica a
        pending AlterPartition adds, so the controller may elect it as soon as it commits
        the change (KIP-497's maximal ISR)."""
        pending = self.pending_alter_partition.new_isr if self.pending_alter_partition else ()
        return tuple(sorted(set(self.isr) | set(pending)))

    def append_as_leader(self, records: bytes, acks: int, now_ms: int,
                         origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        """A produced batch (or a transaction marker); NOT_ENOUGH_REPLICAS before the append
        when acks=all and the ISR is below min.insync.replicas."""
        self._check_leader()
        if acks == -1 and len(self.isr) < self.config.min_insync_replicas:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                             f"ISR {list(self.isr)} < min.insync.replicas={self.config.min_insync_replicas}")
        info = self.log.append_as_leader(records, self.leader_epoch, now_ms, origin)
        self._maybe_advance_high_watermark()
        return info

    def acks_all_status(self, required_offset: int, leader_epoch: int | None = None) -> ErrorCode | None:
        """For an acks=all produce whose last record is at `required_offset` - 1, appended in
        `leader_epoch`: NONE when the ISR has it, NOT_ENOUGH_REPLICAS_AFTER_APPEND when it does
        but the ISR shrank below min.insync.replicas meanwhile, NOT_LEADER_OR_FOLLOWER after a
        leader change, None to keep waiting (Kafka's DelayedProduce). A leader that lost its
        leadership and won it back since the append may have truncated those records and taken
        others at the same offsets: Kafka completes the waiting produce with NOT_LEADER_OR_FOLLOWER
        the moment the replica becomes a follower, so a changed epoch answers that here too."""
        if self.role is not Role.LEADER or (leader_epoch is not None and leader_epoch != self.leader_epoch):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.config.bugs.ack_before_isr:
            return ErrorCode.NONE
        if self.high_watermark < required_offset:
            return None
        if len(self.isr) < self.config.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    def handle_follower_fetch(self, fetch: ReplicaFetch, max_bytes: int, now_ms: int) -> FetchAnswer:
        if self.role is not Role.LEADER or fetch.replica_id not in self.followers:
            return FetchAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if not self.config.bugs.count_fenced_follower_into_hw:
            error = self._epoch_error(fetch.current_leader_epoch)
            if error is not None:
                return FetchAnswer(error)
        log = self.log
        if not log.log_start_offset <= fetch.fetch_offset <= log.log_end_offset:
            return FetchAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, b"", self.high_watermark,
                               log.log_start_offset, log.log_end_offset)
        follower = self.followers[fetch.replica_id]
        if fetch.fetch_offset >= log.log_end_offset:
            follower.last_caught_up_time_ms = now_ms
        elif fetch.fetch_offset >= follower.last_fetch_leader_log_end_offset >= 0:
            follower.last_caught_up_time_ms = max(follower.last_caught_up_time_ms, follower.last_fetch_time_ms)
        follower.log_end_offset = fetch.fetch_offset
        follower.last_fetch_time_ms = now_ms
        follower.last_fetch_leader_log_end_offset = log.log_end_offset
        self._maybe_expand_isr(fetch.replica_id)
        self._maybe_advance_high_watermark()
        read = log.read(fetch.fetch_offset, max_bytes)
        return FetchAnswer(ErrorCode.NONE, read.records, self.high_watermark, log.log_start_offset,
                           log.log_end_offset)

    def offset_for_leader_epoch(self, request: EpochEndOffsetRequest) -> EpochEndOffset:
        """The leader's end offset for an epoch (OffsetForLeaderEpoch), fenced by the asker's
        current leader epoch (KIP-320)."""
        if self.role is not Role.LEADER:
            return EpochEndOffset(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        error = self._epoch_error(request.current_leader_epoch)
        if error is not None:
            return EpochEndOffset(error)
        epoch, end_offset = self.epoch_cache.end_offset_for(request.leader_epoch, self.log.log_end_offset)
        return EpochEndOffset(ErrorCode.NONE, epoch, end_offset)

    def maybe_shrink_isr(self, now_ms: int) -> AlterPartitionRequest | None:
        """Propose removing the ISR followers not caught up within replica.lag.time.max.ms."""
        if self.role is not Role.LEADER or self.pending_alter_partition is not None:
            return None
        lagging = {replica for replica in self.isr if replica != self.broker_id
                   and now_ms - self.followers[replica].last_caught_up_time_ms > self.config.replica_lag_time_max_ms}
        if not lagging:
            return None
        return self._propose(tuple(replica for replica in self.isr if replica not in lagging))

    def read_for_consumer(self, fetch_offset: int, max_bytes: int, *, min_one_batch: bool = True) -> LogReadInfo:
        """What a consumer may read: nothing at or above the high watermark (VIS-1)."""
        self._check_leader()
        max_offset = None if self.config.bugs.read_above_hw else self.high_watermark
        return self.log.read(fetch_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)

    def _maybe_expand_isr(self, replica: int) -> None:
        """Propose adding a follower once it has reached both the high watermark and the start
        of this leader epoch: below the epoch start its log may still hold a suffix the
        leader does not have (KIP-320's rule for ISR expansion)."""
        follower = self.followers[replica]
        if (replica in self.isr or self.pending_alter_partition is not None
                or follower.log_end_offset < max(self.high_watermark, self.leader_epoch_start_offset)):
            return
        self._propose(tuple(sorted(self.isr + (replica,))))

    def _propose(self, new_isr: tuple[int, ...]) -> AlterPartitionRequest:
        assert self.broker_id in new_isr and self.pending_alter_partition is None
        self.pending_alter_partition = AlterPartitionRequest(self.broker_id, self.leader_epoch,
                                                             self.partition_epoch, new_isr)
        return self.pending_alter_partition

    def _maybe_advance_high_watermark(self) -> None:
        """HW = min log end offset over the maximal ISR, counting only followers that fetched in
        this leader epoch (their state is reset at each election); it never moves back."""
        if self.role is not Role.LEADER:
            return
        offsets = [self.log.log_end_offset]
        offsets += [self.followers[replica].log_end_offset for replica in self.maximal_isr if replica != self.broker_id]
        if UNKNOWN_OFFSET in offsets:
            return
        self.high_watermark = max(self.high_watermark, min(offsets))
        assert self.high_watermark <= self.log.log_end_offset

    def _epoch_error(self, current_leader_epoch: int) -> ErrorCode | None:
        if current_leader_epoch in (NO_LEADER_EPOCH, self.leader_epoch):
            return None
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    def _check_leader(self) -> None:
        if self.role is not Role.LEADER:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} is not the leader")

    # ---------------------------------------------------------------- follower

    def epoch_end_offset_request(self) -> EpochEndOffsetRequest | None:
        """While truncating: ask the leader where our latest epoch ends on its log."""
        if self.role is not Role.FOLLOWER or self.fetch_state is not FetchState.TRUNCATING:
            return None
        return EpochEndOffsetRequest(self.leader_epoch, self.epoch_cache.latest_epoch)

    def handle_epoch_end_offset(self, answer: EpochEndOffset) -> None:
        """Truncate by the leader's answer. Under KIP-279 the answer's epoch is compared with
        ours: when the leader never had our epoch, we cut back to where our own copy of the
        leader's epoch ends and ask again, until both name the same epoch."""
        if self.role is not Role.FOLLOWER or self.fetch_state is not FetchState.TRUNCATING:
            return
        if answer.error != ErrorCode.NONE:
            return  # stale or not yet known epoch: ask again later
        log_end_offset = self.log.log_end_offset
        if answer.end_offset == UNDEFINED_EPOCH_OFFSET:
            self._truncate_to(self.high_watermark)
        elif self.config.bugs.truncation == "kip101":
            self._truncate_to(min(answer.end_offset, log_end_offset))
        else:
            follower_epoch, follower_end_offset = self.epoch_cache.end_offset_for(answer.leader_epoch, log_end_offset)
            if follower_epoch != answer.leader_epoch:
                self._truncate_to(min(follower_end_offset, log_end_offset))
                if self.epoch_cache.latest_epoch != UNDEFINED_EPOCH:
                    return  # ask again with our next older epoch
            else:
                self._truncate_to(min(answer.end_offset, follower_end_offset))
        self.fetch_state = FetchState.FETCHING

    def fetch_request(self) -> ReplicaFetch | None:
        if self.role is not Role.FOLLOWER or self.fetch_state is not FetchState.FETCHING:
            return None
        return ReplicaFetch(self.broker_id, self.log.log_end_offset, self.epoch_cache.latest_epoch, self.leader_epoch)

    def handle_fetch_answer(self, request: ReplicaFetch, answer: FetchAnswer, now_ms: int) -> None:
        """Copy the fetched batches (leader offsets and epochs kept), take the leader's high
        watermark capped by our own log end offset, and its log start offset."""
        if (self.role is not Role.FOLLOWER or self.fetch_state is not FetchState.FETCHING
                or request.current_leader_epoch != self.leader_epoch
                or request.fetch_offset != self.log.log_end_offset):
            return  # an answer to a request from before a state change
        if answer.error == ErrorCode.OFFSET_OUT_OF_RANGE and answer.log_end_offset < request.fetch_offset:
            self.fetch_state = FetchState.TRUNCATING  # we are ahead of the leader: find where we diverge
            return
        if answer.error == ErrorCode.OFFSET_OUT_OF_RANGE and answer.log_start_offset > request.fetch_offset:
            # We are behind the leader's log start (it deleted what we lack): start over there.
            self.log.truncate_fully_and_start_at(answer.log_start_offset)
            self.epoch_cache.truncate_from_end(0)
            self.high_watermark = self.log.log_end_offset  # the leader's HW is at least its log start
            return
        if answer.error != ErrorCode.NONE:
            return
        if answer.records:
            self.log.append_as_follower(answer.records, now_ms)
            for batch in iter_batches(answer.records):
                self.epoch_cache.assign(batch.partition_leader_epoch, batch.base_offset)
        self.high_watermark = max(self.high_watermark, min(answer.high_watermark, self.log.log_end_offset))
        # DeleteRecords and retention on the leader move its log start offset; the follower
        # follows, never past its own high watermark (KIP-107).
        if answer.log_start_offset > self.log.log_start_offset:
            self.log.delete_records_before(min(answer.log_start_offset, self.high_watermark))

    def _truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self.epoch_cache.truncate_from_end(self.log.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
