"""The leader's log start offset reaches its followers: records deleted on the leader
(DeleteRecords, retention) are deleted on every replica, so a follower that takes over
does not serve them again."""
from __future__ import annotations

from reference.protocol.errors import ErrorCode


def test_delete_records_on_the_leader_moves_the_followers_log_start_offset(partition):
    p = partition([0, 1])
    p.elect(leader=0, epoch=1, isr=[0, 1])
    for value in (b"a", b"b", b"c", b"d"):
        p.produce(0, value)
    p.catch_up(1)
    assert p[1].high_watermark == 4
    p[0].log.delete_records_before(3)               # DeleteRecords(before offset 3) on the leader
    p.fetch(1)
    assert p[1].log.log_start_offset == 3 and p.log_values(1) == [b"d"]
    p.elect(leader=1, epoch=2, isr=[0, 1])          # the follower takes over: offsets 0..2 stay gone
    assert p.consume(1) == [b"d"]



def test_a_follower_behind_the_leaders_log_start_starts_over_there(partition):
    p = partition([0, 1])
    p.elect(leader=0, epoch=1, isr=[0, 1])
    p.produce(0, b"a")
    p.catch_up(1)
    p.crash(1)
    p.elect(leader=0, epoch=2, isr=[0])
    for value in (b"b", b"c", b"d", b"e"):
        p.produce(0, value)
    p[0].log.roll(p.now_ms)
    p[0].log.delete_records_before(4)               # the leader no longer has offsets 1..3 the follower lacks
    p.restart(1)
    p.truncate(1)
    assert p.fetch(1) == ErrorCode.OFFSET_OUT_OF_RANGE
    assert p[1].log.log_start_offset == p[1].log.log_end_offset == 4 and p.log_values(1) == []
    p.catch_up(1)
    assert p.log_values(1) == p.log_values(0) == [b"e"]
    assert p[1].high_watermark == p[0].high_watermark == 5
    p.crash(1)
    p.restart(1)                                    # the new start survives a restart
    assert p[1].log.log_start_offset == 4 and p.log_values(1) == [b"e"]
