"""KIP-848 consumer groups, assignors, offsets replay and retention, driven directly."""
from __future__ import annotations

import random
import uuid

from hypothesis import given, settings, strategies as st

from reference.coordinator.assignors import RANGE, UNIFORM, TopicMetadata, assign
from reference.coordinator.consumer import ConsumerGroupConfig
from reference.coordinator.coordinator import GroupCoordinator, GroupCoordinatorConfig, OffsetCommit
from reference.coordinator.records import OffsetCommitKey, decode_key, encode_key, partition_for
from reference.protocol.errors import ErrorCode

TOPIC = TopicMetadata(uuid.UUID(int=1), "orders", 6)
SESSION_MS = 10_000


def coordinator(**config) -> GroupCoordinator:
    consumer = ConsumerGroupConfig(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=100)
    return GroupCoordinator(GroupCoordinatorConfig(consumer=consumer, **config), random.Random(3), now_ms=0)


def heartbeat(c, member_id, epoch, owned=None, now_ms=0, topics=(TOPIC,), assignor=None, names=("orders",)):
    response, effects = c.consumer_group_heartbeat(
        group_id="g", member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30_000, subscribed_topic_names=list(names) if epoch == 0 else None,
        subscribed_topic_regex=None, server_assignor=assignor, owned=owned, client_id="c", client_host="h",
        topics=topics, now_ms=now_ms)
    return response


def owned_of(response) -> frozenset:
    return frozenset((tp["topic_id"], p) for tp in response["assignment"]["topic_partitions"] for p in tp["partitions"])


class Client:
    """A KIP-848 member that does what the protocol asks: it revokes at once and reports."""

    def __init__(self, c, member_id):
        self.c, self.member_id, self.epoch, self.owned = c, member_id, 0, frozenset()

    def beat(self, now_ms=0):
        response = heartbeat(self.c, self.member_id, self.epoch, owned=self.owned, now_ms=now_ms)
        assert response["error_code"] == ErrorCode.NONE, response
        self.epoch = response["member_epoch"]
        if response["assignment"] is not None:
            self.owned = owned_of(response)
        return response


def converge(clients, rounds=6, now_ms=0):
    for _ in range(rounds):
        for client in clients:
            client.beat(now_ms)
            owners = [p for each in clients for p in each.owned]
            assert len(owners) == len(set(owners)), "GRP-1: a partition owned by two members"


def test_three_members_share_six_partitions_each_owned_once():
    c = coordinator()
    clients = [Client(c, f"m{i}") for i in range(3)]
    converge(clients)
    assert sorted(len(client.owned) for client in clients) == [2, 2, 2]
    assert frozenset().union(*(client.owned for client in clients)) == {(TOPIC.topic_id, p) for p in range(6)}
    assert c.groups["g"].state == "Stable"
    assert {client.epoch for client in clients} == {c.groups["g"].group_epoch}


def test_partitions_move_only_after_the_owner_revokes():
    c = coordinator()
    first = Client(c, "first")
    first.beat()
    assert len(first.owned) == 6
    second = Client(c, "second")
    reply = second.beat()
    assert owned_of(reply) == frozenset(), "the new member waits while `first` still owns everything"
    response = heartbeat(c, "first", first.epoch, owned=first.owned)
    kept = owned_of(response)
    assert len(kept) == 3 and response["member_epoch"] == first.epoch, "revoke first, epoch unchanged"
    first.owned = kept
    first.beat()  # reports the revocation, moves to the new epoch
    assert len(second.beat()["assignment"]["topic_partitions"][0]["partitions"]) == 3


def test_a_wrong_epoch_is_fenced_and_the_member_rejoins():
    c = coordinator()
    client = Client(c, "m")
    client.beat()
    response = heartbeat(c, "m", client.epoch + 5)
    assert response["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
    assert heartbeat(c, "nobody", 3)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    again = heartbeat(c, "m", 0, owned=frozenset())
    assert again["error_code"] == ErrorCode.NONE and len(owned_of(again)) == 6


def test_unknown_assignor_is_refused():
    c = coordinator()
    assert heartbeat(c, "m", 0, assignor="sticky")["error_code"] == ErrorCode.UNSUPPORTED_ASSIGNOR


def test_session_timeout_hands_partitions_to_the_others():
    c = coordinator()
    clients = [Client(c, f"m{i}") for i in range(3)]
    converge(clients)
    for _ in range(4):
        for client in clients[:2]:
            client.beat(now_ms=SESSION_MS - 1)
    c.tick(SESSION_MS, topics=[TOPIC])
    assert "m2" not in c.groups["g"].members
    converge(clients[:2], now_ms=SESSION_MS)
    assert sorted(len(client.owned) for client in clients[:2]) == [3, 3]


def test_the_next_deadline_is_the_first_session_to_run_out():
    c = coordinator()
    clients = [Client(c, f"m{i}") for i in range(2)]
    converge(clients)
    clients[0].beat(now_ms=700)
    assert c.groups["g"].next_deadline_ms() == SESSION_MS  # m1 last beat at 0
    assert c.next_deadline_ms() == SESSION_MS


def test_commit_with_a_stale_member_epoch_is_refused():
    c = coordinator()
    client = Client(c, "m")
    client.beat()
    commit = [OffsetCommit("orders", 0, 10, -1, "")]
    errors, effects = c.commit_offsets(group_id="g", member_id="m", group_instance_id=None,
                                       generation_id=client.epoch - 1, offsets=commit, now_ms=0)
    assert errors == [ErrorCode.STALE_MEMBER_EPOCH] and not effects.records
    errors, _ = c.commit_offsets(group_id="g", member_id="m", group_instance_id=None,
                                 generation_id=client.epoch, offsets=commit, now_ms=0)
    assert errors == [ErrorCode.NONE]


def test_leaving_with_epoch_minus_one_frees_the_partitions():
    c = coordinator()
    clients = [Client(c, "a"), Client(c, "b")]
    converge(clients)
    assert heartbeat(c, "a", -1)["member_epoch"] == -1
    converge(clients[1:])
    assert len(clients[1].owned) == 6


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["join", "beat", "leave", "expire"]), st.integers(0, 4)), max_size=40))
def test_no_partition_is_ever_owned_by_two_members(steps):
    """GRP-1 under any order of joins, heartbeats, leaves and expiries (the core asserts it)."""
    c = coordinator()
    clients: dict[int, Client] = {}
    now = 0
    for action, index in steps:
        now += 100
        if action == "join" and index not in clients:
            clients[index] = Client(c, f"m{index}")
            clients[index].beat(now)
        elif action == "beat" and index in clients:
            response = heartbeat(c, clients[index].member_id, clients[index].epoch, clients[index].owned, now)
            if response["error_code"] != ErrorCode.NONE:
                del clients[index]
                continue
            clients[index].epoch = response["member_epoch"]
            if response["assignment"] is not None:
                clients[index].owned = owned_of(response)
        elif action == "leave" and index in clients:
            heartbeat(c, clients.pop(index).member_id, -1, now_ms=now)
        elif action == "expire":
            now += SESSION_MS
            c.tick(now, topics=[TOPIC])
            group = c.groups.get("g")
            clients = {i: cl for i, cl in clients.items() if group is not None and cl.member_id in group.members}
        group = c.groups.get("g")
        if group is not None:
            group.owner_of()
            for client in clients.values():  # a member owns at most what the coordinator says it may
                member = group.members[client.member_id]
                assert client.owned <= member.assigned | member.pending_revocation


def test_assignors_give_each_partition_to_one_subscribed_member():
    other = TopicMetadata(uuid.UUID(int=2), "payments", 3)
    topics = {TOPIC.topic_id: TOPIC, other.topic_id: other}
    subscriptions = {"a": {TOPIC.topic_id}, "b": {TOPIC.topic_id, other.topic_id}, "c": {other.topic_id}}
    for name in (UNIFORM, RANGE):
        result = assign(name, subscriptions, topics, {})
        assert sum(len(parts) for parts in result.values()) == 9
    uniform = assign(UNIFORM, subscriptions, topics, {})
    assert sorted(len(parts) for parts in uniform.values()) == [3, 3, 3]
    ranged = assign(RANGE, {"a": {TOPIC.topic_id}, "b": {TOPIC.topic_id}}, topics, {})
    assert ranged["a"] == {(TOPIC.topic_id, p) for p in range(3)}


def test_uniform_is_sticky_when_a_member_joins():
    topics = {TOPIC.topic_id: TOPIC}
    before = assign(UNIFORM, {"a": {TOPIC.topic_id}, "b": {TOPIC.topic_id}}, topics, {})
    after = assign(UNIFORM, {"a": {TOPIC.topic_id}, "b": {TOPIC.topic_id}, "c": {TOPIC.topic_id}}, topics, before)
    assert after["a"] <= before["a"] and after["b"] <= before["b"] and len(after["c"]) == 2


def test_replay_rebuilds_offsets_and_groups_and_tombstones_delete():
    c = coordinator()
    c.commit_offsets(group_id="simple", member_id="", group_instance_id=None, generation_id=-1,
                     offsets=[OffsetCommit("t", 0, 5, 3, "m")], now_ms=1)
    _, effects = c.commit_offsets(group_id="simple", member_id="", group_instance_id=None, generation_id=-1,
                                  offsets=[OffsetCommit("t", 0, 9, 3, "m2"), OffsetCommit("t", 1, 4, -1, "")],
                                  now_ms=2)
    records = list(effects.records)
    _, _, deleted = c.delete_offsets(group_id="simple", partitions=[("t", 1)], now_ms=3)
    records += deleted.records
    Client(c, "k").beat()
    log = []
    for record in records:
        log.append((encode_key(record.key), record.value))
    restored = coordinator()
    for key, value in log:
        restored.replay(key, value, now_ms=10)
    stored = restored.fetch_offsets("simple", None)[1]
    assert list(stored) == [("t", 0)] and stored["t", 0].offset == 9 and stored["t", 0].metadata == "m2"


def test_offsets_of_an_empty_group_expire_after_retention():
    c = coordinator(offsets_retention_ms=1000, offsets_retention_check_interval_ms=100)
    c.commit_offsets(group_id="s", member_id="", group_instance_id=None, generation_id=-1,
                     offsets=[OffsetCommit("t", 0, 1, -1, "")], now_ms=0)
    assert c.tick(500).records == []
    effects = c.tick(1000)
    assert [record.value for record in effects.records] == [None, None]  # offset, then the group
    assert "s" not in c.groups and c.list_groups() == []


def test_list_and_delete_groups():
    c = coordinator()
    Client(c, "m").beat()
    c.commit_offsets(group_id="simple", member_id="", group_instance_id=None, generation_id=-1,
                     offsets=[OffsetCommit("t", 0, 1, -1, "")], now_ms=0)
    assert [g["group_id"] for g in c.list_groups(types=["consumer"])] == ["g"]
    assert [g["group_id"] for g in c.list_groups(states=["empty"])] == ["simple"]
    errors, effects = c.delete_groups(["g", "simple", "none"], now_ms=0)
    assert errors == [ErrorCode.NON_EMPTY_GROUP, ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND]
    assert all(record.value is None for record in effects.records) and "simple" not in c.groups


def test_records_round_trip_and_group_partition_matches_java_hashcode():
    key = OffsetCommitKey("group", "topic", 7)
    assert decode_key(encode_key(key)) == key
    assert partition_for("abc", 1_000_000) == 96354  # "abc".hashCode() in Java
    assert 0 <= partition_for("é-group-\U0001F600", 50) < 50
