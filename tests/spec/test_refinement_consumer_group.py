"""A hypothesis state machine driving the KIP-848 group coordinator core with clients.

Each client heartbeats with its member epoch and the partitions it owns, takes the
assignment a response carries (or never sees a lost response), commits offsets for the
partitions it owns, leaves; time passes and the coordinator fences members whose session
expired, which may leave zombie clients that still believe they own partitions. After
every step:

  GRP-1  no two clients the coordinator still counts as members own the same partition
  GRP-3  a commit the coordinator accepts comes from the partition's current owner, so a
         fenced zombie can never move a committed offset (and offsets never move back,
         since owners commit the positions they consumed)
"""
from __future__ import annotations

import os
import random
import uuid
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from reference.coordinator.assignors import TopicMetadata
from reference.coordinator.consumer import ConsumerGroupConfig
from reference.coordinator.coordinator import GroupCoordinator, GroupCoordinatorConfig, OffsetCommit
from reference.protocol.errors import ErrorCode

LONG = os.environ.get("KSPEC_SPEC_PROFILE") == "long"
TOPIC = TopicMetadata(uuid.UUID(int=1), "orders", 4)
SESSION_TIMEOUT_MS = 10_000
CLIENTS = 3
GROUP = "g"


@dataclass
class Client:
    member_id: str = ""
    member_epoch: int = -1           # -1: not in the group
    owned: frozenset = frozenset()
    positions: dict = field(default_factory=dict)  # partition -> next offset to consume


class ConsumerGroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        config = GroupCoordinatorConfig(consumer=ConsumerGroupConfig(session_timeout_ms=SESSION_TIMEOUT_MS,
                                                                     heartbeat_interval_ms=100))
        self.coordinator = GroupCoordinator(config, random.Random(5), now_ms=0)
        self.now_ms = 0
        self.clients = [Client() for _ in range(CLIENTS)]
        self.committed: dict[int, int] = {}

    def _heartbeat(self, client: Client, epoch: int, owned) -> dict:
        response, _ = self.coordinator.consumer_group_heartbeat(
            group_id=GROUP, member_id=client.member_id, member_epoch=epoch, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30_000, subscribed_topic_names=[TOPIC.name] if epoch == 0 else None,
            subscribed_topic_regex=None, server_assignor=None, owned=owned, client_id="c", client_host="h",
            topics=[TOPIC], now_ms=self.now_ms)
        return response

    def _members(self) -> dict:
        group = self.coordinator.groups.get(GROUP)
        return {} if group is None else group.members

    @rule(index=st.integers(0, CLIENTS - 1), response_lost=st.booleans())
    def heartbeat(self, index: int, response_lost: bool) -> None:
        client = self.clients[index]
        joining = client.member_epoch < 0
        response = self._heartbeat(client, 0 if joining else client.member_epoch,
                                   frozenset() if joining else frozenset((TOPIC.topic_id, p) for p in client.owned))
        if response_lost:
            if joining and response["error_code"] == ErrorCode.NONE:
                client.member_id = response["member_id"]  # the client made up its id (KIP-1082) before sending
            return
        if response["error_code"] in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            self.clients[index] = Client()  # fenced: give everything up and join again later
            return
        assert response["error_code"] == ErrorCode.NONE, response
        client.member_id, client.member_epoch = response["member_id"], response["member_epoch"]
        if response["assignment"] is not None:
            client.owned = frozenset(p for tp in response["assignment"]["topic_partitions"] for p in tp["partitions"])
            client.positions = {p: self.committed.get(p, 0) if p not in client.positions else client.positions[p]
                                for p in client.owned}

    @precondition(lambda self: any(c.member_epoch >= 0 for c in self.clients))
    @rule(data=st.data())
    def leave(self, data) -> None:
        index = data.draw(st.sampled_from([i for i, c in enumerate(self.clients) if c.member_epoch >= 0]))
        self._heartbeat(self.clients[index], -1, None)
        self.clients[index] = Client()

    @rule(elapsed_ms=st.sampled_from([100, 5_000, SESSION_TIMEOUT_MS + 1]))
    def tick(self, elapsed_ms: int) -> None:
        self.now_ms += elapsed_ms
        self.coordinator.tick(self.now_ms, [TOPIC])

    @precondition(lambda self: any(c.owned for c in self.clients))
    @rule(data=st.data())
    def consume_and_commit(self, data) -> None:
        index = data.draw(st.sampled_from([i for i, c in enumerate(self.clients) if c.owned]))
        client = self.clients[index]
        partition = data.draw(st.sampled_from(sorted(client.owned)))
        client.positions[partition] = client.positions.get(partition, 0) + 1
        (error,), _ = self.coordinator.commit_offsets(
            group_id=GROUP, member_id=client.member_id, group_instance_id=None, generation_id=client.member_epoch,
            offsets=[OffsetCommit(TOPIC.name, partition, client.positions[partition], -1, None)], now_ms=self.now_ms)
        if error == ErrorCode.NONE:
            member = self._members().get(client.member_id)
            assert member is not None and (TOPIC.topic_id, partition) in member.assigned | member.pending_revocation, \
                f"GRP-3: {client.member_id} committed partition {partition} it no longer owns"
            assert client.positions[partition] >= self.committed.get(partition, 0), \
                f"GRP-3: committed offset of partition {partition} moved back"
            self.committed[partition] = client.positions[partition]
        else:
            assert error in (ErrorCode.STALE_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID), error

    @invariant()
    def one_owner_among_current_members(self) -> None:
        members = self._members()
        owners: dict[int, str] = {}
        for client in self.clients:
            if client.member_id not in members:
                continue  # a zombie: fenced, its commits are refused
            for partition in client.owned:
                assert partition not in owners, f"GRP-1: partition {partition} owned by {owners[partition]} and " \
                                                f"{client.member_id}"
                owners[partition] = client.member_id


ConsumerGroupMachine.TestCase.settings = settings(
    max_examples=300 if LONG else 40, stateful_step_count=80 if LONG else 40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestConsumerGroupMachine = ConsumerGroupMachine.TestCase
