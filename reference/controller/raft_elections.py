"""Leader election of the Raft core (reference/controller/raft.py), as KRaft runs it (KIP-595):
pre-votes first (KIP-996), one vote per epoch to a log at least as up to date (Raft §5.2,
§5.4.1), BeginQuorumEpoch from the new leader, the leader's quorum check, and EndQuorumEpoch
from a leader that shuts down.

A mixin of RaftNode: these methods read and write the node's fields (epoch, voted_for, role,
leader_id, the timers) and put messages in its outbox, like the rest of the core.
"""
from __future__ import annotations

from reference.controller.raft_messages import (
    EPOCH_MAX,
    LEADER_CHANGE,
    NO_DEADLINE_MS,
    NO_LEADER,
    NOT_VOTED,
    BeginQuorumEpoch,
    EndQuorumEpoch,
    Entry,
    RaftRole,
    VoteRequest,
    VoteResponse,
)


class Elections:
    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def _reset_election_timer(self, now_ms: int) -> None:
        if self.is_observer:  # no election to stand in: the time after which its leader counts as silent
            self._timer_deadline_ms = now_ms + self.config.fetch_timeout_ms
            return
        jitter_ms = self.random.randrange(self.config.election_timeout_ms)
        self._timer_deadline_ms = now_ms + self.config.election_timeout_ms + jitter_ms

    def _become_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        assert epoch >= self.epoch
        if epoch > self.epoch:
            self.epoch, self.voted_for = epoch, NOT_VOTED
        self.role, self.leader_id = RaftRole.FOLLOWER, leader_id
        self._fetch_sent_ms = -1
        self._parked_fetches = {}  # a leader that steps down drops them: their senders fetch again
        self._last_leader_contact_ms = -1  # until the leader itself is heard (BeginQuorumEpoch, a Fetch answer)
        self._reset_election_timer(now_ms)

    def _become_prospective(self, now_ms: int) -> None:
        """Ask for pre-votes first: a node cut off from the quorum cannot win them, so it does not
        disturb the leader with ever higher epochs when it comes back (KIP-996, Raft thesis §9.6).
        At EPOCH_MAX there is no next epoch to stand in (a peer's Vote or BeginQuorumEpoch can name
        any int32 epoch, and is obeyed: only CLUSTER_ACTION principals may send them, AUTH-3), so
        the node waits for a leader of this epoch instead of asking for votes it cannot encode."""
        self._reset_election_timer(now_ms)
        if self.epoch >= EPOCH_MAX:
            return
        self.role, self._votes = RaftRole.PROSPECTIVE, {self.node_id}
        self._request_votes(self.epoch + 1, pre_vote=True)
        self._maybe_win(now_ms)

    def _become_candidate(self, now_ms: int) -> None:
        self.epoch, self.voted_for = self.epoch + 1, self.node_id
        self.role, self.leader_id, self._votes = RaftRole.CANDIDATE, NO_LEADER, {self.node_id}
        self._reset_election_timer(now_ms)
        self._request_votes(self.epoch, pre_vote=False)
        self._maybe_win(now_ms)

    def _become_leader(self, now_ms: int) -> None:
        self.role, self.leader_id = RaftRole.LEADER, self.node_id
        self._epoch_start_offset = self.log_end_offset
        self._voter_end_offsets = {voter: -1 for voter in self.voters if voter != self.node_id}
        self._voter_last_fetch_ms = {voter: now_ms for voter in self.voters if voter != self.node_id}
        self._voter_caught_up_ms = {}
        self._observers = {}
        self._append([Entry(self.epoch, LEADER_CHANGE)])  # commits the earlier epochs' entries (§5.4.2)
        for voter in self.voters:
            if voter != self.node_id:
                self.outbox.append((voter, BeginQuorumEpoch(self.node_id, self.epoch)))
        self._maybe_advance_high_watermark()

    def _request_votes(self, epoch: int, pre_vote: bool) -> None:
        request = VoteRequest(self.node_id, epoch, self.last_epoch, self.log_end_offset, pre_vote)
        self.outbox += [(voter, request) for voter in self.voters if voter != self.node_id]

    def _maybe_win(self, now_ms: int) -> None:
        if len(self._votes) < self.majority:
            return
        if self.role is RaftRole.PROSPECTIVE:
            self._become_candidate(now_ms)
        elif self.role is RaftRole.CANDIDATE:
            self._become_leader(now_ms)

    def _on_vote_request(self, request: VoteRequest, now_ms: int) -> None:
        """Grant at most one vote per epoch (§5.2), and only to a log at least as up to date as
        ours (§5.4.1). A pre-vote changes nothing here and is refused while we still hear
        from a leader. An observer has no vote to give."""
        if self.is_observer:
            return
        up_to_date = (request.last_offset_epoch, request.last_offset) >= (self.last_epoch, self.log_end_offset)
        if request.pre_vote:
            leader_alive = (self.role is RaftRole.LEADER or (
                self.leader_id != NO_LEADER and now_ms - self._last_leader_contact_ms < self.config.fetch_timeout_ms))
            granted = request.candidate_epoch > self.epoch and up_to_date and not leader_alive
            self.outbox.append((request.candidate_id,
                                VoteResponse(self.node_id, self.epoch, granted, True, self.leader_id)))
            return
        if request.candidate_epoch > self.epoch:
            self._become_follower(request.candidate_epoch, NO_LEADER, now_ms)
        granted = (request.candidate_epoch == self.epoch and self.role is RaftRole.FOLLOWER
                   and self.leader_id == NO_LEADER and self.voted_for in (NOT_VOTED, request.candidate_id)
                   and up_to_date)
        if granted:
            self.voted_for = request.candidate_id
            self._reset_election_timer(now_ms)
        self.outbox.append((request.candidate_id,
                            VoteResponse(self.node_id, self.epoch, granted, False, self.leader_id)))

    def _on_vote_response(self, response: VoteResponse, now_ms: int) -> None:
        if response.epoch > self.epoch or (not response.vote_granted
                                           and self._learns_leader(response.epoch, response.leader_id)):
            self._become_follower(response.epoch, response.leader_id, now_ms)
            return
        wanted = RaftRole.PROSPECTIVE if response.pre_vote else RaftRole.CANDIDATE
        if self.role is wanted and response.vote_granted and (response.pre_vote or response.epoch == self.epoch):
            self._votes.add(response.voter_id)
            self._maybe_win(now_ms)

    def _learns_leader(self, epoch: int, leader_id: int) -> bool:
        """Whether an answer naming the leader of our own epoch should make us its follower: when
        we know no leader, or are asking for votes. A prospective node keeps the leader it knew,
        and a refused pre-vote that names that leader sends it back to fetching (KIP-996);
        otherwise a node that came back from a partition would ask for pre-votes forever."""
        return (epoch == self.epoch and leader_id not in (NO_LEADER, self.node_id)
                and (self.role in (RaftRole.PROSPECTIVE, RaftRole.CANDIDATE) or self.leader_id == NO_LEADER))

    def _on_begin_quorum_epoch(self, message: BeginQuorumEpoch, now_ms: int) -> None:
        if message.leader_epoch > self.epoch or (message.leader_epoch == self.epoch and self.role is not RaftRole.LEADER):
            self._become_follower(message.leader_epoch, message.leader_id, now_ms)
            self._last_leader_contact_ms = now_ms

    @property
    def _quorum_deadline_ms(self) -> int:
        """When the leader resigns unless more voters fetch: the check-quorum timeout (1.5x the
        fetch timeout, as Kafka's) after the latest fetch that, with the leader itself, makes a
        majority (never, as the only voter)."""
        if self.majority == 1:
            return NO_DEADLINE_MS
        heard_ms = sorted(self._voter_last_fetch_ms.values(), reverse=True)
        return heard_ms[self.majority - 2] + self.config.check_quorum_timeout_ms

    def _check_quorum(self, now_ms: int) -> None:
        """A leader that has not heard from a majority within the check-quorum timeout resigns,
        so a partitioned leader stops answering for the quorum."""
        if now_ms >= self._quorum_deadline_ms:
            self._become_follower(self.epoch, NO_LEADER, now_ms)

    def resign(self, now_ms: int) -> None:
        """A leader that is shutting down tells the other voters (EndQuorumEpoch), so they elect
        a successor now instead of after the fetch timeout. It stays leader of its epoch until it
        is gone, as a resigned KRaft leader does."""
        if self.role is RaftRole.LEADER:
            self.outbox += [(voter, EndQuorumEpoch(self.node_id, self.epoch))
                            for voter in self.voters if voter != self.node_id]

    def _on_end_quorum_epoch(self, message: EndQuorumEpoch, now_ms: int) -> None:
        """The leader of our epoch resigned: forget it and stand soon, after a random part of the
        election timeout (KIP-595's election backoff), so that the voters do not all stand at once."""
        if (self.is_observer or self.role is not RaftRole.FOLLOWER or message.leader_epoch != self.epoch
                or message.leader_id != self.leader_id):
            return
        self._become_follower(self.epoch, NO_LEADER, now_ms)
        self._timer_deadline_ms = now_ms + self.random.randrange(self.config.election_timeout_ms // 2 or 1)
