"""A hand-driven partition for the replication scenarios: real logs in a temp dir, the
replica cores, and a test that plays controller and network, one delivery at a time."""
from __future__ import annotations

import os

import pytest

from reference.protocol.errors import ErrorCode
from reference.protocol.records import Record, build_batch, iter_batches
from reference.replication import LeaderEpochCache, PartitionChange, PartitionReplica, ReplicaConfig, ReplicationBugs
from reference.storage import Log, LogConfig

FETCH_BYTES_MAX = 1 << 20
ACKS_ALL, ACKS_LEADER = -1, 1


class Partition:
    """One partition replicated on brokers `replica_ids`; the test is controller and network."""

    def __init__(self, root: str, replica_ids: list[int], bugs: ReplicationBugs, min_insync_replicas: int = 1,
                 replica_lag_time_max_ms: int = 30_000) -> None:
        self.root = root
        self.replica_ids = tuple(replica_ids)
        self.config = ReplicaConfig(replica_lag_time_max_ms=replica_lag_time_max_ms,
                                    min_insync_replicas=min_insync_replicas, bugs=bugs)
        self.now_ms = 0
        self.partition_epoch = 0
        self.replicas = {replica: self._open(replica, high_watermark=0) for replica in replica_ids}
        self.dead: set[int] = set()

    def _open(self, replica: int, high_watermark: int) -> PartitionReplica:
        directory = os.path.join(self.root, f"broker-{replica}", "topic-0")
        log = Log(directory, LogConfig(), now_ms=self.now_ms)
        return PartitionReplica(replica, log, LeaderEpochCache.in_dir(directory), self.config, high_watermark)

    def __getitem__(self, replica: int) -> PartitionReplica:
        return self.replicas[replica]

    # -- controller ------------------------------------------------------------------------

    def elect(self, leader: int, epoch: int, isr: list[int], tell: list[int] | None = None) -> None:
        """The controller names `leader` for `epoch`; only the brokers in `tell` (default: all
        live ones) hear of it now, as a slow metadata fetch would have it."""
        self.partition_epoch += 1
        self.change = PartitionChange(leader, epoch, self.partition_epoch, self.replica_ids, tuple(sorted(isr)))
        for replica in (tell if tell is not None else [r for r in self.replica_ids if r not in self.dead]):
            self.replicas[replica].apply_partition_change(self.change, self.now_ms)

    def commit_alter_partition(self, leader: int) -> None:
        request = self.replicas[leader].pending_alter_partition
        assert request is not None
        self.partition_epoch += 1
        self.change = PartitionChange(leader, request.leader_epoch, self.partition_epoch, self.replica_ids,
                                      request.new_isr)
        for replica in self.replica_ids:
            if replica not in self.dead:
                self.replicas[replica].apply_partition_change(self.change, self.now_ms)

    # -- clients ---------------------------------------------------------------------------

    def produce(self, leader: int, value: bytes, acks: int = ACKS_LEADER) -> int:
        """Append one record; return the offset the acks=all wait needs the HW to pass."""
        info = self.replicas[leader].append_as_leader(build_batch([Record(0, 1_000, None, value)]), acks, self.now_ms)
        return info.last_offset + 1

    def consume(self, replica: int) -> list[bytes]:
        """What a consumer reads from `replica` as leader: every record below its HW."""
        leader = self.replicas[replica]
        read = leader.read_for_consumer(leader.log.log_start_offset, FETCH_BYTES_MAX)
        return [record.value for batch in iter_batches(read.records) for record in batch.records()]

    # -- network ---------------------------------------------------------------------------

    def fetch(self, follower: int, leader: int | None = None, deliver: bool = True) -> ErrorCode:
        """One fetch from `follower` to the leader it believes in; `deliver=False` loses the answer."""
        replica = self.replicas[follower]
        request = replica.fetch_request()
        assert request is not None, f"broker {follower} is not fetching ({replica.role}, {replica.fetch_state})"
        answer = self.replicas[leader if leader is not None else replica.leader_id].handle_follower_fetch(
            request, FETCH_BYTES_MAX, self.now_ms)
        if deliver:
            replica.handle_fetch_answer(request, answer, self.now_ms)
        return answer.error

    def truncate(self, follower: int) -> None:
        """OffsetForLeaderEpoch round trips until the follower is fetching."""
        replica = self.replicas[follower]
        for _ in range(10):
            request = replica.epoch_end_offset_request()
            if request is None:
                return
            replica.handle_epoch_end_offset(self.replicas[replica.leader_id].offset_for_leader_epoch(request))
        raise AssertionError("truncation did not finish")

    def catch_up(self, follower: int) -> None:
        self.truncate(follower)
        for _ in range(3):  # copy, then report the new end offset, then learn the HW
            self.fetch(follower)

    # -- failures --------------------------------------------------------------------------

    def crash(self, replica: int) -> None:
        self.dead.add(replica)

    def restart(self, replica: int) -> None:
        """Reopen the broker's log from disk; the HW comes from its checkpoint."""
        high_watermark = self.replicas[replica].high_watermark
        self.replicas[replica] = self._open(replica, high_watermark)
        self.dead.discard(replica)
        self.replicas[replica].apply_partition_change(self.change, self.now_ms)

    def lose_unflushed(self, replica: int, keep_offsets: int) -> None:
        """A power failure: the records from `keep_offsets` on were in the page cache only."""
        self.replicas[replica].log.truncate_to(keep_offsets)

    # -- observations ----------------------------------------------------------------------

    def log_values(self, replica: int) -> list[bytes]:
        log = self.replicas[replica].log
        read = log.read(log.log_start_offset, FETCH_BYTES_MAX)
        return [record.value for batch in iter_batches(read.records) for record in batch.records()]

    def diverged_below_high_watermarks(self) -> list[tuple[int, int, int]]:
        """REP-1: (offset, a, b) wherever live replicas a and b differ below both their HWs."""
        found = []
        live = [r for r in self.replica_ids if r not in self.dead]
        for a in live:
            for b in live:
                if a < b:
                    limit = min(self.replicas[a].high_watermark, self.replicas[b].high_watermark)
                    values_a, values_b = self.log_values(a), self.log_values(b)
                    found += [(offset, a, b) for offset in range(limit) if values_a[offset] != values_b[offset]]
        return found


@pytest.fixture
def partition(tmp_path):
    def make(replica_ids: list[int], bugs: ReplicationBugs = ReplicationBugs(), **config) -> Partition:
        return Partition(str(tmp_path / f"run-{len(list(tmp_path.iterdir()))}"), replica_ids, bugs, **config)
    return make
