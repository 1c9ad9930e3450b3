"""ElectLeaders as the controller decides it (KIP-460), one error code per scenario, and the
automatic leader balance (auto.leader.rebalance.enable) with its check interval."""
from __future__ import annotations

from reference.controller.state import NO_LEADER, ControllerState, ElectionType
from reference.protocol.errors import ErrorCode

from .test_controller_state import commit, offline_partition, partition_of, three_brokers

PREFERRED, UNCLEAN = ElectionType.PREFERRED, ElectionType.UNCLEAN
INTERVAL_MS = 10_000


def led_by_second_replica(interval_ms: int = INTERVAL_MS) -> ControllerState:
    """Topic t (RF 3, replicas [1, 2, 3]): broker 1 shut down and came back; the ISR holds it
    again, and broker 2 leads."""
    state = three_brokers()
    state.leader_imbalance_check_interval_ms = interval_ms
    commit(state, state.create_topic("t", 1, 3, {}))
    commit(state, state.heartbeat(1, state.brokers[1].broker_epoch, 0, want_shutdown=True))
    commit(state, state.register_broker(1, "incarnation-1b", "127.0.0.1", 9091, 5))
    commit(state, state.heartbeat(1, state.brokers[1].broker_epoch, 5))
    rejoin_isr(state, [1, 2, 3])
    assert partition_of(state, "t").leader == 2
    return state


def rejoin_isr(state: ControllerState, isr: list[int]) -> None:
    partition = partition_of(state, "t")
    commit(state, state.alter_partition(partition.leader, state.brokers[partition.leader].broker_epoch,
                                        state.topic_ids["t"], 0, partition.leader_epoch, partition.partition_epoch,
                                        isr))


def elect(state: ControllerState, wanted, election_type: ElectionType) -> dict[str, dict[int, ErrorCode]]:
    results, records = state.elect_requested_leaders(wanted, election_type)
    commit(state, records)
    return results


def test_preferred_election_moves_leadership_back_then_is_not_needed():
    state = led_by_second_replica()
    epoch = partition_of(state, "t").leader_epoch
    assert elect(state, {"t": [0]}, PREFERRED) == {"t": {0: ErrorCode.NONE}}
    assert (partition_of(state, "t").leader, partition_of(state, "t").leader_epoch) == (1, epoch + 1)
    assert elect(state, {"t": [0]}, PREFERRED) == {"t": {0: ErrorCode.ELECTION_NOT_NEEDED}}


def test_preferred_replica_outside_the_isr_or_fenced_is_not_available():
    state = three_brokers()
    commit(state, state.create_topic("t", 1, 3, {}))
    commit(state, state.heartbeat(1, state.brokers[1].broker_epoch, 0, want_shutdown=True))
    assert elect(state, {"t": [0]}, PREFERRED) == {"t": {0: ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}}, "fenced"
    commit(state, state.register_broker(1, "incarnation-1b", "127.0.0.1", 9091, 5))
    commit(state, state.heartbeat(1, state.brokers[1].broker_epoch, 5))
    assert elect(state, {"t": [0]}, PREFERRED) == {"t": {0: ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}}, "not in ISR"
    assert partition_of(state, "t").leader == 2


def test_unknown_topics_and_partitions_are_answered_one_by_one():
    state = led_by_second_replica()
    assert elect(state, {"nope": [0], "t": [7, 0]}, PREFERRED) == {
        "nope": {0: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
        "t": {7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0: ErrorCode.NONE}}


def test_every_partition_leaves_out_those_that_need_no_election():
    state = led_by_second_replica()
    commit(state, state.create_topic("u", 2, 3, {}))
    assert elect(state, None, PREFERRED) == {"t": {0: ErrorCode.NONE}, "u": {}}
    assert elect(state, None, PREFERRED) == {"t": {}, "u": {}}


def test_unclean_election_is_not_needed_while_a_leader_exists():
    state = led_by_second_replica()
    assert elect(state, {"t": [0]}, UNCLEAN) == {"t": {0: ErrorCode.ELECTION_NOT_NEEDED}}


def test_unclean_election_of_a_leaderless_partition_takes_a_live_replica_outside_the_isr():
    state = offline_partition(unclean=False)  # ISR [1], broker 1 down, broker 2 back
    assert elect(state, {"t": [0]}, PREFERRED) == {"t": {0: ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}}
    assert elect(state, {"t": [0]}, UNCLEAN) == {"t": {0: ErrorCode.NONE}}
    partition = partition_of(state, "t")
    assert (partition.leader, partition.isr) == (2, [2]), "the ISR restarts as the new leader"


def test_unclean_election_without_a_live_replica_finds_no_eligible_leader():
    state = offline_partition(unclean=False)
    commit(state, state.heartbeat(2, state.brokers[2].broker_epoch, 20, want_shutdown=True))
    assert elect(state, {"t": [0]}, UNCLEAN) == {"t": {0: ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE}}
    assert partition_of(state, "t").leader == NO_LEADER


def test_leader_balance_runs_one_check_interval_after_the_imbalance_is_seen():
    state = led_by_second_replica()
    assert state.balance_partition_leaders(now_ms=100) == [], "scheduled, not run"
    assert state.leader_balance_due_ms == 100 + INTERVAL_MS
    assert state.balance_partition_leaders(now_ms=100 + INTERVAL_MS - 1) == []
    commit(state, state.balance_partition_leaders(now_ms=100 + INTERVAL_MS))
    assert partition_of(state, "t").leader == 1
    assert state.balance_partition_leaders(now_ms=200 + INTERVAL_MS) == [] and state.leader_balance_due_ms is None


def test_leader_balance_waits_for_the_preferred_replica_to_rejoin_the_isr():
    state = led_by_second_replica()
    rejoin_isr(state, [2, 3])  # broker 1 fell behind again
    state.balance_partition_leaders(now_ms=0)
    assert state.balance_partition_leaders(now_ms=INTERVAL_MS) == []
    rejoin_isr(state, [1, 2, 3])
    assert state.balance_partition_leaders(now_ms=INTERVAL_MS + 1) == [], "a new interval starts"
    commit(state, state.balance_partition_leaders(now_ms=2 * INTERVAL_MS + 1))
    assert partition_of(state, "t").leader == 1


def test_no_leader_balance_when_auto_rebalance_is_disabled():
    state = led_by_second_replica()
    state.auto_leader_rebalance_enable = False
    assert state.balance_partition_leaders(now_ms=0) == []
    assert state.balance_partition_leaders(now_ms=10 * INTERVAL_MS) == []
    assert partition_of(state, "t").leader == 2
