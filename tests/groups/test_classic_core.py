"""The classic group state machine, driven directly: joins, syncs, heartbeats, leaves, timers."""
from __future__ import annotations

import random

from reference.coordinator.classic import ClassicGroupConfig
from reference.coordinator.coordinator import GroupCoordinator, GroupCoordinatorConfig, OffsetCommit
from reference.protocol.errors import ErrorCode

SESSION_MS = 10_000
REBALANCE_MS = 20_000
DELAY_MS = 3_000


def coordinator(initial_delay_ms: int = DELAY_MS) -> GroupCoordinator:
    config = GroupCoordinatorConfig(classic=ClassicGroupConfig(initial_rebalance_delay_ms=initial_delay_ms))
    return GroupCoordinator(config, random.Random(7), now_ms=0)


def join(c, token, member_id="", now_ms=0, protocols=(("range", b"m"),), instance_id=None, group="g",
         protocol_type="consumer", require_known=True):
    effects = c.join_group(token, group_id=group, member_id=member_id, group_instance_id=instance_id,
                           client_id="client", client_host="/127.0.0.1", session_timeout_ms=SESSION_MS,
                           rebalance_timeout_ms=REBALANCE_MS, protocol_type=protocol_type,
                           protocols=list(protocols), require_known_member_id=require_known, now_ms=now_ms)
    return dict(effects.replies)


def sync(c, token, member_id, generation, assignments=None, now_ms=0, group="g"):
    effects = c.sync_group(token, group_id=group, member_id=member_id, group_instance_id=None,
                           generation_id=generation, protocol_type=None, protocol_name=None,
                           assignments=assignments or {}, now_ms=now_ms)
    return dict(effects.replies)


def member_id_for(c, token, now_ms=0, **kwargs) -> str:
    reply = join(c, token, now_ms=now_ms, **kwargs)[token]
    assert reply["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    return reply["member_id"]


def stable_group_of_two(c):
    a = member_id_for(c, "a0")
    b = member_id_for(c, "b0")
    assert join(c, "a1", a) == {} and join(c, "b1", b) == {}  # parked: initial delay
    replies = c.tick(DELAY_MS).replies
    joined = dict(replies)
    assert set(joined) == {"a1", "b1"}
    generation = joined["a1"]["generation_id"]
    leader = joined["a1"]["leader"]
    follower = b if leader == a else a
    assert sync(c, "f", follower, generation, now_ms=DELAY_MS) == {}  # waits for the leader
    replies = sync(c, "l", leader, generation, {a: b"A", b: b"B"}, now_ms=DELAY_MS)
    assert replies["f"]["assignment"] == (b"B" if follower == b else b"A")
    return a, b, generation


def test_join_v4_requires_a_member_id_first():
    c = coordinator()
    reply = join(c, "t")["t"]
    assert reply["error_code"] == ErrorCode.MEMBER_ID_REQUIRED and reply["member_id"].startswith("client-")
    assert c.groups["g"].is_empty(), "no member is added before it rejoins with its id"


def test_join_before_v4_adds_the_member_at_once():
    c = coordinator(initial_delay_ms=0)
    reply = join(c, "t", require_known=False)["t"]
    assert reply["error_code"] == ErrorCode.NONE and reply["generation_id"] == 1
    assert reply["leader"] == reply["member_id"] and len(reply["members"]) == 1


def test_initial_rebalance_delay_holds_the_first_generation():
    c = coordinator()
    a = member_id_for(c, "a0")
    assert join(c, "a1", a, now_ms=0) == {}
    assert c.tick(DELAY_MS - 1).replies == []
    replies = dict(c.tick(DELAY_MS).replies)
    assert replies["a1"]["generation_id"] == 1


def test_leader_gets_every_member_and_followers_get_none():
    c = coordinator()
    a, b, generation = stable_group_of_two(c)
    assert generation == 1
    assert c.groups["g"].state == "Stable"


def test_protocol_selection_takes_the_protocol_all_support_by_votes():
    c = coordinator(initial_delay_ms=0)
    a = member_id_for(c, "a0", protocols=[("roundrobin", b"r"), ("range", b"x")])
    b = member_id_for(c, "b0", protocols=[("range", b"y"), ("roundrobin", b"s")])
    d = member_id_for(c, "d0", protocols=[("range", b"z"), ("sticky", b"q")])
    join(c, "a", a, protocols=[("roundrobin", b"r"), ("range", b"x")])
    join(c, "b", b, protocols=[("range", b"y"), ("roundrobin", b"s")])
    replies = join(c, "d", d, protocols=[("range", b"z"), ("sticky", b"q")])
    assert {reply["protocol_name"] for reply in replies.values()} == {"range"}


def test_no_common_protocol_is_inconsistent_group_protocol():
    c = coordinator()
    stable_group_of_two(c)
    reply = join(c, "x", protocols=[("cooperative-sticky", b"")])["x"]
    assert reply["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    reply = join(c, "y", protocol_type="connect")["y"]
    assert reply["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_heartbeat_errors_follow_the_generation():
    c = coordinator()
    a, b, generation = stable_group_of_two(c)
    hb = lambda member, gen: c.heartbeat(group_id="g", member_id=member, group_instance_id=None,
                                         generation_id=gen, now_ms=DELAY_MS + 1)
    assert hb(a, generation) == ErrorCode.NONE
    assert hb(a, generation - 1) == ErrorCode.ILLEGAL_GENERATION
    assert hb("stranger", generation) == ErrorCode.UNKNOWN_MEMBER_ID
    join(c, "new0")  # MEMBER_ID_REQUIRED only: a pending member does not start a rebalance
    assert hb(a, generation) == ErrorCode.NONE
    newcomer = member_id_for(c, "n0")
    join(c, "n1", newcomer, now_ms=DELAY_MS + 1)
    assert c.groups["g"].state == "PreparingRebalance"
    assert hb(b, generation) == ErrorCode.REBALANCE_IN_PROGRESS


def test_session_timeout_removes_a_silent_member_and_rebalances():
    c = coordinator()
    a, b, generation = stable_group_of_two(c)
    now = DELAY_MS + SESSION_MS - 1
    c.heartbeat(group_id="g", member_id=a, group_instance_id=None, generation_id=generation, now_ms=now)
    c.tick(DELAY_MS + SESSION_MS)
    group = c.groups["g"]
    assert b not in group.members and group.state == "PreparingRebalance"
    replies = join(c, "a2", a, now_ms=DELAY_MS + SESSION_MS)
    assert replies["a2"]["generation_id"] == generation + 1 and replies["a2"]["leader"] == a


def test_the_next_deadline_is_the_first_session_to_run_out():
    """The shell's timer sleeps until next_deadline_ms, so a session expires when it is due."""
    c = coordinator()
    a, b, generation = stable_group_of_two(c)
    c.heartbeat(group_id="g", member_id=a, group_instance_id=None, generation_id=generation, now_ms=DELAY_MS + 500)
    assert c.groups["g"].next_deadline_ms() == DELAY_MS + SESSION_MS  # b's session, a's runs 500 ms longer
    c.tick(DELAY_MS + SESSION_MS - 1)
    assert b in c.groups["g"].members
    c.tick(DELAY_MS + SESSION_MS)
    assert b not in c.groups["g"].members


def test_rebalance_timeout_drops_members_that_do_not_rejoin():
    c = coordinator()
    a, b, generation = stable_group_of_two(c)
    t = DELAY_MS + 10
    assert join(c, "a2", a, now_ms=t, protocols=[("range", b"changed")]) == {}
    c.heartbeat(group_id="g", member_id=b, group_instance_id=None, generation_id=generation, now_ms=t + 5000)
    replies = dict(c.tick(t + REBALANCE_MS).replies)
    assert replies["a2"]["error_code"] == ErrorCode.NONE and list(c.groups["g"].members) == [a]


def test_leave_group_batch_answers_each_member():
    c = coordinator()
    a, b, _ = stable_group_of_two(c)
    error, errors, _ = c.leave_group(group_id="g", members=[(a, None), ("ghost", None)], now_ms=DELAY_MS + 1)
    assert error == ErrorCode.NONE and errors == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
    assert list(c.groups["g"].members) == [b] and c.groups["g"].state == "PreparingRebalance"


def test_sync_from_a_stale_generation_is_refused():
    c = coordinator()
    a, _, generation = stable_group_of_two(c)
    assert sync(c, "s", a, generation + 1, now_ms=DELAY_MS)["s"]["error_code"] == ErrorCode.ILLEGAL_GENERATION
    assert sync(c, "s", "who", generation, now_ms=DELAY_MS)["s"]["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID


def test_static_member_restart_keeps_its_assignment_without_rebalance():
    c = coordinator(initial_delay_ms=0)
    first = join(c, "s1", instance_id="instance-1")["s1"]
    assert first["error_code"] == ErrorCode.NONE  # static members skip MEMBER_ID_REQUIRED
    other = join(c, "o1", instance_id="instance-2")
    assert other == {}  # joining: the group rebalances
    first = join(c, "s2", first["member_id"], instance_id="instance-1")["s2"]
    other = c.groups["g"].static_members["instance-2"]
    leader = first["leader"]
    sync(c, "x", other, first["generation_id"])
    sync(c, "y", first["member_id"], first["generation_id"],
         {first["member_id"]: b"one", other: b"two"} if leader == first["member_id"] else {})
    group = c.groups["g"]
    assert group.state == "Stable"
    follower_instance = "instance-2" if leader == first["member_id"] else "instance-1"
    old_id = group.static_members[follower_instance]
    generation = group.generation_id
    restarted = join(c, "r", instance_id=follower_instance)["r"]
    assert restarted["error_code"] == ErrorCode.NONE and restarted["generation_id"] == generation
    assert restarted["member_id"] != old_id and group.state == "Stable"
    fenced = c.heartbeat(group_id="g", member_id=old_id, group_instance_id=follower_instance,
                         generation_id=generation, now_ms=1)
    assert fenced == ErrorCode.FENCED_INSTANCE_ID


def test_static_leader_restart_skips_the_assignment_without_rebalance():
    """KIP-814: the restarted leader gets a new member id, the same generation, the members,
    and skip_assignment; the group stays Stable with the assignment it had."""
    c = coordinator(initial_delay_ms=0)
    leader = join(c, "l1", instance_id="instance-1")["l1"]
    sync(c, "s1", leader["member_id"], leader["generation_id"], {leader["member_id"]: b"all"})
    group = c.groups["g"]
    assert group.state == "Stable" and group.leader_id == leader["member_id"]
    restarted = join(c, "r", instance_id="instance-1")["r"]
    assert restarted["error_code"] == ErrorCode.NONE and restarted["skip_assignment"] is True
    assert restarted["generation_id"] == leader["generation_id"] and restarted["member_id"] != leader["member_id"]
    assert restarted["leader"] == restarted["member_id"] and len(restarted["members"]) == 1
    assert group.state == "Stable"
    replies = sync(c, "s2", restarted["member_id"], restarted["generation_id"])
    assert replies["s2"]["assignment"] == b"all"


def test_commit_from_unknown_member_or_stale_generation_changes_nothing():
    c = coordinator()
    a, _, generation = stable_group_of_two(c)
    offsets = [OffsetCommit("t", 0, 42, -1, "meta")]
    errors, effects = c.commit_offsets(group_id="g", member_id="ghost", group_instance_id=None,
                                       generation_id=generation, offsets=offsets, now_ms=DELAY_MS)
    assert errors == [ErrorCode.UNKNOWN_MEMBER_ID] and effects.records == []
    errors, effects = c.commit_offsets(group_id="g", member_id=a, group_instance_id=None,
                                       generation_id=generation - 1, offsets=offsets, now_ms=DELAY_MS)
    assert errors == [ErrorCode.ILLEGAL_GENERATION] and effects.records == []
    assert c.fetch_offsets("g", [("t", 0)])[1] == {("t", 0): None}
    errors, effects = c.commit_offsets(group_id="g", member_id=a, group_instance_id=None,
                                       generation_id=generation, offsets=offsets, now_ms=DELAY_MS)
    assert errors == [ErrorCode.NONE] and len(effects.records) == 1
    assert c.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 42


def test_commit_during_completing_rebalance_is_rebalance_in_progress():
    c = coordinator(initial_delay_ms=0)
    a = member_id_for(c, "a0")
    reply = join(c, "a1", a)["a1"]
    errors, _ = c.commit_offsets(group_id="g", member_id=a, group_instance_id=None,
                                 generation_id=reply["generation_id"], offsets=[OffsetCommit("t", 0, 1, -1, "")],
                                 now_ms=0)
    assert errors == [ErrorCode.REBALANCE_IN_PROGRESS]


def test_commit_of_the_previous_generation_during_completing_rebalance_is_illegal_generation():
    """Kafka checks the member and its generation before the rebalance state: a member that
    missed a generation learns ILLEGAL_GENERATION (and rejoins), not REBALANCE_IN_PROGRESS."""
    c = coordinator(initial_delay_ms=0)
    a = member_id_for(c, "a0")
    first = join(c, "a1", a)["a1"]["generation_id"]
    sync(c, "s", a, first, {a: b"A"})
    b = member_id_for(c, "b0")
    assert join(c, "b1", b) == {} and set(join(c, "a2", a)) == {"a2", "b1"}  # generation first+1 syncs
    assert c.groups["g"].state == "CompletingRebalance"
    errors, effects = c.commit_offsets(group_id="g", member_id=a, group_instance_id=None, generation_id=first,
                                       offsets=[OffsetCommit("t", 0, 1, -1, "")], now_ms=0)
    assert errors == [ErrorCode.ILLEGAL_GENERATION] and effects.records == []


def test_offset_metadata_over_the_limit_is_refused_per_partition():
    c = coordinator()
    errors, effects = c.commit_offsets(
        group_id="simple", member_id="", group_instance_id=None, generation_id=-1,
        offsets=[OffsetCommit("t", 0, 5, -1, "x" * 5000), OffsetCommit("t", 1, 6, -1, "ok")], now_ms=0)
    assert errors == [ErrorCode.OFFSET_METADATA_TOO_LARGE, ErrorCode.NONE] and len(effects.records) == 1
