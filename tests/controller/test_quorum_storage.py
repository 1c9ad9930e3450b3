"""The controller quorum's storage (reference/node/quorum.py): an entry is on disk, fsynced,
before the Raft core's log holds it, and the first OSError on the metadata log or
quorum-state stops the node (on_storage_failure, once) instead of leaving the in-memory log
ahead of the file. The failures are the kernel's own: a write past RLIMIT_FSIZE fails with
EFBIG (SIGXFSZ ignored), for this process, only while the limit is lowered.
"""
from __future__ import annotations

import contextlib
import os
import resource
import signal

import pytest

from reference.controller.raft import RaftConfig, RaftRole, VoteRequest
from reference.node.quorum import DurableRaftNode
from reference.protocol.errors import ErrorCode, KafkaError

STEP_MS = 10


@contextlib.contextmanager
def file_size_limit(bytes_max: int):
    """Writes that would make any file of this process larger than bytes_max fail with EFBIG."""
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (bytes_max, limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, handler)


def open_node(log_dir: str, voters=(1,)) -> tuple[DurableRaftNode, list[str]]:
    node = DurableRaftNode.open(log_dir, 1, voters, RaftConfig(), now_ms=0)
    failures: list[str] = []
    node.on_storage_failure = failures.append
    return node, failures


def sole_leader(log_dir: str) -> tuple[DurableRaftNode, list[str]]:
    node, failures = open_node(log_dir)
    now_ms = 0
    while node.role is not RaftRole.LEADER:
        now_ms += STEP_MS
        node.tick(now_ms)
        node.persist(now_ms)
    return node, failures


def segment_bytes(log_dir: str) -> int:
    return max(os.path.getsize(os.path.join(log_dir, name)) for name in os.listdir(log_dir) if name.endswith(".log"))


def test_an_entry_is_fsynced_before_the_leader_counts_or_applies_it(tmp_path):
    node, failures = sole_leader(str(tmp_path))
    commit_offset = node.propose([{"type": "TopicRecord", "name": "t"}])
    assert node.high_watermark == commit_offset == node.log_end_offset  # a single voter commits at once
    assert node.metadata_log.log_end_offset == node.log_end_offset
    assert not node.metadata_log._changed_since_flush  # nothing appended that is not fsynced
    node.close()
    reopened, _ = open_node(str(tmp_path))
    assert reopened.log == node.log and not failures


def test_a_failed_metadata_log_append_stops_the_node_and_leaves_the_log_as_the_file(tmp_path):
    node, failures = sole_leader(str(tmp_path))
    before = (node.log_end_offset, node.high_watermark, node.metadata_log.log_end_offset)
    size_bytes = segment_bytes(str(tmp_path))
    node.take_committed()
    with file_size_limit(size_bytes + 10), pytest.raises(KafkaError) as raised:  # the batch writes short
        node.propose([{"type": "TopicRecord", "name": "x" * 1000}])
    assert raised.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert failures == [raised.value.message] and failures[0].startswith(f"could not append to {tmp_path}: ")
    assert segment_bytes(str(tmp_path)) == size_bytes  # the short write was cut back off
    assert (node.log_end_offset, node.high_watermark, node.metadata_log.log_end_offset) == before
    assert node.take_committed() == []  # nothing applied that is not on disk
    with pytest.raises(KafkaError):  # the disk is fine again, but a failed node never writes again
        node.propose([{"type": "TopicRecord", "name": "y"}])
    assert node.metadata_log.log_end_offset == before[2] and len(failures) == 1


def test_a_failed_quorum_state_write_stops_the_node_before_the_vote_is_sent(tmp_path):
    node, failures = open_node(str(tmp_path), voters=(1, 2, 3))
    node.tick(0)
    node.receive(VoteRequest(2, 5, 0, 0, pre_vote=False), now_ms=0)
    assert node.voted_for == 2
    with file_size_limit(1), pytest.raises(KafkaError):
        node.persist(0)
    assert len(failures) == 1 and "quorum-state" in failures[0]
    assert not os.path.exists(os.path.join(str(tmp_path), "quorum-state"))  # no vote on disk: none may be sent
