"""A sans-IO Raft core in the shape of KRaft (KIP-595): pull-based replication of the
metadata log among the controller quorum's voters.

Roles: FOLLOWER (with or without a known leader), PROSPECTIVE (asking for pre-votes,
KIP-996), CANDIDATE, LEADER. Followers pull entries with Fetch(fetch_offset,
last_fetched_epoch), one at a time, the next as soon as an answer arrives. A leader with
nothing new for a follower (no entries, no high watermark it has not seen) holds its Fetch
up to the request's max_wait_ms and answers it when entries are appended or the high
watermark moves (KIP-595's long poll), so a commit is not delayed by a poll interval and an
idle quorum exchanges a few messages a second. Otherwise the leader answers with entries,
or with the epoch where the follower's log diverges from its own (KIP-595 replaces
AppendEntries consistency checks with this), or with a snapshot when the follower is
behind the log start (FetchSnapshot, folded into the Fetch answer here). The leader's high
watermark is the offset a majority of voters have fetched past, and only moves once an
entry of its own epoch is in it (Raft §5.4.2: a new leader first commits the LeaderChange
entry it appends).

Observers (KIP-595): a node whose id is not among the voters, such as a broker-only node
(process.roles=broker), replicates the log without a say in it. It never votes or stands
for election, and its fetches count toward neither the high watermark nor the leader's
quorum check. It fetches from the leader like a follower and learns the high watermark
from the answers. When it knows no leader, or its leader has not answered within the fetch
timeout, it asks the voters in turn, one every retry backoff: a voter that is not the leader
of the observer's epoch answers with the leader and epoch it knows (KIP-595's
NOT_LEADER_OR_FOLLOWER with the current leader). Voters' fetches to a non-leader are still
ignored, so the voters behave exactly as without observers.

Inputs: `tick(now_ms)`, `receive(message, now_ms)`, `propose(records)`. Outputs: messages in
`outbox` (taken by the caller), committed entries via `take_committed()`, and `next_tick_ms`,
when a tick next has timed work (a caller may sleep until then). The durable state
is `epoch`, `voted_for` and `log`; the caller persists them before sending the outbox.
Randomness (election timeout jitter) comes from the `random.Random` passed in.

Elections (pre-votes, votes, BeginQuorumEpoch, check-quorum, EndQuorumEpoch) are in
raft_elections.py, a mixin of RaftNode; the messages and the configuration in raft_messages.py.
"""
from __future__ import annotations

import random as random_module
from dataclasses import dataclass, field
from typing import Any

from reference.controller.raft_elections import Elections
from reference.controller.raft_messages import (  # noqa: F401 (the core's vocabulary, imported from here too)
    FETCH_ENTRIES_MAX,
    LEADER_CHANGE,
    NO_DEADLINE_MS,
    NO_LEADER,
    NO_WAIT_MS,
    NOT_VOTED,
    OBSERVER_SESSION_TIMEOUT_MS,
    BeginQuorumEpoch,
    EndQuorumEpoch,
    Entry,
    FetchRequest,
    FetchResponse,
    RaftConfig,
    RaftRole,
    Snapshot,
    VoteRequest,
    VoteResponse,
    VoterState,
)


@dataclass
class RaftNode(Elections):
    node_id: int
    voters: tuple[int, ...]
    random: random_module.Random
    config: RaftConfig = field(default_factory=RaftConfig)
    epoch: int = 0
    voted_for: int = NOT_VOTED
    log: list[Entry] = field(default_factory=list)
    snapshot: Snapshot = Snapshot(0, 0, None)

    role: RaftRole = RaftRole.FOLLOWER
    leader_id: int = NO_LEADER
    high_watermark: int = 0
    applied_offset: int = 0  # entries below it were handed out by take_committed
    outbox: list[tuple[int, Any]] = field(default_factory=list)
    _timer_deadline_ms: int = -1
    _votes: set[int] = field(default_factory=set)
    _fetch_sent_ms: int = -1  # when the follower's Fetch in flight was sent; -1: none in flight
    _parked_fetches: dict[int, tuple[FetchRequest, int]] = field(default_factory=dict)  # voter -> (fetch, answer-by ms)
    _voter_end_offsets: dict[int, int] = field(default_factory=dict)
    _voter_last_fetch_ms: dict[int, int] = field(default_factory=dict)
    _voter_caught_up_ms: dict[int, int] = field(default_factory=dict)
    _observers: dict[int, VoterState] = field(default_factory=dict)  # the leader's view of the observers that fetched
    _last_leader_contact_ms: int = -1
    _epoch_start_offset: int = 0
    _voters_asked: int = 0  # a leaderless observer's Fetches so far: the next goes to voters[_voters_asked % len]

    def __post_init__(self) -> None:
        assert self.voters and len(set(self.voters)) == len(self.voters), self.voters
        self.applied_offset = self.high_watermark = self.snapshot.end_offset

    @property
    def is_observer(self) -> bool:
        return self.node_id not in self.voters

    # ------------------------------------------------------------ the log

    @property
    def log_start_offset(self) -> int:
        return self.snapshot.end_offset

    @property
    def log_end_offset(self) -> int:
        return self.snapshot.end_offset + len(self.log)

    @property
    def last_epoch(self) -> int:
        return self.log[-1].epoch if self.log else self.snapshot.last_epoch

    def _epoch_at(self, offset: int) -> int:
        if offset == self.log_start_offset - 1 or offset < self.log_start_offset:
            return self.snapshot.last_epoch
        return self.log[offset - self.log_start_offset].epoch

    def _end_offset_for(self, epoch: int) -> tuple[int, int]:
        """(the largest epoch <= `epoch` in this log, the offset where that epoch ends)."""
        if epoch >= self.last_epoch:
            return self.last_epoch, self.log_end_offset
        for index in range(len(self.log) - 1, -1, -1):
            if self.log[index].epoch <= epoch:
                return self.log[index].epoch, self.log_start_offset + index + 1
        return self.snapshot.last_epoch, self.log_start_offset

    def _append(self, entries) -> None:
        self.log.extend(entries)

    def _truncate_to(self, offset: int) -> None:
        assert offset >= self.high_watermark, ("committed entries are never truncated", offset, self.high_watermark)
        del self.log[offset - self.log_start_offset:]

    # ------------------------------------------------------------ inputs

    def tick(self, now_ms: int) -> None:
        if self._timer_deadline_ms < 0:
            self._reset_election_timer(now_ms)
        if self.is_observer:
            self._tick_observer(now_ms)
            return
        if self.role is RaftRole.LEADER:
            self._answer_parked_fetches(now_ms)
            self._check_quorum(now_ms)
            return
        if self.role is RaftRole.FOLLOWER and self.leader_id != NO_LEADER and self.leader_id != self.node_id:
            if self._fetch_sent_ms < 0 or now_ms - self._fetch_sent_ms >= self.config.fetch_request_timeout_ms:
                self._send_fetch(now_ms)
        if now_ms >= self._timer_deadline_ms:
            self._become_prospective(now_ms)

    @property
    def next_tick_ms(self) -> int:
        """When `tick` next has work to do: a follower's Fetch to send (none in flight, or one
        unanswered past the request timeout) or its election timer; the leader's earliest held
        Fetch to answer, or the moment its quorum check could fail. Ticking earlier is harmless,
        so a caller may sleep until then, and ticks again at once after an input that moved it
        to the past."""
        if self._timer_deadline_ms < 0:
            return self._timer_deadline_ms  # never ticked yet
        if self.is_observer:
            return self._observer_next_tick_ms
        if self.role is RaftRole.LEADER:
            return min([self._quorum_deadline_ms, *(answer_by_ms for _, answer_by_ms in self._parked_fetches.values())])
        if self.role is RaftRole.FOLLOWER and self.leader_id not in (NO_LEADER, self.node_id):
            fetch_due_ms = (self._fetch_sent_ms + self.config.fetch_request_timeout_ms
                            if self._fetch_sent_ms >= 0 else -1)
            return min(fetch_due_ms, self._timer_deadline_ms)
        return self._timer_deadline_ms

    def propose(self, records: list) -> int:
        """Append records as leader; return the offset they commit at (the HW must pass it)."""
        assert self.role is RaftRole.LEADER, "propose on the leader only"
        self._append(Entry(self.epoch, record) for record in records)
        self._maybe_advance_high_watermark()
        self._answer_parked_fetches()
        return self.log_end_offset

    def take_committed(self) -> list[tuple[int, Entry]]:
        """(offset, entry) for every entry newly below the high watermark, in order."""
        committed = [(offset, self.log[offset - self.log_start_offset])
                     for offset in range(self.applied_offset, self.high_watermark)]
        self.applied_offset = self.high_watermark
        return committed

    def take_snapshot(self, end_offset: int, state: Any) -> None:
        """The state machine's state after the entries below `end_offset` (<= applied): the log
        can forget them (Raft §7)."""
        assert self.log_start_offset <= end_offset <= self.applied_offset, (end_offset, self.applied_offset)
        last_epoch = self._epoch_at(end_offset - 1)
        del self.log[:end_offset - self.log_start_offset]
        self.snapshot = Snapshot(end_offset, last_epoch, state)

    def receive(self, message: Any, now_ms: int) -> None:
        handler = {
            VoteRequest: self._on_vote_request, VoteResponse: self._on_vote_response,
            BeginQuorumEpoch: self._on_begin_quorum_epoch, EndQuorumEpoch: self._on_end_quorum_epoch,
            FetchRequest: self._on_fetch_request,
            FetchResponse: self._on_fetch_response,
        }[type(message)]
        handler(message, now_ms)

    def holds_fetch_of(self, replica_id: int) -> bool:
        """Whether the leader holds that replica's Fetch, to answer it when there is news (the long poll)."""
        return replica_id in self._parked_fetches

    def take_outbox(self) -> list[tuple[int, Any]]:
        messages, self.outbox = self.outbox, []
        return messages

    # ------------------------------------------------------------ replication

    def _send_fetch(self, now_ms: int) -> None:
        self._fetch_sent_ms = now_ms
        destination = self.leader_id
        if destination == NO_LEADER:  # only an observer fetches without a leader: it asks the voters in turn
            destination = self.voters[self._voters_asked % len(self.voters)]
            self._voters_asked += 1
        self.outbox.append((destination, FetchRequest(self.node_id, self.epoch, self.log_end_offset,
                                                      self.last_epoch, self.high_watermark,
                                                      self.config.fetch_max_wait_ms)))

    def _tick_observer(self, now_ms: int) -> None:
        """Fetch from the leader; a leader silent for the fetch timeout is forgotten, and the
        voters are asked in turn until one names the leader."""
        if self.leader_id != NO_LEADER and now_ms >= self._timer_deadline_ms:
            self.leader_id, self._fetch_sent_ms = NO_LEADER, -1
        if now_ms >= self._observer_fetch_due_ms:
            self._send_fetch(now_ms)

    @property
    def _observer_fetch_due_ms(self) -> int:
        """Now when no Fetch is in flight; else the request timeout after it was sent to the
        leader, or the retry backoff after it was sent to a voter while no leader is known."""
        if self._fetch_sent_ms < 0:
            return self._fetch_sent_ms
        wait_ms = self.config.fetch_request_timeout_ms if self.leader_id != NO_LEADER else self.config.retry_backoff_ms
        return self._fetch_sent_ms + wait_ms

    @property
    def _observer_next_tick_ms(self) -> int:
        if self.leader_id == NO_LEADER:
            return self._observer_fetch_due_ms
        return min(self._observer_fetch_due_ms, self._timer_deadline_ms)

    def _reply(self, request: FetchRequest, **fields) -> None:
        self.outbox.append((request.replica_id, FetchResponse(self.node_id, self.epoch,
                                                              high_watermark=self.high_watermark,
                                                              fetch_offset=request.fetch_offset, **fields)))

    def _has_news_for(self, request: FetchRequest) -> bool:
        return request.fetch_offset < self.log_end_offset or request.high_watermark < self.high_watermark

    def _answer_with_entries(self, request: FetchRequest) -> None:
        start = request.fetch_offset - self.log_start_offset
        self._reply(request, entries=tuple(self.log[start:start + FETCH_ENTRIES_MAX]))

    def _answer_parked_fetches(self, now_ms: int = -1) -> None:
        """Answer the held fetches that now have entries or a newer high watermark to carry, and,
        given the time, those whose max wait is up."""
        for replica_id, (request, answer_by_ms) in list(self._parked_fetches.items()):
            if self._has_news_for(request) or answer_by_ms <= now_ms:
                del self._parked_fetches[replica_id]
                self._answer_with_entries(request)

    def _on_fetch_request(self, request: FetchRequest, now_ms: int) -> None:
        if request.replica_id not in self.voters and (self.role is not RaftRole.LEADER or request.epoch != self.epoch):
            # An observer asked a voter that is not its epoch's leader: name the leader and epoch we
            # know (KIP-595's NOT_LEADER_OR_FOLLOWER). A voter's Fetch here stays unanswered.
            self.outbox.append((request.replica_id, FetchResponse(self.leader_id, self.epoch, not_leader=True,
                                                                  fetch_offset=request.fetch_offset)))
            return
        if request.epoch > self.epoch:
            self._become_follower(request.epoch, NO_LEADER, now_ms)
            return
        if self.role is not RaftRole.LEADER or request.epoch < self.epoch:
            if self.role is RaftRole.LEADER:
                self._reply(request, fenced=True)
            return
        if request.fetch_offset < self.log_start_offset:
            self._reply(request, snapshot=self.snapshot)
            return
        epoch, end_offset = self._end_offset_for(request.last_fetched_epoch)
        if request.fetch_offset > self.log_start_offset and (epoch != request.last_fetched_epoch
                                                             or end_offset < request.fetch_offset):
            self._reply(request, diverging_epoch=epoch, diverging_end_offset=end_offset)
            return
        if request.replica_id in self.voters:  # an observer's progress commits nothing, keeps no leader in office
            self._voter_last_fetch_ms[request.replica_id] = now_ms
            self._voter_end_offsets[request.replica_id] = request.fetch_offset
            if request.fetch_offset >= self.log_end_offset:
                self._voter_caught_up_ms[request.replica_id] = now_ms
            self._maybe_advance_high_watermark()
        else:
            earlier = self._observers.get(request.replica_id)
            caught_up_ms = now_ms if request.fetch_offset >= self.log_end_offset else (
                earlier.last_caught_up_ms if earlier else -1)
            self._observers[request.replica_id] = VoterState(request.replica_id, request.fetch_offset, now_ms,
                                                             caught_up_ms)
        self._parked_fetches.pop(request.replica_id, None)  # overtaken by this one
        self._answer_parked_fetches()  # the high watermark this fetch moved is news to the others
        if self._has_news_for(request) or request.max_wait_ms <= NO_WAIT_MS:
            self._answer_with_entries(request)
        else:
            self._parked_fetches[request.replica_id] = (request, now_ms + request.max_wait_ms)

    def _on_fetch_response(self, response: FetchResponse, now_ms: int) -> None:
        if response.epoch > self.epoch or self._learns_leader(response.epoch, response.leader_id):
            self._become_follower(response.epoch, response.leader_id, now_ms)
        if response.not_leader:  # to an observer, from a voter that is not the leader
            if self.leader_id != NO_LEADER and self._fetch_sent_ms < 0:
                self._send_fetch(now_ms)  # it named a leader we did not know: fetch from it at once
            return
        if response.epoch != self.epoch or self.role is not RaftRole.FOLLOWER or response.fenced:
            return
        if response.snapshot is None and response.fetch_offset not in (-1, self.log_end_offset):
            return  # an answer to an older fetch, overtaken by a later one (the network may reorder)
        self._last_leader_contact_ms = now_ms
        self._reset_election_timer(now_ms)
        if response.snapshot is not None:
            self.log, self.snapshot = [], response.snapshot
            self.applied_offset = self.high_watermark = response.snapshot.end_offset
        elif response.diverging_end_offset >= 0:
            _, own_end_offset = self._end_offset_for(response.diverging_epoch)
            self._truncate_to(min(own_end_offset, response.diverging_end_offset))
        else:
            self._append(response.entries)
            self.high_watermark = max(self.high_watermark, min(response.high_watermark, self.log_end_offset))
        self._send_fetch(now_ms)  # the next one at once: the leader holds it while it has nothing new

    def observer_states(self, now_ms: int) -> list[VoterState]:
        """The leader's view of the observers that fetched in its epoch and not long ago, by id."""
        assert self.role is RaftRole.LEADER, self.role
        return [state for _, state in sorted(self._observers.items())
                if now_ms - state.last_fetch_ms < OBSERVER_SESSION_TIMEOUT_MS]

    def voter_states(self, now_ms: int) -> list[VoterState]:
        """The leader's view of every voter, itself included; lag is its end offset minus theirs."""
        assert self.role is RaftRole.LEADER, self.role
        states = []
        for voter in self.voters:
            if voter == self.node_id:
                states.append(VoterState(voter, self.log_end_offset, now_ms, now_ms))
                continue
            end_offset = self._voter_end_offsets.get(voter, -1)
            states.append(VoterState(voter, end_offset, self._voter_last_fetch_ms[voter] if end_offset >= 0 else -1,
                                     self._voter_caught_up_ms.get(voter, -1)))
        return states

    def _maybe_advance_high_watermark(self) -> None:
        offsets = sorted([self.log_end_offset, *self._voter_end_offsets.values()], reverse=True)
        majority_offset = offsets[self.majority - 1]
        if majority_offset > self.high_watermark and majority_offset > self._epoch_start_offset:
            self.high_watermark = majority_offset
