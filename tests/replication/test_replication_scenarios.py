"""The named bug traces of research/spec.md §2, replayed against the replica core.

Each story is told once and run twice: with the historical bug switched on, the guarantee
it names fails; with today's rules (the default), it holds. Brokers are numbers, records
are short byte strings, and the test plays controller and network one delivery at a time.
"""
from __future__ import annotations

from reference.protocol.errors import ErrorCode
from reference.replication import ReplicationBugs

from .conftest import ACKS_ALL

TODAY = ReplicationBugs()


def kip101_scenario_1(partition, bugs):
    """KIP-101 scenario 1: a follower restarts before it learns the HW that its own fetch
    advanced, truncates to its stale HW, and is elected when the leader dies."""
    p = partition([0, 1], bugs)
    p.elect(leader=0, epoch=1, isr=[0, 1])
    p.produce(0, b"m1")
    p.produce(0, b"m2")
    p.fetch(1)                   # broker 1 copies m1, m2; the leader's HW is still 0
    p.fetch(1, deliver=False)    # the leader learns broker 1 has both: HW 2; the answer is lost
    read = p.consume(0)          # consumers may now read m1, m2
    assert read == [b"m1", b"m2"]
    p.restart(1)                 # broker 1 comes back with HW 0 from its checkpoint
    p.truncate(1)
    p.crash(0)
    p.elect(leader=1, epoch=2, isr=[1])
    return read, p.consume(1)


def test_kip101_scenario_1_truncating_to_the_hw_loses_committed_records(partition):
    read, read_after = kip101_scenario_1(partition, ReplicationBugs(truncation="hw"))
    assert read_after == [], "the committed m1, m2 were truncated away and the new leader has nothing"


def test_kip101_scenario_1_epoch_truncation_keeps_committed_records(partition):
    read, read_after = kip101_scenario_1(partition, TODAY)
    assert read_after == read


def kip101_scenario_2(partition, bugs):
    """KIP-101 scenario 2: both replicas lose power; the follower's copy of m2 was in the page
    cache only; it comes back first, leads, and takes m3 at m2's offset."""
    p = partition([0, 1], bugs)
    p.elect(leader=0, epoch=1, isr=[0, 1])
    p.produce(0, b"m1")
    p.catch_up(1)
    p.produce(0, b"m2")
    p.catch_up(1)                # both hold m1, m2; both HWs are 2
    p.lose_unflushed(1, keep_offsets=1)
    p.crash(0)
    p.crash(1)
    p.restart(1)
    p.elect(leader=1, epoch=2, isr=[1])
    p.produce(1, b"m3")
    p.restart(0)                 # broker 0 rejoins as a follower of epoch 2
    p.catch_up(0)
    p.commit_alter_partition(1)  # broker 0 is back in the ISR
    p.catch_up(0)
    return p


def test_kip101_scenario_2_truncating_to_the_hw_leaves_replicas_diverged(partition):
    p = kip101_scenario_2(partition, ReplicationBugs(truncation="hw"))
    assert p.log_values(0) == [b"m1", b"m2"] and p.log_values(1) == [b"m1", b"m3"]
    assert p.diverged_below_high_watermarks() == [(1, 0, 1)], "REP-1 broken at offset 1"


def test_kip101_scenario_2_epoch_truncation_converges(partition):
    p = kip101_scenario_2(partition, TODAY)
    assert p.log_values(0) == p.log_values(1) == [b"m1", b"m3"]
    assert p.diverged_below_high_watermarks() == []


def kip279_fast_leader_changes(partition, bugs):
    """KIP-279 (KAFKA-6361): broker 1 leads epoch 2 and writes a suffix; broker 0 never hears
    of epoch 2 and is re-elected in epoch 3 with its own unreplicated epoch-1 suffix. Asked
    where epoch 2 ends, broker 0 answers with the start of epoch 3, an offset it never had
    in epoch 2."""
    p = partition([0, 1], bugs)
    p.elect(leader=0, epoch=1, isr=[0, 1])
    p.produce(0, b"m0")
    p.catch_up(1)
    p.produce(0, b"m1")                       # not replicated
    p.elect(leader=1, epoch=2, isr=[1], tell=[1])
    p.produce(1, b"y1")
    p.produce(1, b"y2")
    p.elect(leader=0, epoch=3, isr=[0, 1])    # broker 0 skips epoch 2 entirely
    p.produce(0, b"m2")
    p.catch_up(1)
    return p


def test_kip279_end_offset_alone_leaves_replicas_diverged(partition):
    p = kip279_fast_leader_changes(partition, ReplicationBugs(truncation="kip101"))
    assert p.log_values(0) == [b"m0", b"m1", b"m2"]
    assert p.log_values(1) == [b"m0", b"y1", b"m2"]
    assert p.diverged_below_high_watermarks() == [(1, 0, 1)]


def test_kip279_walking_back_by_epoch_converges(partition):
    p = kip279_fast_leader_changes(partition, TODAY)
    assert p.log_values(1) == p.log_values(0) == [b"m0", b"m1", b"m2"]
    assert p.diverged_below_high_watermarks() == []


def kip320_stale_follower(partition, bugs):
    """KIP-320 (KAFKA-6880): broker 2 misses epochs 2 and 3 and keeps fetching from broker 0
    under epoch 1, without truncating its epoch-1 suffix; broker 0 counts it into the HW."""
    p = partition([0, 1, 2], bugs)
    p.elect(leader=0, epoch=1, isr=[0, 1, 2])
    p.produce(0, b"m0")
    p.catch_up(1)
    p.catch_up(2)
    p.produce(0, b"m1")
    p.fetch(2)                                    # only broker 2 copies m1
    p.elect(leader=1, epoch=2, isr=[0, 1, 2], tell=[0, 1])  # broker 2 not yet dropped from the ISR
    p.produce(1, b"y1")
    p.catch_up(0)                                 # broker 0 truncates m1 and copies y1
    p.crash(1)
    p.elect(leader=0, epoch=3, isr=[0, 2], tell=[0])
    p.produce(0, b"m2")
    stale_errors = [p.fetch(2, leader=0), p.fetch(2, leader=0)]  # broker 2 still thinks epoch 1
    read = p.consume(0)
    p.crash(0)
    p.elect(leader=2, epoch=4, isr=[2])
    return stale_errors, read, p.consume(2)


def test_kip320_counting_a_fenced_follower_breaks_consistent_reads(partition):
    errors, read, read_after = kip320_stale_follower(partition, ReplicationBugs(count_fenced_follower_into_hw=True))
    assert errors == [ErrorCode.NONE, ErrorCode.NONE]
    assert read == [b"m0", b"y1", b"m2"]
    assert read_after == [b"m0", b"m1", b"m2"], "VIS-2 broken: offset 1 was read as y1, now it is m1"


def test_kip320_fenced_fetches_keep_reads_consistent(partition):
    errors, read, read_after = kip320_stale_follower(partition, TODAY)
    assert errors == [ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_LEADER_EPOCH]
    assert read == [b"m0"], "y1 and m2 stay uncommitted while broker 2 is fenced"
    assert read_after[:len(read)] == read


def ack_then_leader_dies(partition, bugs):
    """acks=all with min.insync.replicas=2: the leader dies before its follower fetches."""
    p = partition([0, 1], bugs, min_insync_replicas=2)
    p.elect(leader=0, epoch=1, isr=[0, 1])
    required_offset = p.produce(0, b"m0", acks=ACKS_ALL)
    acked = p[0].acks_all_status(required_offset) == ErrorCode.NONE
    p.crash(0)
    p.elect(leader=1, epoch=2, isr=[1])
    return acked, p.log_values(1)


def test_ack_before_isr_loses_an_acked_record(partition):
    acked, survivor = ack_then_leader_dies(partition, ReplicationBugs(ack_before_isr=True))
    assert acked and survivor == [], "DUR-1 broken: m0 was acked and is gone"


def test_acks_all_waits_for_the_isr(partition):
    acked, survivor = ack_then_leader_dies(partition, TODAY)
    assert not acked


def read_then_leader_dies(partition, bugs):
    """A consumer reads from the leader before its follower copied the record; the leader dies."""
    p = partition([0, 1], bugs)
    p.elect(leader=0, epoch=1, isr=[0, 1])
    p.produce(0, b"m0")
    read = p.consume(0)
    p.crash(0)
    p.elect(leader=1, epoch=2, isr=[1])
    p.produce(1, b"n0")
    return read, p.consume(1)


def test_reading_above_the_hw_shows_a_record_that_is_later_replaced(partition):
    read, read_after = read_then_leader_dies(partition, ReplicationBugs(read_above_hw=True))
    assert read == [b"m0"] and read_after == [b"n0"], "VIS-1/VIS-2 broken: offset 0 was m0, now n0"


def test_reads_stop_at_the_hw(partition):
    read, read_after = read_then_leader_dies(partition, TODAY)
    assert read == [] and read_after == [b"n0"]
