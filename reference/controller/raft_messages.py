"""The messages, configuration and roles of the Raft core (reference/controller/raft.py), in
the shape of KRaft's (KIP-595): small immutable values. Their Kafka wire form, as Vote,
BeginQuorumEpoch, EndQuorumEpoch and Fetch RPCs, is reference/node/raft_rpcs.py.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

NO_LEADER = -1
NOT_VOTED = -1
EPOCH_MAX = 2**31 - 1  # an epoch is an int32 on the wire: no election can follow this one
NO_DEADLINE_MS = 2**62  # next_tick_ms of a single-voter leader: nothing timed can happen
FETCH_ENTRIES_MAX = 500  # entries per Fetch answer
NO_WAIT_MS = 0  # the max_wait_ms of a Fetch the leader must answer at once
OBSERVER_SESSION_TIMEOUT_MS = 300_000  # an observer silent this long drops out of DescribeQuorum (as Kafka's leader)


class RaftRole(enum.Enum):
    FOLLOWER = "follower"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(frozen=True)
class Entry:
    epoch: int
    record: Any  # a metadata record (a dict), or LEADER_CHANGE


LEADER_CHANGE = {"type": "LeaderChangeMessage"}


@dataclass(frozen=True)
class Snapshot:
    """The state machine's state after every entry below `end_offset`."""
    end_offset: int
    last_epoch: int
    state: Any


@dataclass(frozen=True)
class VoteRequest:
    candidate_id: int
    candidate_epoch: int
    last_offset_epoch: int
    last_offset: int  # the candidate's log end offset
    pre_vote: bool


@dataclass(frozen=True)
class VoteResponse:
    voter_id: int
    epoch: int
    vote_granted: bool
    pre_vote: bool
    leader_id: int = NO_LEADER  # the voter's leader, so a node that missed BeginQuorumEpoch finds it


@dataclass(frozen=True)
class BeginQuorumEpoch:
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True)
class EndQuorumEpoch:
    """A leader that shuts down resigns its epoch: its followers stand for election at once,
    rather than after the fetch timeout."""
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True)
class FetchRequest:
    replica_id: int
    epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    high_watermark: int = 0  # the follower's: a leader with a higher one answers at once
    max_wait_ms: int = NO_WAIT_MS  # how long the leader may hold the fetch when it has nothing new


@dataclass(frozen=True)
class FetchResponse:
    leader_id: int
    epoch: int
    fenced: bool = False  # the request's epoch is older than the leader's
    entries: tuple[Entry, ...] = ()
    high_watermark: int = 0
    diverging_epoch: int = -1  # with diverging_end_offset: truncate there, then fetch again
    diverging_end_offset: int = -1
    snapshot: Snapshot | None = None
    fetch_offset: int = -1  # the request's: a late answer to an earlier fetch must not be appended twice
    not_leader: bool = False  # to an observer: the responder is not the leader; leader_id, epoch: what it knows


@dataclass(frozen=True)
class VoterState:
    """What the leader knows of one voter, as DescribeQuorum reports it (KIP-595, KIP-836)."""
    replica_id: int
    log_end_offset: int  # -1: no fetch from it in this epoch yet
    last_fetch_ms: int  # -1: never
    last_caught_up_ms: int  # the last fetch that asked for the leader's end offset; -1: never


CHECK_QUORUM_TIMEOUT_FACTOR = 1.5  # Kafka's LeaderState: the leader's quorum check, in fetch timeouts


@dataclass(frozen=True)
class RaftConfig:
    election_timeout_ms: int = 1_000  # controller.quorum.election.timeout.ms
    fetch_timeout_ms: int = 2_000  # controller.quorum.fetch.timeout.ms
    retry_backoff_ms: int = 20  # as controller.quorum.retry.backoff.ms: a leaderless observer asks the next voter

    @property
    def fetch_max_wait_ms(self) -> int:
        """How long the leader may hold a follower's Fetch: a quarter of the fetch timeout (Kafka's
        500 ms against its 2 s default), so a follower is heard several times within the timeout
        that makes the leader resign (check quorum) or another voter grant a pre-vote."""
        return self.fetch_timeout_ms // 4

    @property
    def check_quorum_timeout_ms(self) -> int:
        """How long a leader stays in office without hearing from a majority of the voters: 1.5x
        the fetch timeout, as Kafka's LeaderState (CHECK_QUORUM_TIMEOUT_FACTOR, "to tolerate some
        network transition time or other IO time"), so a follower's Fetch that was a little late
        does not unseat a leader the others still follow."""
        return int(self.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)

    @property
    def fetch_request_timeout_ms(self) -> int:
        """A follower whose Fetch got no answer within this long (lost on the way) sends another."""
        return self.fetch_timeout_ms // 2
