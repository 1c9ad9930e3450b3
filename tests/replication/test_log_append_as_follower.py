"""Log.append_as_follower keeps the leader's offsets and epochs, accepts gaps (compaction), refuses
overlaps and bad CRCs."""
from __future__ import annotations

import pytest

from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import Record, build_batch, iter_batches
from reference.storage import Log, LogConfig


def _batch(value: bytes, count: int = 1) -> bytes:
    return build_batch([Record(0, 1_000 + i, b"k", value) for i in range(count)])


def test_follower_copy_is_byte_identical_and_keeps_epochs(tmp_path):
    leader = Log(str(tmp_path / "leader"), LogConfig(), now_ms=0)
    follower = Log(str(tmp_path / "follower"), LogConfig(), now_ms=0)
    leader.append_as_leader(_batch(b"a", 3), 4, now_ms=0)
    leader.append_as_leader(_batch(b"b"), 7, now_ms=0)
    fetched = leader.read(0, 1 << 20).records
    info = follower.append_as_follower(fetched, now_ms=0)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 3, 4)
    assert follower.read(0, 1 << 20).records == fetched
    assert [b.partition_leader_epoch for b in iter_batches(follower.read(0, 1 << 20).records)] == [4, 7]


def test_follower_append_survives_reopen(tmp_path):
    leader = Log(str(tmp_path / "leader"), LogConfig(), now_ms=0)
    leader.append_as_leader(_batch(b"a", 2), 1, now_ms=0)
    follower = Log(str(tmp_path / "follower"), LogConfig(), now_ms=0)
    follower.append_as_follower(leader.read(0, 1 << 20).records, now_ms=0)
    follower.close()
    reopened = Log(str(tmp_path / "follower"), LogConfig(), now_ms=0)
    assert reopened.log_end_offset == 2


def test_follower_accepts_a_gap_refuses_an_overlap_and_a_corrupt_batch(tmp_path):
    leader = Log(str(tmp_path / "leader"), LogConfig(), now_ms=0)
    leader.append_as_leader(_batch(b"a"), 1, now_ms=0)
    leader.append_as_leader(_batch(b"b"), 1, now_ms=0)
    first, second = leader.read(0, 1 << 20).records, leader.read(1, 1 << 20).records
    corrupt = bytearray(first)
    corrupt[-1] ^= 0xFF
    follower = Log(str(tmp_path / "follower"), LogConfig(), now_ms=0)
    with pytest.raises(KafkaError):
        follower.append_as_follower(bytes(corrupt), now_ms=0)
    assert follower.log_end_offset == 0
    follower.append_as_follower(second, now_ms=0)  # offset 0 compacted away on the leader: a gap is fine
    assert follower.log_end_offset == 2 and follower.read(0, 1 << 20).records == second
    with pytest.raises(KafkaError) as overlap:
        follower.append_as_follower(first, now_ms=0)
    assert overlap.value.code == ErrorCode.CORRUPT_MESSAGE
    assert follower.log_end_offset == 2
