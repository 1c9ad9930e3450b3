"""The leader's bookkeeping: HW over the ISR, ISR shrink and expansion, acks=all outcomes,
and the leader-epoch cache with its checkpoint file."""
from __future__ import annotations

import pytest

from reference.protocol.errors import ErrorCode, KafkaError
from reference.replication import LeaderEpochCache

from .conftest import ACKS_ALL


def test_high_watermark_is_the_minimum_log_end_offset_over_the_isr(partition):
    p = partition([0, 1, 2])
    p.elect(leader=0, epoch=1, isr=[0, 1, 2])
    for value in (b"a", b"b", b"c"):
        p.produce(0, value)
    p.catch_up(1)
    assert p[0].high_watermark == 0, "broker 2 has not fetched in this epoch"
    p.truncate(2)
    p.fetch(2)
    p.fetch(2)
    assert p[0].high_watermark == 3 and p[1].high_watermark == 0
    p.fetch(1)
    assert p[1].high_watermark == 3


def test_a_lagging_follower_is_dropped_after_replica_lag_time_max_ms(partition):
    p = partition([0, 1, 2], replica_lag_time_max_ms=1_000)
    p.elect(leader=0, epoch=1, isr=[0, 1, 2])
    p.produce(0, b"a")
    p.catch_up(1)
    p.now_ms = 1_000
    assert p[0].maybe_shrink_isr(p.now_ms) is None
    p.fetch(1)
    p.now_ms = 1_001
    request = p[0].maybe_shrink_isr(p.now_ms)
    assert request is not None and request.new_isr == (0, 1)
    assert p[0].high_watermark == 0, "until the controller commits, the HW still waits for broker 2"
    p.commit_alter_partition(0)
    p.fetch(1)
    assert p[0].isr == (0, 1) and p[0].high_watermark == 1


def test_a_follower_rejoins_only_after_reaching_the_leader_epoch_start(partition):
    p = partition([0, 1])
    p.elect(leader=0, epoch=1, isr=[0])
    p.produce(0, b"a")
    p.produce(0, b"b")
    p.elect(leader=0, epoch=2, isr=[0])  # the leader epoch now starts at offset 2
    p.truncate(1)
    p.fetch(1)
    assert p[0].pending_alter_partition is None, "offset 0 is below the HW but not the epoch start"
    p.fetch(1)
    assert p[0].pending_alter_partition.new_isr == (0, 1)
    assert p[0].maximal_isr == (0, 1), "the HW already counts the replica being added"
    p.produce(0, b"c")
    assert p[0].high_watermark == 2
    p.commit_alter_partition(0)
    p.fetch(1)
    p.fetch(1)
    assert p[0].isr == (0, 1) and p[0].high_watermark == 3


@pytest.mark.parametrize("error, kept", [(ErrorCode.INVALID_UPDATE_VERSION, True),
                                          (ErrorCode.OPERATION_NOT_ATTEMPTED, False)])
def test_an_expansion_the_controller_may_have_applied_keeps_counting_the_new_replica(partition, error, kept):
    """The controller commits ISR (0, 1, 2), its answer is lost, and the resend is refused for
    its stale partition epoch: broker 2 may be elected already, so until the metadata comes
    the HW must not pass what broker 2 has. A refusal that applied nothing drops the change."""
    p = partition([0, 1, 2])
    p.elect(leader=0, epoch=1, isr=[0, 1])
    p.produce(0, b"a")
    p.catch_up(1)
    p.truncate(2)
    p.fetch(2)
    p.fetch(2)  # now at the HW: proposed
    assert p[0].pending_alter_partition.new_isr == (0, 1, 2)
    p[0].handle_alter_partition_error(error)
    p.produce(0, b"b")
    p.fetch(1)
    p.fetch(1)
    assert (p[0].maximal_isr, p[0].high_watermark) == (((0, 1, 2), 1) if kept else ((0, 1), 2))
    if kept:
        p.commit_alter_partition(0)  # the metadata arrives: ISR (0, 1, 2) is committed
        p.fetch(2)
        p.fetch(2)
        assert p[0].pending_alter_partition is None and p[0].high_watermark == 2


def test_acks_all_below_min_insync_replicas(partition):
    p = partition([0, 1], min_insync_replicas=2)
    p.elect(leader=0, epoch=1, isr=[0])
    with pytest.raises(KafkaError) as refused:
        p.produce(0, b"a", acks=ACKS_ALL)
    assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert p[0].log.log_end_offset == 0
    p.elect(leader=0, epoch=1, isr=[0, 1])  # same epoch, newer partition epoch: ISR grows
    p.elect(leader=0, epoch=2, isr=[0, 1])
    p.truncate(1)
    required = p.produce(0, b"b", acks=ACKS_ALL)
    assert p[0].acks_all_status(required) is None, "waiting for broker 1"
    p.now_ms = 40_000  # broker 1 never fetches: dropped, and the HW moves on without it
    p[0].maybe_shrink_isr(p.now_ms)
    p.commit_alter_partition(0)
    assert p[0].isr == (0,) and p[0].high_watermark == required
    assert p[0].acks_all_status(required) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_a_deposed_leader_answers_not_leader(partition):
    p = partition([0, 1])
    p.elect(leader=0, epoch=1, isr=[0, 1])
    required = p.produce(0, b"a", acks=ACKS_ALL)
    p.elect(leader=1, epoch=2, isr=[0, 1])
    assert p[0].acks_all_status(required) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(KafkaError) as refused:
        p.produce(0, b"b")
    assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_leader_epoch_cache_answers_and_survives_a_restart(tmp_path):
    cache = LeaderEpochCache.in_dir(str(tmp_path))
    cache.assign(0, 0)
    cache.assign(2, 120)
    cache.assign(5, 300)
    assert cache.end_offset_for(5, log_end_offset=400) == (5, 400)
    assert cache.end_offset_for(3, log_end_offset=400) == (2, 300), "KIP-279: the epoch the answer belongs to"
    assert cache.end_offset_for(1, log_end_offset=400) == (0, 120)
    assert cache.end_offset_for(6, log_end_offset=400) == (-1, -1)
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 120\n5 300\n"
    cache.truncate_from_end(200)
    assert [entry.epoch for entry in LeaderEpochCache.in_dir(str(tmp_path)).entries] == [0, 2]


def test_a_follower_that_was_down_truncates_catches_up_and_rejoins_the_isr(partition):
    p = partition([0, 1, 2], replica_lag_time_max_ms=1_000)
    p.elect(leader=0, epoch=1, isr=[0, 1, 2])
    p.produce(0, b"a")
    p.catch_up(1)
    p.catch_up(2)
    p.produce(0, b"unreplicated")
    p.fetch(2)                              # broker 2 copies it, then dies
    p.crash(2)
    p.crash(0)                              # the leader dies too: broker 1 leads epoch 2
    p.elect(leader=1, epoch=2, isr=[1])
    p.produce(1, b"b")
    p.produce(1, b"c")
    p.restart(2)                            # broker 2 rejoins as a follower of epoch 2
    assert p.log_values(2) == [b"a", b"unreplicated"]
    p.truncate(2)
    assert p.log_values(2) == [b"a"], "its epoch-1 suffix past the leader's epoch-1 end is cut"
    p.fetch(2)
    p.fetch(2)
    assert p[1].pending_alter_partition.new_isr == (1, 2)
    p.commit_alter_partition(1)
    p.fetch(2)
    assert p.log_values(2) == p.log_values(1) == [b"a", b"b", b"c"]
    assert p[1].isr == (1, 2) and p[2].high_watermark == p[1].high_watermark == 3


def test_a_leader_deposed_and_reelected_does_not_ack_what_another_leader_replaced(partition):
    """Broker 0 appends a record in epoch 1 and waits for the ISR; broker 1 is elected (epoch 2)
    without it and takes another record at that offset; broker 0 truncates to it, follows, and
    is elected again (epoch 3). Its high watermark passes the waiting produce's offset, but the
    record there is broker 1's: the produce is answered NOT_LEADER_OR_FOLLOWER, as Kafka answers
    a DelayedProduce when its replica becomes a follower."""
    p = partition([0, 1])
    p.elect(leader=0, epoch=1, isr=[0, 1])
    p.truncate(1)
    required = p.produce(0, b"lost", acks=ACKS_ALL)
    epoch_of_append = p[0].leader_epoch
    assert p[0].acks_all_status(required, epoch_of_append) is None, "waiting for broker 1"
    p.elect(leader=1, epoch=2, isr=[1])
    p.produce(1, b"kept")
    p.elect(leader=1, epoch=2, isr=[0, 1])
    p.truncate(0)
    p.fetch(0)
    p.fetch(0)
    p.elect(leader=0, epoch=3, isr=[0, 1])
    p.truncate(1)
    p.fetch(1)
    p.fetch(1)
    assert p[0].high_watermark >= required and p[0].acks_all_status(required) == ErrorCode.NONE
    assert p[0].acks_all_status(required, epoch_of_append) == ErrorCode.NOT_LEADER_OR_FOLLOWER
