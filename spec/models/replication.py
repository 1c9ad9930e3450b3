"""Replication of one partition: replicas, leader, ISR, high watermark, leader epochs.

The model follows the shape of the ZooKeeper-era replication protocol as the KIP-101,
KIP-279 and KIP-320 work stated it. The controller has no state of its own: it updates
the quorum state (what ZooKeeper held: leader epoch, leader, ISR) atomically and sends a
LeaderAndIsr request for it. Requests stay in an unordered set, so a replica may see any
of them late, twice or never; it ignores one whose epoch is not above its own. Every
replica keeps its log (records are (record id, leader epoch) pairs), its local high
watermark and its cached view of the quorum state. A replica that believes it leads
accepts writes even when it is a zombie; fencing is what the truncation rule under test
has to get right.

The truncation rule is the parameter (`ReplicationConfig.truncation`):
  hw          truncate to the local high watermark on becoming follower (pre KIP-101)
  kip101      ask the leader for the end offset of the follower's last leader epoch
  kip279      truncate to one past the last offset where follower and leader agree
  kip320first KIP-320 first attempt: fetch with epoch checks, truncate lazily on mismatch
  kip320      KIP-279 truncation plus fencing of fetch, truncation, HW and ISR changes by
              the current leader epoch (the fixed protocol)

Beyond that protocol the model adds what durability depends on: producer acks
(acks=all records are acknowledged when a leader's high watermark passes them, and only
while its ISR has min.insync.replicas members), crashes that keep or lose the unflushed
suffix of a log, restarts, and unclean election of an out-of-sync replica.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations
from typing import Iterator, NamedTuple

from spec.model import Action, Invariant, StepInvariant

TRUNCATION_RULES = ("hw", "kip101", "kip279", "kip320first", "kip320")
ACKS = ("0", "1", "all")
NO_EPOCH = -1
NO_LEADER = -1  # an int rather than None: hashes, and so exploration order, are the same in every run
REPLICAS_MAX = 4  # the symmetry reduction memoises renamings for each of the 4! permutations


class Record(NamedTuple):
    record_id: int
    leader_epoch: int


class LeaderAndIsr(NamedTuple):
    """The quorum state, and the LeaderAndIsr request the controller sends for it."""
    leader_epoch: int
    leader: int
    isr: frozenset[int]


class Replica(NamedTuple):
    log: tuple[Record, ...]
    hw: int
    leader_epoch: int          # the epoch of the last LeaderAndIsr request it accepted
    leader: int                # who it believes leads; itself when it presumes leadership
    isr: frozenset[int]        # its cached ISR (a leader's working copy)
    online: bool


class ReplicationState(NamedTuple):
    replicas: tuple[Replica, ...]
    quorum: LeaderAndIsr
    requests: frozenset[LeaderAndIsr]
    next_record_id: int
    acked: frozenset[tuple[int, Record]]   # (offset, record) acknowledged to an acks=all producer
    crashes: int
    isr_copy_lost: bool   # a crash lost unflushed data of the last live ISR member


@dataclass(frozen=True)
class ReplicationConfig:
    replicas: int = 2
    records: int = 2
    max_epochs: int = 3
    truncation: str = "kip320"
    acks: str = "all"
    min_insync_replicas: int = 1
    max_crashes: int = 0
    unclean_leader_election: bool = False
    # LeaderAndIsr requests may arrive late, twice or out of order; when False a replica
    # only ever sees the controller's latest request (a prompt, healthy network).
    delayed_requests: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.replicas <= REPLICAS_MAX:
            raise ValueError(f"replicas must be 1..{REPLICAS_MAX}, got {self.replicas}")
        if self.records < 1 or self.max_epochs < 1 or self.max_crashes < 0:
            raise ValueError("records and max_epochs must be at least 1, max_crashes at least 0")
        if self.truncation not in TRUNCATION_RULES:
            raise ValueError(f"truncation must be one of {', '.join(TRUNCATION_RULES)}, got {self.truncation!r}")
        if self.acks not in ACKS:
            raise ValueError(f"acks must be one of {', '.join(ACKS)}, got {self.acks!r}")
        if not 1 <= self.min_insync_replicas <= self.replicas:
            raise ValueError(f"min_insync_replicas must be 1..replicas, got {self.min_insync_replicas}")


# -- truncation offsets -----------------------------------------------------------------

def first_non_matching_offset_from_tail(leader_log: tuple[Record, ...], follower_log: tuple[Record, ...]) -> int:
    """KIP-279: one past the largest offset at which both logs hold the same record."""
    for offset in range(min(len(leader_log), len(follower_log)) - 1, -1, -1):
        if leader_log[offset] == follower_log[offset]:
            return offset + 1
    return 0


def kip101_truncation_offset(leader_log: tuple[Record, ...], follower: Replica) -> int:
    """KIP-101: the leader's end offset for the follower's last epoch (OffsetsForLeaderEpoch).

    That is the leader's log end when its last record has that epoch, else the start of
    the first larger epoch; with no answer the follower falls back to its high watermark.
    """
    if not follower.log:
        return 0
    epoch = follower.log[-1].leader_epoch
    if not leader_log:
        offset = follower.hw
    elif leader_log[-1].leader_epoch == epoch:
        offset = len(leader_log)
    else:
        offset = next((o for o, record in enumerate(leader_log) if record.leader_epoch > epoch), follower.hw)
    return min(offset, len(follower.log))


class ReplicationModel:
    """All behaviours of one partition under a configuration; see the module docstring."""

    name = "replication"

    def __init__(self, config: ReplicationConfig) -> None:
        self.config = config
        self.replica_ids = range(config.replicas)
        self.fenced = config.truncation == "kip320"
        self.lazy = config.truncation == "kip320first"
        clean = not config.unclean_leader_election
        self.invariants = (
            Invariant("VIS-1", "high watermark within the log", self.hw_within_log),
            Invariant("REP-2", "one leader per epoch", self.one_leader_per_epoch),
            Invariant("REP-1", "followers match their leader", self.followers_match_leader),
        ) + ((
            Invariant("DUR-1", "acked records on every ISR member", self.acked_records_on_isr),
            Invariant("VIS-2", "exposed records on every ISR member", self.exposed_records_on_isr),
            Invariant("REP-1", "log matching below the high watermarks", self.log_matching),
        ) if clean else ())
        self.step_invariants = (
            StepInvariant("REP-2", "quorum leader epoch only grows", self.quorum_epoch_grows),
        )
        identity = tuple(self.replica_ids)
        self._renamings = {p: _Renaming(p) for p in permutations(self.replica_ids) if p != identity}

    # -- the state machine --------------------------------------------------------------

    def initial_states(self) -> list[ReplicationState]:
        everyone = frozenset(self.replica_ids)
        empty = Replica(log=(), hw=0, leader_epoch=NO_EPOCH, leader=NO_LEADER, isr=frozenset(), online=True)
        return [ReplicationState(
            replicas=(empty,) * self.config.replicas,
            quorum=LeaderAndIsr(NO_EPOCH, NO_LEADER, everyone),
            requests=frozenset(), next_record_id=0, acked=frozenset(), crashes=0, isr_copy_lost=False)]

    def successors(self, state: ReplicationState) -> Iterator[tuple[Action, ReplicationState]]:
        yield from self._controller_actions(state)
        yield from self._leader_actions(state)
        yield from self._follower_actions(state)
        if state.crashes < self.config.max_crashes:
            yield from self._crashes(state)
        yield from self._restarts(state)

    def _controller_update(self, state: ReplicationState, leader: int, isr: frozenset[int],
                           replicas: tuple[Replica, ...] | None = None,
                           crashes: int | None = None) -> ReplicationState | None:
        """The controller bumps the epoch, writes the quorum state and sends the request."""
        epoch = state.quorum.leader_epoch + 1
        if epoch >= self.config.max_epochs:
            return None
        quorum = LeaderAndIsr(epoch, leader, isr)
        # A request without a leader changes nothing on a replica, so it is not kept.
        requests = state.requests | {quorum} if leader != NO_LEADER else state.requests
        return ReplicationState(state.replicas if replicas is None else replicas, quorum, requests,
                                state.next_record_id, state.acked,
                                state.crashes if crashes is None else crashes, state.isr_copy_lost)

    def _controller_actions(self, state: ReplicationState) -> Iterator[tuple[Action, ReplicationState]]:
        quorum, replicas = state.quorum, state.replicas
        for candidate in sorted(quorum.isr):
            if candidate != quorum.leader and replicas[candidate].online:
                after = self._controller_update(state, candidate, quorum.isr)
                if after is not None:
                    yield ("ControllerElectLeader", candidate, after.quorum), after
        if self.config.unclean_leader_election and not any(replicas[r].online for r in quorum.isr):
            for candidate in self.replica_ids:
                if replicas[candidate].online:
                    after = self._controller_update(state, candidate, frozenset({candidate}))
                    if after is not None:
                        yield ("ControllerElectUnclean", candidate, after.quorum), after
        # A broker leaves the ISR (failure, shutdown or a zombie that keeps fetching).
        for replica in self.replica_ids:
            if quorum.leader == replica:
                isr = quorum.isr if quorum.isr == {replica} else quorum.isr - {replica}
                after = self._controller_update(state, NO_LEADER, isr)
            elif replica in quorum.isr:
                after = self._controller_update(state, quorum.leader, quorum.isr - {replica})
            else:
                continue
            if after is not None:
                yield ("ControllerShrinkIsr", replica, after.quorum), after

    def _deliverable(self, state: ReplicationState) -> list[LeaderAndIsr]:
        if self.config.delayed_requests:
            return sorted(state.requests)
        return sorted(r for r in state.requests if r.leader_epoch == state.quorum.leader_epoch)

    def _leader_actions(self, state: ReplicationState) -> Iterator[tuple[Action, ReplicationState]]:
        config, replicas = self.config, state.replicas
        for request in self._deliverable(state):
            leader = request.leader
            current = replicas[leader]
            if current.online and request.leader_epoch > current.leader_epoch:
                became = Replica(current.log, current.hw, request.leader_epoch, leader, request.isr, True)
                yield ("BecomeLeader", leader, request.leader_epoch), self._with(state, leader, became)
        for leader in self.replica_ids:
            current = replicas[leader]
            if current.leader != leader or not current.online:
                continue
            if state.next_record_id < config.records and (
                    config.acks != "all" or len(current.isr) >= config.min_insync_replicas):
                record = Record(state.next_record_id, current.leader_epoch)
                wrote = current._replace(log=current.log + (record,))
                after = self._with(state, leader, wrote)
                yield ("LeaderWrite", leader, record), after._replace(next_record_id=state.next_record_id + 1)
            if self._may_advance_hw(state, leader):
                yield ("LeaderIncHighWatermark", leader, current.hw + 1), self._advance_hw(state, leader)
            true_leader = state.quorum.leader == leader and state.quorum.leader_epoch == current.leader_epoch
            if not true_leader:
                continue
            for follower in sorted(current.isr - {leader}):
                if self._may_shrink(state, leader, follower):
                    yield ("LeaderShrinkIsr", leader, follower), self._set_isr(state, leader, current.isr - {follower})
            for follower in self.replica_ids:
                if follower not in current.isr and self._may_expand(state, leader, follower):
                    yield ("LeaderExpandIsr", leader, follower), self._set_isr(state, leader, current.isr | {follower})

    def _follower_actions(self, state: ReplicationState) -> Iterator[tuple[Action, ReplicationState]]:
        replicas = state.replicas
        for request in self._deliverable(state):
            leader = request.leader
            for replica in self.replica_ids:
                current = replicas[replica]
                if replica == leader or not current.online or request.leader_epoch <= current.leader_epoch:
                    continue
                offset = self._truncation_offset(state, leader, replica, request.leader_epoch)
                if offset is None:
                    continue
                became = Replica(current.log[:offset], min(offset, current.hw), request.leader_epoch,
                                 leader, request.isr, True)
                yield ("BecomeFollower", replica, leader, request.leader_epoch, offset), \
                    self._with(state, replica, became)
        for follower in self.replica_ids:
            current = replicas[follower]
            leader = current.leader
            if leader == NO_LEADER or leader == follower or not current.online:
                continue
            leading = replicas[leader]
            if leading.leader != leader or not leading.online:
                continue
            end = len(current.log)
            if end < len(leading.log) and self._may_fetch(current, leading):
                fetched = Replica(current.log + (leading.log[end],), min(leading.hw, end + 1),
                                  current.leader_epoch, leader, current.isr, True)
                yield ("FollowerFetch", follower, leader, end), self._with(state, follower, fetched)
            if self.lazy and self._needs_truncation(current, leading):
                offset = first_non_matching_offset_from_tail(leading.log, current.log)
                truncated = current._replace(log=current.log[:offset], hw=min(offset, current.hw))
                yield ("FollowerTruncate", follower, leader, offset), self._with(state, follower, truncated)

    def _crashes(self, state: ReplicationState) -> Iterator[tuple[Action, ReplicationState]]:
        """A broker stops; the controller drops it from the ISR and from leadership at once.

        Without flushed data the log keeps only what is below the local high watermark.
        When that hits the last live ISR member, DUR-1's condition ("one ISR member
        survives") is broken, and with it what VIS-2 and REP-1 promise about committed
        data; only followers agreeing with their leader is still required.
        """
        quorum = state.quorum
        for replica in self.replica_ids:
            current = state.replicas[replica]
            if not current.online:
                continue
            others_in_isr = any(state.replicas[r].online for r in quorum.isr - {replica})
            for flushed in (True, False):
                if not flushed and len(current.log) == current.hw:
                    continue  # nothing unflushed to lose: same as the flushed crash
                log = current.log if flushed else current.log[:current.hw]
                down = Replica(log, current.hw, NO_EPOCH, NO_LEADER, frozenset(), False)
                replicas = state.replicas[:replica] + (down,) + state.replicas[replica + 1:]
                if replica in quorum.isr or replica == quorum.leader:
                    leader = NO_LEADER if quorum.leader == replica else quorum.leader
                    isr = quorum.isr - {replica} if len(quorum.isr) > 1 else quorum.isr
                    after = self._controller_update(state, leader, isr, replicas, state.crashes + 1)
                    if after is None:
                        continue
                else:
                    after = state._replace(replicas=replicas, crashes=state.crashes + 1)
                if not flushed and replica in quorum.isr and not others_in_isr:
                    after = after._replace(isr_copy_lost=True)
                yield ("Crash", replica, flushed), after

    def _restarts(self, state: ReplicationState) -> Iterator[tuple[Action, ReplicationState]]:
        for replica in self.replica_ids:
            current = state.replicas[replica]
            if current.online:
                continue
            # Requests sent before the crash died with the connection; the controller
            # sends the current state again, so that is the oldest one it may still accept.
            quorum = state.quorum
            floor_epoch = quorum.leader_epoch - 1 if quorum.leader != NO_LEADER else quorum.leader_epoch
            after = self._with(state, replica, current._replace(online=True, leader_epoch=floor_epoch))
            if quorum.leader != NO_LEADER:
                after = after._replace(requests=state.requests | {quorum})
            yield ("Restart", replica), after

    # -- the rules that differ between truncation variants ------------------------------

    def _truncation_offset(self, state: ReplicationState, leader: int, replica: int, epoch: int) -> int | None:
        """Where a replica truncates when it follows `leader` in `epoch`; None: not yet possible."""
        current, leading = state.replicas[replica], state.replicas[leader]
        rule = self.config.truncation
        if rule == "kip320first":
            return len(current.log)  # truncation waits for a fetch that shows the mismatch
        if rule == "hw":
            return current.hw
        if not leading.online:
            return None  # OffsetsForLeaderEpoch needs the leader to answer
        if rule == "kip101":
            return kip101_truncation_offset(leading.log, current)
        if rule == "kip320":
            # KIP-320: the leader's state is usable only once it leads in the same epoch.
            if leading.leader != leader or leading.leader_epoch != epoch:
                return None
        return first_non_matching_offset_from_tail(leading.log, current.log)

    def _caught_up(self, leading: Replica, leader: int, follower: Replica, end_offset: int) -> bool:
        """Follower has offset end_offset - 1 (with the leader's epoch there, from kip320first on)."""
        if follower.leader != leader or not follower.online:
            return False
        if self.fenced:
            if follower.leader_epoch != leading.leader_epoch:
                return False
            return end_offset == 0 or len(follower.log) >= end_offset
        if end_offset == 0:
            return True
        if len(follower.log) < end_offset or len(leading.log) < end_offset:
            return False
        return not self.lazy or follower.log[end_offset - 1].leader_epoch == leading.log[end_offset - 1].leader_epoch

    def _may_fetch(self, follower: Replica, leading: Replica) -> bool:
        if self.fenced:
            return follower.leader_epoch == leading.leader_epoch
        if self.lazy:
            return self._caught_up(leading, follower.leader, follower, len(follower.log))
        return True

    def _needs_truncation(self, follower: Replica, leading: Replica) -> bool:
        end = len(follower.log)
        if end > len(leading.log):
            return True
        return end > 0 and follower.log[end - 1].leader_epoch != leading.log[end - 1].leader_epoch

    def _may_advance_hw(self, state: ReplicationState, leader: int) -> bool:
        leading = state.replicas[leader]
        if leading.hw >= len(leading.log):
            return False
        for member in leading.isr:
            if member != leader and not self._caught_up(leading, leader, state.replicas[member], leading.hw + 1):
                return False
        return True

    def _may_shrink(self, state: ReplicationState, leader: int, follower: int) -> bool:
        leading = state.replicas[leader]
        return not self._caught_up(leading, leader, state.replicas[follower], len(leading.log))

    def _may_expand(self, state: ReplicationState, leader: int, follower: int) -> bool:
        leading = state.replicas[leader]
        if not self._caught_up(leading, leader, state.replicas[follower], leading.hw):
            return False
        if self.fenced or self.lazy:
            # KIP-320: a new leader's HW may lag the true one; admit nobody before the
            # HW reaches the leader's own epoch.
            return leading.hw == len(leading.log) or leading.log[leading.hw].leader_epoch == leading.leader_epoch
        return True

    # -- small state helpers ------------------------------------------------------------

    @staticmethod
    def _with(state: ReplicationState, index: int, replica: Replica) -> ReplicationState:
        replicas = state.replicas[:index] + (replica,) + state.replicas[index + 1:]
        return ReplicationState(replicas, state.quorum, state.requests, state.next_record_id, state.acked,
                                state.crashes, state.isr_copy_lost)

    def _advance_hw(self, state: ReplicationState, leader: int) -> ReplicationState:
        leading = state.replicas[leader]
        after = self._with(state, leader, leading._replace(hw=leading.hw + 1))
        if self.config.acks == "all" and len(leading.isr) >= self.config.min_insync_replicas:
            after = after._replace(acked=state.acked | {(leading.hw, leading.log[leading.hw])})
        return after

    def _set_isr(self, state: ReplicationState, leader: int, isr: frozenset[int]) -> ReplicationState:
        after = self._with(state, leader, state.replicas[leader]._replace(isr=isr))
        return after._replace(quorum=state.quorum._replace(isr=isr))

    # -- invariants -----------------------------------------------------------------------

    @staticmethod
    def hw_within_log(state: ReplicationState) -> str | None:
        for replica, current in enumerate(state.replicas):
            if current.hw > len(current.log):
                return f"r{replica} has high watermark {current.hw} above its log end {len(current.log)}"
        return None

    @staticmethod
    def one_leader_per_epoch(state: ReplicationState) -> str | None:
        leaders: dict[int, int] = {}
        for request in state.requests:
            if leaders.setdefault(request.leader_epoch, request.leader) != request.leader:
                return f"epoch {request.leader_epoch} names two leaders"
        for replica, current in enumerate(state.replicas):
            if current.leader == replica and leaders.get(current.leader_epoch) != replica:
                return f"r{replica} leads epoch {current.leader_epoch}, which the controller gave to another"
        return None

    @staticmethod
    def followers_match_leader(state: ReplicationState) -> str | None:
        """REP-1: a follower in its leader's epoch agrees with it below both high watermarks."""
        replicas = state.replicas
        for follower, current in enumerate(replicas):
            leader = current.leader
            if leader == NO_LEADER or leader == follower or not current.online:
                continue
            leading = replicas[leader]
            if leading.leader != leader or leading.leader_epoch != current.leader_epoch or not leading.online:
                continue
            below = min(current.hw, leading.hw)
            if current.log[:below] != leading.log[:below]:
                return (f"r{follower} follows r{leader} in epoch {current.leader_epoch} but holds "
                        f"{_log(current.log)} against {_log(leading.log)} below offset {below}")
        return None

    @staticmethod
    def acked_records_on_isr(state: ReplicationState) -> str | None:
        """DUR-1: every acks=all record is on every live replica the controller may elect."""
        if state.isr_copy_lost:
            return None
        for offset, record in state.acked:
            for member in state.quorum.isr:
                log = state.replicas[member].log
                if state.replicas[member].online and (len(log) <= offset or log[offset] != record):
                    return f"acked {_record(record)} at offset {offset} is missing on ISR member r{member}"
        return None

    @staticmethod
    def exposed_records_on_isr(state: ReplicationState) -> str | None:
        """VIS-2: what a leader exposes below its HW is on every ISR member, so stays readable."""
        if state.isr_copy_lost:
            return None
        for leader, leading in enumerate(state.replicas):
            if leading.leader != leader or not leading.online:
                continue
            for member in state.quorum.isr:
                log = state.replicas[member].log
                if state.replicas[member].online and log[:leading.hw] != leading.log[:leading.hw]:
                    return (f"r{leader} exposes offsets below {leading.hw} but ISR member r{member} "
                            f"holds {_log(log)} against {_log(leading.log)}")
        return None

    @staticmethod
    def log_matching(state: ReplicationState) -> str | None:
        if state.isr_copy_lost:
            return None
        replicas = state.replicas
        for a in range(len(replicas)):
            for b in range(a + 1, len(replicas)):
                below = min(replicas[a].hw, replicas[b].hw)
                if replicas[a].log[:below] != replicas[b].log[:below]:
                    return f"r{a} and r{b} disagree below offset {below}"
        return None

    @staticmethod
    def quorum_epoch_grows(before: ReplicationState, after: ReplicationState) -> str | None:
        if after.quorum.leader_epoch < before.quorum.leader_epoch:
            return f"controller epoch went from {before.quorum.leader_epoch} to {after.quorum.leader_epoch}"
        return None

    # -- symmetry: replicas are interchangeable --------------------------------------------

    def canonical(self, state: ReplicationState) -> ReplicationState:
        """A representative of the state's replica-renaming class: replicas sorted by what
        they hold and believe, leaving out their names.

        Sound because the initial state, every action and every invariant treat replicas
        alike, and the result is always a renaming of the state. Replicas that tie on the
        key keep their order, so two renamings of one state may get two representatives:
        that costs some reduction, never a merge of states that are not renamings.
        """
        quorum = state.quorum
        order = sorted(self.replica_ids, key=lambda r: (
            state.replicas[r].log, state.replicas[r].hw, state.replicas[r].leader_epoch,
            state.replicas[r].online, state.replicas[r].leader == r, r in quorum.isr, r == quorum.leader))
        new_id = [0] * len(order)
        for new, old in enumerate(order):
            new_id[old] = new
        renaming = self._renamings.get(tuple(new_id))
        return state if renaming is None else renaming.state(state)

    def renamings(self, state: ReplicationState) -> Iterator[ReplicationState]:
        """The state under every renaming of replicas, itself first."""
        yield state
        for renaming in self._renamings.values():
            yield renaming.state(state)

    # -- reading a trace ----------------------------------------------------------------

    def describe_action(self, action: Action) -> str:
        name, *args = action
        if name == "ControllerElectLeader":
            return f"controller elects r{args[0]} in epoch {args[1].leader_epoch} (ISR {_ids(args[1].isr)})"
        if name == "ControllerElectUnclean":
            return f"controller elects out-of-sync r{args[0]} in epoch {args[1].leader_epoch} (unclean)"
        if name == "ControllerShrinkIsr":
            q = args[1]
            leader = "no leader" if q.leader == NO_LEADER else f"leader r{q.leader}"
            return f"controller removes r{args[0]}: epoch {q.leader_epoch}, {leader}, ISR {_ids(q.isr)}"
        if name == "BecomeLeader":
            return f"r{args[0]} accepts the request for epoch {args[1]} and becomes leader"
        if name == "LeaderWrite":
            return f"r{args[0]} appends {_record(args[1])} from a producer"
        if name == "LeaderIncHighWatermark":
            return f"r{args[0]} advances its high watermark to {args[1]}"
        if name == "LeaderShrinkIsr":
            return f"r{args[0]} removes r{args[1]} from the ISR"
        if name == "LeaderExpandIsr":
            return f"r{args[0]} adds r{args[1]} to the ISR"
        if name == "BecomeFollower":
            return f"r{args[0]} accepts the request for epoch {args[2]}, follows r{args[1]}, truncates to {args[3]}"
        if name == "FollowerFetch":
            return f"r{args[0]} fetches offset {args[2]} from r{args[1]}"
        if name == "FollowerTruncate":
            return f"r{args[0]} sees its log diverge from r{args[1]} and truncates to {args[2]}"
        if name == "Crash":
            return f"r{args[0]} crashes " + ("with its log flushed" if args[1] else "losing its unflushed suffix")
        if name == "Restart":
            return f"r{args[0]} restarts"
        raise ValueError(f"unknown action {action!r}")

    def describe_state(self, state: ReplicationState) -> list[str]:
        q = state.quorum
        leader = "none" if q.leader == NO_LEADER else f"r{q.leader}"
        lines = [f"controller: epoch {q.leader_epoch}, leader {leader}, ISR {_ids(q.isr)}"]
        for replica, current in enumerate(state.replicas):
            if not current.online:
                role = "offline"
            elif current.leader == replica:
                role = f"leads e{current.leader_epoch}"
            elif current.leader == NO_LEADER:
                role = "idle"
            else:
                role = f"follows r{current.leader} in e{current.leader_epoch}"
            lines.append(f"r{replica}: {role:<18} hw {current.hw}  log {_log(current.log)}")
        if state.acked:
            lines.append("acked: " + ", ".join(f"{_record(r)}@{o}" for o, r in sorted(state.acked)))
        return lines


def _record(record: Record) -> str:
    return f"m{record.record_id}:e{record.leader_epoch}"


def _log(log: tuple[Record, ...]) -> str:
    return "[" + " ".join(_record(r) for r in log) + "]"


def _ids(members: frozenset[int]) -> str:
    return "{" + ",".join(f"r{m}" for m in sorted(members)) + "}"


class _Renaming:
    """One permutation of replica ids applied to states; parts recur, so they are memoised."""

    def __init__(self, new_id: tuple[int, ...]) -> None:
        self.new_id = new_id
        self._sets: dict[frozenset[int], frozenset[int]] = {}
        self._requests: dict[frozenset[LeaderAndIsr], frozenset[LeaderAndIsr]] = {}
        self._replicas: dict[Replica, Replica] = {}
        self._quorums: dict[LeaderAndIsr, LeaderAndIsr] = {}

    def _one(self, replica: int) -> int:
        return NO_LEADER if replica == NO_LEADER else self.new_id[replica]

    def _set(self, members: frozenset[int]) -> frozenset[int]:
        renamed = self._sets.get(members)
        if renamed is None:
            renamed = self._sets[members] = frozenset(self.new_id[m] for m in members)
        return renamed

    def _quorum(self, q: LeaderAndIsr) -> LeaderAndIsr:
        renamed = self._quorums.get(q)
        if renamed is None:
            renamed = self._quorums[q] = LeaderAndIsr(q.leader_epoch, self._one(q.leader), self._set(q.isr))
        return renamed

    def _replica(self, current: Replica) -> Replica:
        renamed = self._replicas.get(current)
        if renamed is None:
            renamed = self._replicas[current] = Replica(current.log, current.hw, current.leader_epoch,
                                                        self._one(current.leader), self._set(current.isr),
                                                        current.online)
        return renamed

    def state(self, state: ReplicationState) -> ReplicationState:
        replicas: list[Replica] = list(state.replicas)
        for old, current in enumerate(state.replicas):
            replicas[self.new_id[old]] = self._replica(current)
        requests = self._requests.get(state.requests)
        if requests is None:
            requests = self._requests[state.requests] = frozenset(self._quorum(q) for q in state.requests)
        return ReplicationState(tuple(replicas), self._quorum(state.quorum), requests, state.next_record_id,
                                state.acked, state.crashes, state.isr_copy_lost)
