"""A classic group's states (the state machine as data), its config and its members: how a
member is stored in and restored from the group's GroupMetadataValue, and how the group's
protocol is chosen from its members' (classic.py runs the group)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reference.coordinator.records import GroupMetadata, MemberMetadata

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

# The state machine as data: the states each state may be entered from (Kafka's GroupState).
VALID_PREVIOUS_STATES = {
    PREPARING_REBALANCE: {STABLE, COMPLETING_REBALANCE, EMPTY},
    COMPLETING_REBALANCE: {PREPARING_REBALANCE},
    STABLE: {COMPLETING_REBALANCE},
    EMPTY: {PREPARING_REBALANCE},
    DEAD: {STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD},
}

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


@dataclass(frozen=True)
class ClassicGroupConfig:
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size


@dataclass
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]  # (name, metadata), in the member's order of preference
    last_heartbeat_ms: int
    assignment: bytes = b""
    join_token: Any = None  # set while the member's JoinGroup waits for the join phase to end
    sync_token: Any = None  # set while its SyncGroup waits for the leader's assignment

    def metadata(self, protocol_name: str) -> bytes:
        return next(metadata for name, metadata in self.protocols if name == protocol_name)

    def session_expired(self, now_ms: int) -> bool:
        # A member waiting for its join or sync answer cannot heartbeat; it is kept alive.
        parked = self.join_token is not None or self.sync_token is not None
        return not parked and now_ms - self.last_heartbeat_ms >= self.session_timeout_ms

    def stored(self, protocol_name: str | None) -> MemberMetadata:
        """The member as the group's GroupMetadataValue keeps it."""
        return MemberMetadata(self.member_id, self.group_instance_id, self.client_id, self.client_host,
                              self.rebalance_timeout_ms, self.session_timeout_ms,
                              self.metadata(protocol_name) if protocol_name else b"", self.assignment)


def members_from_metadata(metadata: GroupMetadata, now_ms: int) -> dict[str, ClassicMember]:
    """The members restored from a GroupMetadataValue; each must heartbeat anew from now_ms."""
    return {stored.member_id: ClassicMember(
        stored.member_id, stored.group_instance_id, stored.client_id, stored.client_host,
        stored.rebalance_timeout_ms, stored.session_timeout_ms, [(metadata.protocol_name or "", stored.subscription)],
        now_ms, stored.assignment) for stored in metadata.members}


def candidate_protocols(members: dict[str, ClassicMember]) -> set[str]:
    """The protocols every member supports."""
    sets = [{name for name, _ in member.protocols} for member in members.values()]
    return set.intersection(*sets) if sets else set()


def select_protocol(members: dict[str, ClassicMember], leader_id: str | None) -> str:
    """Each member votes for its most preferred candidate; the most votes win (ties: the
    leader's preference order)."""
    candidates = candidate_protocols(members)
    assert candidates, "no protocol common to every member"
    votes: dict[str, int] = {}
    for member in members.values():
        choice = next(name for name, _ in member.protocols if name in candidates)
        votes[choice] = votes.get(choice, 0) + 1
    leader = members.get(leader_id or "") or next(iter(members.values()))
    order = [name for name, _ in leader.protocols if name in votes]
    return max(order, key=lambda name: (votes[name], -order.index(name)))
