"""The leader's log start offset reaches its followers: records deleted on the leader
(DeleteRecords, retention) are deleted on every replica, so a follower that takes over
does not serve them again."""
from __future__ import annotations


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

