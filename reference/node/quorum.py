"""The controller quorum's durable state on one node (its messages on the wire: raft_rpcs.py).

KRaft keeps the metadata log as an ordinary partition log, `__cluster_metadata-0`, and the
vote in a `quorum-state` file. DurableRaftNode does the same around the sans-IO RaftNode:
every entry the Raft core appends is written to that Log and fsynced before the core's
in-memory log holds it (one batch per run of entries of one epoch, the batch's partition
leader epoch is the Raft epoch, the record value is the metadata record as JSON), so the
leader counts itself toward the high watermark, and a follower acknowledges with its next
Fetch, only entries that are on its disk, and nothing is applied that is not (KafkaRaftClient
flushes the leader's log before updating its own end offset, and a follower's before it
fetches again). Every truncation truncates the Log too, and `persist` rewrites
`quorum-state` (epoch, voted-for) before the caller sends the outbox, as Raft requires (§5.2:
a vote or an entry is durable before anyone hears of it).

Fail-stop: any OSError on the metadata log or quorum-state leaves the node unable to keep its
promises, so it is never retried or survived. The node calls `on_storage_failure(reason)`
once (the server stops the process with that line and a non-zero exit, as Kafka's metadata
log fault handler halts and etcd panics on a WAL error) and raises KAFKA_STORAGE_ERROR; from
then on every write raises the same error without touching the disk. On start the
entries are read back; what was committed is learnt again from the leader. An observer (a
broker-only node, not in the voters) keeps the same files: its copy of the log and the epoch
it last heard of; it never votes, so its votedId stays -1.

Snapshots are not taken here: the metadata log of a test cluster stays small.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
from collections.abc import Callable

from reference.controller.raft import Entry, RaftConfig, RaftNode
from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import Record, build_batch, iter_batches
from reference.storage import Log, LogConfig
from reference.storage.atomic import replace_file

QUORUM_STATE_FILE = "quorum-state"
READ_BYTES_MAX = 1 << 20


class DurableRaftNode(RaftNode):
    """A RaftNode whose log lives in a Log on disk and whose vote lives in quorum-state."""

    metadata_log: Log
    state_path: str
    _persisted_vote: tuple[int, int] = (0, -1)
    on_storage_failure: Callable[[str], None] | None = None  # set by the server: stops the node
    storage_failure: str | None = None  # why the metadata log or quorum-state failed, once one did

    @classmethod
    def open(cls, log_dir: str, node_id: int, voters: tuple[int, ...], config: RaftConfig,
             now_ms: int) -> DurableRaftNode:
        metadata_log = Log(log_dir, LogConfig(), now_ms=now_ms)
        state_path = os.path.join(log_dir, QUORUM_STATE_FILE)
        epoch, voted_for = 0, -1
        if os.path.exists(state_path):
            with open(state_path, encoding="utf-8") as f:
                state = json.load(f)
            epoch, voted_for = state["leaderEpoch"], state["votedId"]
        node = cls(node_id, voters, random.Random(), config, epoch=epoch, voted_for=voted_for,
                   log=list(_read_entries(metadata_log)))
        node.metadata_log, node.state_path = metadata_log, state_path
        node._persisted_vote = (epoch, voted_for)
        return node

    def _append(self, entries) -> None:
        entries = list(entries)
        now_ms = 0  # the metadata log's own timestamps are not used
        with self._durable_write("append to"):
            for epoch, batch in entry_batches(entries):
                self.metadata_log.append_as_leader(batch, epoch, now_ms)
            self.metadata_log.flush(now_ms)
        super()._append(entries)

    def _truncate_to(self, offset: int) -> None:
        super()._truncate_to(offset)  # first: its check that no committed entry goes comes before the disk's
        with self._durable_write("truncate"):
            self.metadata_log.truncate_to(offset)
            self.metadata_log.flush(0)

    def persist(self, now_ms: int) -> None:
        """Make the vote durable; call before sending the outbox (the log is, as it is written)."""
        if (self.epoch, self.voted_for) != self._persisted_vote:
            with self._durable_write("write", self.state_path):
                replace_file(self.state_path, json.dumps({"leaderEpoch": self.epoch, "votedId": self.voted_for}).encode())
            self._persisted_vote = (self.epoch, self.voted_for)

    @contextlib.contextmanager
    def _durable_write(self, what: str, path: str | None = None):
        """Around a write to the metadata log or quorum-state: the first OSError stops the node."""
        if self.storage_failure is not None:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, self.storage_failure)
        try:
            yield
        except OSError as error:
            self.storage_failure = f"could not {what} {path or self.metadata_log.dir_path}: {error}"
            if self.on_storage_failure is not None:
                self.on_storage_failure(self.storage_failure)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, self.storage_failure) from error

    def close(self) -> None:
        self.metadata_log.close()


def _read_entries(metadata_log: Log):
    offset = metadata_log.log_start_offset
    assert offset == 0, "the metadata log is never trimmed (no snapshots)"
    while offset < metadata_log.log_end_offset:
        read = metadata_log.read(offset, READ_BYTES_MAX)
        yield from decode_entries(read.records)
        offset = list(iter_batches(read.records))[-1].last_offset + 1


def entry_batches(entries) -> list[tuple[int, bytes]]:
    """Entries as the metadata log holds them, on disk and in a Fetch answer: one record batch per
    run of entries of one epoch (its partition leader epoch), each record's value the metadata
    record as JSON."""
    return [(epoch, build_batch([Record(timestamp=0, value=json.dumps(entry.record, sort_keys=True).encode())
                                 for entry in run], partition_leader_epoch=epoch))
            for epoch, run in itertools.groupby(entries, key=lambda entry: entry.epoch)]


def decode_entries(records) -> tuple[Entry, ...]:
    return tuple(Entry(batch.partition_leader_epoch, json.loads(record.value))
                 for batch in iter_batches(records or b"") for record in batch.records())
