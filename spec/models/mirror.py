"""A mirror copying one source partition into its remote partition, with crashes: its
progress, its offset syncs and the checkpoints that translate a group's offset (MM2).

The source partition grows by records and by gaps (offsets that hold nothing to copy:
transaction markers, compacted records). The mirror polls one offset at a time into memory,
writes a polled record into the target, and commits its progress (the next source offset to
copy, stored in the target); after a commit it writes an offset sync naming the newest copy.
At least once, a write is visible at once and progress is written after it; exactly once
(`exactly_once`), writes join an open transaction that commits with the progress, and a
crash aborts it. A crash loses everything in memory; a restart continues from the stored
progress. A consumer group commits offsets in the source, and a checkpoint translates the
group's offset with the newest sync at or below it (one past that sync's copy when the group
is ahead of it), as MirrorCheckpointTask does.

Two switches re-create mistakes the invariants catch: `commit_before_write` stores progress
past records still in memory (a crash then loses them, MIR-1), and `extrapolate` translates a
group's offset by adding its distance from the sync, which overshoots when the source has
gaps (KAFKA-12468, MIR-3).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple

from spec.model import Action, Invariant

RECORD, GAP = True, False
MIRROR_BUGS = ("commit-before-write", "extrapolate")  # the config's switches, as `kspec spec explore --bug`


class MirrorState(NamedTuple):
    source: tuple[bool, ...]             # RECORD or GAP at each source offset
    position: int | None                 # the mirror's next offset to poll; None while it is down
    polled: tuple[int, ...]              # polled records not yet written (in memory)
    pending: tuple[int, ...]             # exactly once: written into the open transaction
    target: tuple[int, ...]              # the remote partition as read_committed sees it (source offsets)
    stored: int                          # the committed progress: the next source offset to copy
    syncs: tuple[tuple[int, int], ...]   # (upstream, downstream) since the upstream last went back
    group: int                           # the group's committed offset in the source
    checkpoints: tuple[tuple[int, int], ...]  # every (group offset, translated target offset) emitted
    crashes: int


@dataclass(frozen=True)
class MirrorConfig:
    records: int = 3                 # source offsets (records or gaps)
    crashes: int = 2
    exactly_once: bool = True
    commit_before_write: bool = False
    extrapolate: bool = False


# -- actions ---------------------------------------------------------------------------------

def produce(state: MirrorState, kind: bool) -> MirrorState:
    return state._replace(source=state.source + (kind,))


def poll(state: MirrorState) -> MirrorState:
    """The mirror reads the next offset; a gap holds nothing to copy."""
    assert state.position is not None and state.position < len(state.source) and not state.polled
    polled = (state.position,) if state.source[state.position] == RECORD else ()
    return state._replace(position=state.position + 1, polled=polled)


def write(state: MirrorState, exactly_once: bool) -> MirrorState:
    assert state.polled
    if exactly_once:
        return state._replace(pending=state.pending + state.polled, polled=())
    return state._replace(target=state.target + state.polled, polled=())


def commit(state: MirrorState, commit_before_write: bool) -> MirrorState:
    """Progress up to what was written (or, wrongly, polled), then the sync for the newest copy."""
    assert state.position is not None
    stored = state.position if commit_before_write else state.position - len(state.polled)
    target = state.target + state.pending
    syncs = state.syncs
    if target:
        sync = (target[-1], len(target) - 1)
        if syncs and sync[0] < syncs[-1][0]:
            syncs = ()  # a restart copied an older offset again: older syncs no longer apply
        if sync not in syncs:
            syncs += (sync,)
    return state._replace(stored=stored, target=target, pending=(), syncs=syncs)


def crash(state: MirrorState) -> MirrorState:
    """kill -9: memory is lost and the open transaction, if any, aborts."""
    return state._replace(position=None, polled=(), pending=(), crashes=state.crashes + 1)


def restart(state: MirrorState) -> MirrorState:
    return state._replace(position=state.stored)


def group_commit(state: MirrorState) -> MirrorState:
    return state._replace(group=state.group + 1)


def translate(syncs: tuple[tuple[int, int], ...], group: int, extrapolate: bool) -> int | None:
    for upstream, downstream in reversed(syncs):
        if upstream <= group:
            if extrapolate:
                return downstream + (group - upstream)
            return downstream if upstream == group else downstream + 1
    return None


# -- invariants ------------------------------------------------------------------------------

def copies_in_source_order(state: MirrorState) -> str | None:
    """MIR-1: the first copies of the source's records are the records in source order."""
    first: list[int] = []
    for upstream in state.target:
        if upstream not in first:
            first.append(upstream)
    records = [offset for offset, kind in enumerate(state.source) if kind == RECORD]
    if first != records[:len(first)]:
        return f"first copies {first} are not the source's records {records} in order"
    return None


def progress_only_past_copies(state: MirrorState) -> str | None:
    """MIR-1: committed progress never passes a record missing from the target, so a restart
    from it loses nothing."""
    missing = [o for o in range(state.stored) if state.source[o] == RECORD and o not in state.target]
    if missing:
        return f"progress is stored at {state.stored} but records {missing} are not in the target: lost"
    return None


def no_record_twice(state: MirrorState) -> str | None:
    """MIR-2: with exactly once, no source record is in the target twice."""
    twice = sorted({o for o in state.target if state.target.count(o) > 1})
    return f"records {twice} are in the target twice: {list(state.target)}" if twice else None


def checkpoint_not_past_unconsumed(state: MirrorState) -> str | None:
    """MIR-3: a group that starts in the target at any translated offset misses no record it
    had not consumed in the source: once the mirror's progress has passed such a record (so
    it is not copied again), a copy of it lies at or after the translated offset."""
    for group, translated in state.checkpoints:
        for offset in range(group, state.stored):
            if state.source[offset] != RECORD:
                continue
            if not any(state.target[d] == offset for d in range(translated, len(state.target))):
                return (f"group offset {group} was translated to {translated}, but record {offset}, which the "
                        f"group had not consumed, has no copy at or after it: target {list(state.target)}")
    return None


class MirrorModel:
    name = "mirror"

    def __init__(self, config: MirrorConfig) -> None:
        if config.records < 1 or config.crashes < 0:
            raise ValueError("records must be at least 1 and crashes at least 0")
        self.config = config
        self.invariants = (
            Invariant("MIR-1", "copies in source order", copies_in_source_order),
            Invariant("MIR-1", "progress only past copied records", progress_only_past_copies),
            *((Invariant("MIR-2", "no record copied twice", no_record_twice),) if config.exactly_once else ()),
            Invariant("MIR-3", "checkpoint never past an unconsumed record", checkpoint_not_past_unconsumed),
        )
        self.step_invariants = ()

    def initial_states(self) -> list[MirrorState]:
        return [MirrorState((), 0, (), (), (), 0, (), 0, (), 0)]

    def successors(self, state: MirrorState) -> Iterator[tuple[Action, MirrorState]]:
        c = self.config
        if len(state.source) < c.records:
            yield ("Produce", "record"), produce(state, RECORD)
            yield ("Produce", "gap"), produce(state, GAP)
        if state.position is None:
            yield ("Restart",), restart(state)
        else:
            if state.position < len(state.source) and not state.polled:
                yield ("Poll", state.position), poll(state)
            if state.polled:
                yield ("Write", state.polled[0]), write(state, c.exactly_once)
            if state.stored != (state.position if c.commit_before_write else state.position - len(state.polled)):
                yield ("Commit",), commit(state, c.commit_before_write)
            if state.crashes < c.crashes:
                yield ("Crash",), crash(state)
        if state.group < len(state.source):
            yield ("GroupCommit", state.group + 1), group_commit(state)
        translated = translate(state.syncs, state.group, c.extrapolate)
        if translated is not None and (state.group, translated) not in state.checkpoints:
            checkpoints = tuple(sorted(state.checkpoints + ((state.group, translated),)))
            yield ("Checkpoint", state.group, translated), state._replace(checkpoints=checkpoints)

    def canonical(self, state: MirrorState) -> MirrorState:
        return state

    def renamings(self, state: MirrorState) -> tuple[MirrorState, ...]:
        return (state,)

    def describe_action(self, action: Action) -> str:
        name, *rest = action
        return {
            "Produce": lambda: f"the source partition gets a {rest[0]} at its end",
            "Poll": lambda: f"the mirror polls source offset {rest[0]}",
            "Write": lambda: f"the mirror writes record {rest[0]} into the target"
                             + (" (in its open transaction)" if self.config.exactly_once else ""),
            "Commit": lambda: "the mirror commits its progress" + (" with its transaction" if self.config.exactly_once
                                                                   else "") + ", then writes an offset sync",
            "Crash": lambda: "the mirror is killed (-9)",
            "Restart": lambda: "the mirror starts again from its stored progress",
            "GroupCommit": lambda: f"the group commits offset {rest[0]} in the source",
            "Checkpoint": lambda: f"a checkpoint translates group offset {rest[0]} to target offset {rest[1]}",
        }[name]()

    def describe_state(self, state: MirrorState) -> list[str]:
        source = "".join("r" if kind == RECORD else "." for kind in state.source)
        mirror = "down" if state.position is None else f"at {state.position}, polled {list(state.polled)}"
        return [f"source [{source}], mirror {mirror}, open transaction {list(state.pending)}, stored progress {state.stored}",
                f"target {list(state.target)}, syncs {list(state.syncs)}, group at {state.group}, "
                f"checkpoints {list(state.checkpoints)}"]
