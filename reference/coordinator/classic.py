"""The classic group protocol: JoinGroup, SyncGroup, Heartbeat and LeaveGroup as a state machine.

A classic group moves through generations. A rebalance has two phases: in the join phase
(PreparingRebalance) every member rejoins; when all have, or the rebalance timeout ends,
the coordinator bumps the generation, picks the protocol every member supports, names a
leader and answers all the joins, the leader's with every member's metadata
(CompletingRebalance). The leader computes the assignment client-side and sends it in its
SyncGroup; the coordinator hands each member its share (Stable). Any member change starts
the next rebalance. Member ids are given by the coordinator (KIP-394: MEMBER_ID_REQUIRED
from JoinGroup v4 on) and static members keep their place across restarts by
group.instance.id (KIP-345).

Sans-IO: time comes in as `now_ms`, fresh member ids from the caller, and answers to
parked joins and syncs go out through `Effects` with the caller's token.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from reference.coordinator.effects import Effects, OffsetsRecord
from reference.coordinator.subscriptions import subscription_topics
from reference.coordinator.classic_member import (
    COMPLETING_REBALANCE, DEAD, EMPTY, NO_GENERATION, PREPARING_REBALANCE, STABLE, UNKNOWN_MEMBER_ID,
    VALID_PREVIOUS_STATES, ClassicGroupConfig, ClassicMember, candidate_protocols, members_from_metadata, select_protocol,
)
from reference.coordinator.records import GroupMetadata, GroupMetadataKey, encode_group_value
from reference.protocol.errors import ErrorCode

@dataclass
class ClassicGroup:
    group_id: str
    partition: int  # its __consumer_offsets partition
    config: ClassicGroupConfig
    state: str = EMPTY
    state_timestamp_ms: int = 0
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> expiry (KIP-394)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    join_deadline_ms: int = 0  # the join phase ends at the latest here (rebalance timeout)
    initial_delay_until_ms: int = 0  # group.initial.rebalance.delay.ms: no completion before
    initial_delay_cap_ms: int = 0
    sync_deadline_ms: int = 0  # members that have not synced by then are removed

    group_type = "classic"

    # -- queries ------------------------------------------------------------------------

    def is_empty(self) -> bool:
        return not self.members

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if self.is_empty():
            return bool(protocol_type) and bool(protocols)
        return protocol_type == self.protocol_type and bool(
            {name for name, _ in protocols} & candidate_protocols(self.members))

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        return (group_instance_id is not None and group_instance_id in self.static_members
                and self.static_members[group_instance_id] != member_id)

    def rebalance_timeout_ms(self) -> int:
        return max((member.rebalance_timeout_ms for member in self.members.values()), default=0)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol only; None when unknown)."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            decoded = subscription_topics(member.metadata(self.protocol_name))
            if decoded is None:
                return None
            topics |= decoded
        return topics

    # -- the protocol -------------------------------------------------------------------

    def join(self, token: Any, *, member_id: str, group_instance_id: str | None, client_id: str,
             client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
             protocols: list[tuple[str, bytes]], require_known_member_id: bool,
             new_member_id: Callable[[str], str], now_ms: int, effects: Effects) -> None:
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            return self._join_error(token, ErrorCode.INVALID_SESSION_TIMEOUT, member_id, effects)
        if self.state == DEAD:
            return self._join_error(token, ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id, effects)
        if not self.supports_protocols(protocol_type, protocols):
            return self._join_error(token, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id, effects)
        member_fields = dict(group_instance_id=group_instance_id, client_id=client_id, client_host=client_host,
                             rebalance_timeout_ms=rebalance_timeout_ms, session_timeout_ms=session_timeout_ms,
                             protocols=protocols, last_heartbeat_ms=now_ms)
        if member_id == UNKNOWN_MEMBER_ID:
            if group_instance_id is not None and group_instance_id in self.static_members:
                return self._replace_static_member(token, new_member_id(group_instance_id), member_fields,
                                                   now_ms, effects)
            if len(self.members) + len(self.pending_members) >= self.config.max_size:
                return self._join_error(token, ErrorCode.GROUP_MAX_SIZE_REACHED, member_id, effects)
            member_id = new_member_id(group_instance_id or client_id)
            if require_known_member_id and group_instance_id is None:
                # KIP-394: hand out the id first, so a client that retries the join after a
                # lost response does not leave a phantom member behind.
                self.pending_members[member_id] = now_ms + session_timeout_ms
                return self._join_error(token, ErrorCode.MEMBER_ID_REQUIRED, member_id, effects)
            return self._add_member(token, ClassicMember(member_id, **member_fields), protocol_type, now_ms, effects)
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            return self._add_member(token, ClassicMember(member_id, **member_fields), protocol_type, now_ms, effects)
        if self.is_static_member_fenced(member_id, group_instance_id):
            return self._join_error(token, ErrorCode.FENCED_INSTANCE_ID, member_id, effects)
        if member_id not in self.members or self.state == EMPTY:
            return self._join_error(token, ErrorCode.UNKNOWN_MEMBER_ID, member_id, effects)
        member = self.members[member_id]
        changed = member.protocols != protocols
        member.rebalance_timeout_ms, member.session_timeout_ms = rebalance_timeout_ms, session_timeout_ms
        member.protocols, member.last_heartbeat_ms = protocols, now_ms
        if self.state == PREPARING_REBALANCE:
            self._park_join(member, token, effects)
            self._maybe_complete_join(now_ms, effects)
        elif self.state == COMPLETING_REBALANCE and not changed:
            effects.reply(token, self._join_response(member))  # a retried join: answer it again
        elif self.state == STABLE and not changed and member_id != self.leader_id:
            effects.reply(token, self._join_response(member))
        else:  # new metadata, or the leader rejoining: a new generation is needed
            self._park_join(member, token, effects)
            self._prepare_rebalance(now_ms, effects)

    def sync(self, token: Any, *, member_id: str, group_instance_id: str | None, generation_id: int,
             protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
             now_ms: int, effects: Effects) -> None:
        if self.state == DEAD:
            return effects.reply(token, _sync_error(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        if self.is_static_member_fenced(member_id, group_instance_id):
            return effects.reply(token, _sync_error(ErrorCode.FENCED_INSTANCE_ID))
        if member_id not in self.members:
            return effects.reply(token, _sync_error(ErrorCode.UNKNOWN_MEMBER_ID))
        if generation_id != self.generation_id:
            return effects.reply(token, _sync_error(ErrorCode.ILLEGAL_GENERATION))
        if (protocol_type is not None and protocol_type != self.protocol_type) or (
                protocol_name is not None and protocol_name != self.protocol_name):
            return effects.reply(token, _sync_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        member = self.members[member_id]
        member.last_heartbeat_ms = now_ms
        if self.state == PREPARING_REBALANCE:
            return effects.reply(token, _sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
        if self.state == STABLE:
            return effects.reply(token, self._sync_response(member))
        assert self.state == COMPLETING_REBALANCE, self.state
        if member.sync_token is not None:
            effects.reply(member.sync_token, _sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_token = token
        if member_id == self.leader_id:
            for each in self.members.values():
                each.assignment = assignments.get(each.member_id, b"")
            self._transition(STABLE, now_ms)
            self._store(effects)
            for each in self.members.values():
                if each.sync_token is not None:
                    effects.reply(each.sync_token, self._sync_response(each))
                    each.sync_token = None

    def heartbeat(self, *, member_id: str, group_instance_id: str | None, generation_id: int,
                  now_ms: int) -> ErrorCode:
        if self.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.is_static_member_fenced(member_id, group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members or self.state == EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        self.members[member_id].last_heartbeat_ms = now_ms
        if self.state == PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS  # the member rejoins
        return ErrorCode.NONE

    def leave(self, *, member_id: str, group_instance_id: str | None, now_ms: int, effects: Effects) -> ErrorCode:
        if self.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group_instance_id is not None:
            if group_instance_id not in self.static_members:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if member_id != UNKNOWN_MEMBER_ID and self.static_members[group_instance_id] != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
            member_id = self.static_members[group_instance_id]
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            self._maybe_complete_join(now_ms, effects)
            return ErrorCode.NONE
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._remove_member(member_id, now_ms, effects)
        return ErrorCode.NONE

    def validate_offset_commit(self, *, member_id: str, group_instance_id: str | None, generation_id: int,
                               now_ms: int) -> ErrorCode:
        """Kafka's rules for a commit to a classic group (ClassicGroup.validateOffsetCommit): a
        simple (admin) commit only while the group is empty; otherwise a current member of the
        current generation, checked before the rebalance state, so a member of an older
        generation learns ILLEGAL_GENERATION (and rejoins) rather than REBALANCE_IN_PROGRESS;
        a current member's commit waits for the end of the rebalance."""
        if self.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and self.state == EMPTY:
            return ErrorCode.NONE
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            if group_instance_id is not None and group_instance_id not in self.static_members:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if self.is_static_member_fenced(member_id, group_instance_id):
                return ErrorCode.FENCED_INSTANCE_ID
            if member_id not in self.members:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if generation_id != self.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        else:
            return ErrorCode.UNKNOWN_MEMBER_ID  # a commit without member and generation, to a group in use
        if self.state == COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        self.members[member_id].last_heartbeat_ms = now_ms
        return ErrorCode.NONE

    def tick(self, now_ms: int, effects: Effects) -> None:
        """Session expiry, expiry of ids handed out with MEMBER_ID_REQUIRED, and the join and
        sync deadlines of a rebalance in progress."""
        for member_id, expiry_ms in list(self.pending_members.items()):
            if now_ms >= expiry_ms:
                del self.pending_members[member_id]
        for member in list(self.members.values()):
            if member.member_id in self.members and member.session_expired(now_ms):
                self._remove_member(member.member_id, now_ms, effects)
        if self.state == PREPARING_REBALANCE:
            if now_ms >= self.join_deadline_ms:
                self._complete_join(now_ms, effects)
            else:
                self._maybe_complete_join(now_ms, effects)
        elif self.state == COMPLETING_REBALANCE and now_ms >= self.sync_deadline_ms:
            for member_id in [m.member_id for m in self.members.values() if m.sync_token is None]:
                if member_id in self.members:
                    self._remove_member(member_id, now_ms, effects)

    def next_deadline_ms(self) -> int | None:
        """When tick has something to do next: a session or a handed-out member id that runs
        out, the end of the join delay or of the join or sync phase; None when nothing waits."""
        deadlines = list(self.pending_members.values())
        deadlines += [m.last_heartbeat_ms + m.session_timeout_ms for m in self.members.values()
                      if m.join_token is None and m.sync_token is None]
        if self.state == PREPARING_REBALANCE:
            deadlines += [self.join_deadline_ms, self.initial_delay_until_ms]
        elif self.state == COMPLETING_REBALANCE:
            deadlines.append(self.sync_deadline_ms)
        return min(deadlines, default=None)

    def make_dead(self, effects: Effects) -> None:
        """The group is deleted (DeleteGroups or offsets expiry of an empty group)."""
        assert self.is_empty(), self.group_id
        self._transition(DEAD, self.state_timestamp_ms)
        effects.records.append(OffsetsRecord(self.partition, GroupMetadataKey(self.group_id), None))

    # -- replay -------------------------------------------------------------------------

    def load(self, metadata: GroupMetadata, now_ms: int) -> None:
        """Restore from the latest GroupMetadataValue; restored members must heartbeat anew."""
        self.protocol_type = metadata.protocol_type or None
        self.generation_id = metadata.generation_id
        self.protocol_name = metadata.protocol_name
        self.leader_id = metadata.leader
        self.members = members_from_metadata(metadata, now_ms)
        self.static_members = {member.group_instance_id: member.member_id for member in self.members.values()
                               if member.group_instance_id is not None}
        self.state = STABLE if self.members else EMPTY
        self.state_timestamp_ms = metadata.current_state_timestamp_ms

    # -- internals ----------------------------------------------------------------------

    def _transition(self, state: str, now_ms: int) -> None:
        assert self.state in VALID_PREVIOUS_STATES[state], f"{self.group_id}: {self.state} -> {state}"
        self.state = state
        self.state_timestamp_ms = now_ms

    def _join_error(self, token: Any, error: ErrorCode, member_id: str, effects: Effects) -> None:
        effects.reply(token, {"error_code": error, "generation_id": NO_GENERATION, "protocol_type": None,
                              "protocol_name": None, "leader": "", "member_id": member_id, "members": []})

    def _join_response(self, member: ClassicMember, skip_assignment: bool = False) -> dict:
        is_leader = member.member_id == self.leader_id
        return {
            "error_code": ErrorCode.NONE, "generation_id": self.generation_id,
            "protocol_type": self.protocol_type, "protocol_name": self.protocol_name,
            "leader": self.leader_id, "skip_assignment": skip_assignment, "member_id": member.member_id,
            "members": [
                {"member_id": each.member_id, "group_instance_id": each.group_instance_id,
                 "metadata": each.metadata(self.protocol_name)}
                for each in self.members.values()
            ] if is_leader else [],
        }

    def _sync_response(self, member: ClassicMember) -> dict:
        return {"error_code": ErrorCode.NONE, "protocol_type": self.protocol_type,
                "protocol_name": self.protocol_name, "assignment": member.assignment}

    def _park_join(self, member: ClassicMember, token: Any, effects: Effects) -> None:
        if member.join_token is not None and member.join_token is not token:
            effects.reply(member.join_token, self._join_error_response(ErrorCode.REBALANCE_IN_PROGRESS, member))
        member.join_token = token

    def _join_error_response(self, error: ErrorCode, member: ClassicMember) -> dict:
        collected = Effects()
        self._join_error(object(), error, member.member_id, collected)
        return collected.replies[0][1]

    def _add_member(self, token: Any, member: ClassicMember, protocol_type: str, now_ms: int,
                    effects: Effects) -> None:
        assert member.member_id not in self.members
        if self.is_empty():
            self.protocol_type = protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        member.join_token = token
        if self.state == PREPARING_REBALANCE and now_ms < self.initial_delay_until_ms:
            # KIP-134: while the first members of an empty group arrive, each new one pushes
            # the end of the join phase back by the delay, up to the rebalance timeout.
            self.initial_delay_until_ms = min(now_ms + self.config.initial_rebalance_delay_ms,
                                              self.initial_delay_cap_ms)
        if self.state == PREPARING_REBALANCE:
            self._maybe_complete_join(now_ms, effects)
        else:
            self._prepare_rebalance(now_ms, effects)

    def _replace_static_member(self, token: Any, member_id: str, member_fields: dict, now_ms: int,
                               effects: Effects) -> None:
        """KIP-345: a static member that restarts gets a new member id and takes the old one's
        place without a rebalance; the old id is fenced. The leader too (KIP-814): it is told it
        leads, with the members, and to skip the assignment (JoinGroup v9's skip_assignment),
        since the stable group keeps the assignment it has."""
        instance_id = member_fields["group_instance_id"]
        old = self.members.pop(self.static_members[instance_id])
        for parked in (old.join_token, old.sync_token):
            if parked is not None:
                effects.reply(parked, self._join_error_response(ErrorCode.FENCED_INSTANCE_ID, old)
                              if parked is old.join_token else _sync_error(ErrorCode.FENCED_INSTANCE_ID))
        member = ClassicMember(member_id, **member_fields, assignment=old.assignment)
        self.members[member_id] = member
        self.static_members[instance_id] = member_id
        was_leader = self.leader_id == old.member_id
        if was_leader:
            self.leader_id = member_id
        if self.state == STABLE and member.protocols == old.protocols:
            self._store(effects)
            effects.reply(token, self._join_response(member, skip_assignment=was_leader))
            return
        member.join_token = token
        if self.state == PREPARING_REBALANCE:
            self._maybe_complete_join(now_ms, effects)
        else:
            self._prepare_rebalance(now_ms, effects)

    def _remove_member(self, member_id: str, now_ms: int, effects: Effects) -> None:
        member = self.members.pop(member_id)
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if member.join_token is not None:
            effects.reply(member.join_token, self._join_error_response(ErrorCode.UNKNOWN_MEMBER_ID, member))
        if member.sync_token is not None:
            effects.reply(member.sync_token, _sync_error(ErrorCode.UNKNOWN_MEMBER_ID))
        if self.leader_id == member_id:
            self.leader_id = None
        if self.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(now_ms, effects)
        elif self.state == PREPARING_REBALANCE:
            self._maybe_complete_join(now_ms, effects)

    def _prepare_rebalance(self, now_ms: int, effects: Effects) -> None:
        if self.state == COMPLETING_REBALANCE:
            for member in self.members.values():  # the leader's assignment will never come
                member.assignment = b""
                if member.sync_token is not None:
                    effects.reply(member.sync_token, _sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
                    member.sync_token = None
        rebalance_timeout_ms = self.rebalance_timeout_ms()
        if self.state == EMPTY:
            delay_ms = self.config.initial_rebalance_delay_ms
            self.initial_delay_cap_ms = now_ms + max(rebalance_timeout_ms, delay_ms)
            self.initial_delay_until_ms = min(now_ms + delay_ms, self.initial_delay_cap_ms)
        else:
            self.initial_delay_until_ms = now_ms
        self.join_deadline_ms = now_ms + rebalance_timeout_ms
        self._transition(PREPARING_REBALANCE, now_ms)
        self._maybe_complete_join(now_ms, effects)

    def _maybe_complete_join(self, now_ms: int, effects: Effects) -> None:
        assert self.state == PREPARING_REBALANCE, self.state
        all_joined = all(member.join_token is not None for member in self.members.values())
        if all_joined and not self.pending_members and now_ms >= self.initial_delay_until_ms:
            self._complete_join(now_ms, effects)

    def _complete_join(self, now_ms: int, effects: Effects) -> None:
        for member_id in [m.member_id for m in self.members.values() if m.join_token is None]:
            self._remove_member_silently(member_id)
        self.generation_id += 1
        if not self.members:
            self.protocol_name = None
            self.leader_id = None
            self._transition(EMPTY, now_ms)
            self._store(effects)
            return
        self.protocol_name = select_protocol(self.members, self.leader_id)
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self._transition(COMPLETING_REBALANCE, now_ms)
        self.sync_deadline_ms = now_ms + self.rebalance_timeout_ms()
        for member in self.members.values():
            effects.reply(member.join_token, self._join_response(member))
            member.join_token = None
            member.last_heartbeat_ms = now_ms

    def _remove_member_silently(self, member_id: str) -> None:
        member = self.members.pop(member_id)
        assert member.join_token is None and member.sync_token is None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = None

    def _store(self, effects: Effects) -> None:
        """Write the group's settled state: GroupMetadataValue with every member's assignment."""
        value = GroupMetadata(
            protocol_type=self.protocol_type or "", generation_id=self.generation_id,
            protocol_name=self.protocol_name, leader=self.leader_id,
            current_state_timestamp_ms=self.state_timestamp_ms,
            members=tuple(member.stored(self.protocol_name) for member in self.members.values()),
        )
        effects.records.append(OffsetsRecord(self.partition, GroupMetadataKey(self.group_id), encode_group_value(value)))


def _sync_error(error: ErrorCode) -> dict:
    return {"error_code": error, "protocol_type": None, "protocol_name": None, "assignment": b""}
