"""A consumer group: members, generations, partition assignment and offset commits.

The classic (eager) protocol, reduced to what ownership and commits depend on. A member
joining or leaving, or the coordinator expiring a member's session, starts a new
generation with a round-robin assignment of the group's members. A member learns its new
assignment only when it syncs; until then it still works on its old one, and an expired
member may never learn it was expired (a zombie). Members consume their partitions from
the committed offset and commit their position; the coordinator accepts a commit only
from a current member in the current generation. With `fence_commits=False` it accepts
any commit, which the tests use to show the invariants catch zombies.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple

from spec.model import Action, Invariant, StepInvariant

NO_GENERATION = -1


class Member(NamedTuple):
    generation: int                     # the generation of its last successful sync
    owned: frozenset[int]               # partitions it believes it owns
    positions: tuple[int, ...]          # its fetch position per partition (meaningful when owned)


class GroupState(NamedTuple):
    generation: int
    group_members: frozenset[int]       # the coordinator's view
    committed: tuple[int, ...]          # committed offset per partition
    members: tuple[Member, ...]


@dataclass(frozen=True)
class GroupConfig:
    members: int = 2
    partitions: int = 2
    records: int = 1                    # records in each partition
    max_generations: int = 3
    fence_commits: bool = True


def assignment(group_members: frozenset[int], partitions: int) -> dict[int, frozenset[int]]:
    """Round-robin over the members in id order."""
    ordered = sorted(group_members)
    owned: dict[int, set[int]] = {m: set() for m in ordered}
    for partition in range(partitions):
        owned[ordered[partition % len(ordered)]].add(partition)
    return {m: frozenset(p) for m, p in owned.items()}


class GroupModel:
    name = "group"

    def __init__(self, config: GroupConfig) -> None:
        if min(config.members, config.partitions, config.records, config.max_generations) < 1:
            raise ValueError("members, partitions, records and generations must be at least 1")
        self.config = config
        self.invariants = (
            Invariant("GRP-1", "one owner per partition within a generation", self.one_owner_per_generation),
        )
        self.step_invariants = (
            StepInvariant("GRP-3", "committed offsets never move back", self.commits_never_move_back),
        )

    def initial_states(self) -> list[GroupState]:
        idle = Member(NO_GENERATION, frozenset(), (0,) * self.config.partitions)
        return [GroupState(NO_GENERATION, frozenset(), (0,) * self.config.partitions, (idle,) * self.config.members)]

    def _rebalance(self, state: GroupState, group_members: frozenset[int]) -> GroupState | None:
        if state.generation + 1 >= self.config.max_generations:
            return None
        return state._replace(generation=state.generation + 1, group_members=group_members)

    def successors(self, state: GroupState) -> Iterator[tuple[Action, GroupState]]:
        config = self.config
        for m, member in enumerate(state.members):
            if m not in state.group_members:
                after = self._rebalance(state, state.group_members | {m})
                if after is not None:
                    yield ("Join", m), after
            else:
                if member.generation < state.generation:
                    owned = assignment(state.group_members, config.partitions)[m]
                    # eager protocol: everything was revoked; new partitions start at the commit
                    positions = tuple(state.committed[p] if p in owned else 0 for p in range(config.partitions))
                    yield ("Sync", m, state.generation), self._with(state, m, Member(state.generation, owned, positions))
                left = self._rebalance(state, state.group_members - {m})
                if left is not None:
                    revoked = member._replace(owned=frozenset())
                    yield ("Leave", m), self._with(left, m, revoked)
                    yield ("SessionExpired", m), left
            for partition in sorted(member.owned):
                position = member.positions[partition]
                if position < config.records:
                    positions = member.positions[:partition] + (position + 1,) + member.positions[partition + 1:]
                    yield ("Consume", m, partition), self._with(state, m, member._replace(positions=positions))
                current = m in state.group_members and member.generation == state.generation
                if current or not config.fence_commits:
                    committed = state.committed[:partition] + (position,) + state.committed[partition + 1:]
                    if committed != state.committed:
                        yield ("Commit", m, partition, position), state._replace(committed=committed)

    @staticmethod
    def _with(state: GroupState, index: int, member: Member) -> GroupState:
        return state._replace(members=state.members[:index] + (member,) + state.members[index + 1:])

    @staticmethod
    def one_owner_per_generation(state: GroupState) -> str | None:
        """GRP-1: two members that synced the same generation never share a partition."""
        members = state.members
        for a in range(len(members)):
            for b in range(a + 1, len(members)):
                shared = members[a].owned & members[b].owned
                if members[a].generation == members[b].generation and shared:
                    return f"c{a} and c{b} both own partition(s) {sorted(shared)} in generation {members[a].generation}"
        return None

    @staticmethod
    def commits_never_move_back(before: GroupState, after: GroupState) -> str | None:
        for partition, (old, new) in enumerate(zip(before.committed, after.committed)):
            if new < old:
                return f"committed offset of partition {partition} moved back from {old} to {new}"
        return None

    def canonical(self, state: GroupState) -> GroupState:
        return state  # the round-robin assignment orders members by id: no symmetry to use

    def renamings(self, state: GroupState) -> tuple[GroupState, ...]:
        return (state,)

    def describe_action(self, action: Action) -> str:
        name, m, *rest = action
        return {
            "Join": f"c{m} joins: a new generation starts",
            "Leave": f"c{m} leaves the group: a new generation starts",
            "SessionExpired": f"the coordinator expires c{m}'s session (c{m} does not know)",
            "Sync": f"c{m} syncs and gets its assignment for generation {rest[0] if rest else ''}",
            "Consume": f"c{m} consumes the next record of partition {rest[0] if rest else ''}",
            "Commit": f"c{m} commits offset {rest[1] if len(rest) > 1 else ''} for partition {rest[0] if rest else ''}",
        }[name]

    def describe_state(self, state: GroupState) -> list[str]:
        lines = [f"coordinator: generation {state.generation}, members "
                 f"{{{','.join(f'c{m}' for m in sorted(state.group_members))}}}, committed {list(state.committed)}"]
        for m, member in enumerate(state.members):
            lines.append(f"c{m}: generation {member.generation}, owns {sorted(member.owned)}, "
                         f"positions {list(member.positions)}")
        return lines
