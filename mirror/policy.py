"""Replication policies: how a source topic is named in the target cluster (MM2's
ReplicationPolicy, DefaultReplicationPolicy and IdentityReplicationPolicy).

DefaultReplicationPolicy prefixes the source alias (`A.orders` in B), so the name says where
a topic came from and a topic that already came from the target is recognised as a cycle.
IdentityReplicationPolicy keeps names (for one-way migration); it cannot tell where a topic
came from, so it detects no cycles, but heartbeats are still prefixed.
"""
from __future__ import annotations

HEARTBEATS_TOPIC = "heartbeats"


class DefaultReplicationPolicy:
    def __init__(self, separator: str = ".") -> None:
        self.separator = separator

    def format_remote_topic(self, source: str, topic: str) -> str:
        return f"{source}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        """The alias a remote topic came from (text before the first separator), None for a local one."""
        source, separator, _ = topic.partition(self.separator)
        return source if separator and source else None

    def upstream_topic(self, topic: str) -> str | None:
        return topic.partition(self.separator)[2] if self.topic_source(topic) else None

    def is_cycle(self, topic: str, target: str) -> bool:
        """The topic came, over any number of hops, from the target cluster."""
        while (source := self.topic_source(topic)) is not None:
            if source == target:
                return True
            topic = self.upstream_topic(topic)
        return False

    def checkpoints_topic(self, source: str) -> str:
        return f"{source}.checkpoints.internal"

    def is_heartbeats_topic(self, topic: str) -> bool:
        return topic == HEARTBEATS_TOPIC or topic.endswith(self.separator + HEARTBEATS_TOPIC)

    @staticmethod
    def is_internal_topic(topic: str) -> bool:
        """Never mirrored: Kafka's and Connect's internal topics and MM2's own."""
        return topic.startswith(("__", ".")) or topic.endswith((".internal", "-internal"))


class IdentityReplicationPolicy(DefaultReplicationPolicy):
    def format_remote_topic(self, source: str, topic: str) -> str:
        return super().format_remote_topic(source, topic) if topic == HEARTBEATS_TOPIC else topic

    def topic_source(self, topic: str) -> str | None:
        return super().topic_source(topic) if self.is_heartbeats_topic(topic) else None

    def is_cycle(self, topic: str, target: str) -> bool:
        return False


ReplicationPolicy = DefaultReplicationPolicy
POLICIES = {"DefaultReplicationPolicy": DefaultReplicationPolicy, "IdentityReplicationPolicy": IdentityReplicationPolicy}
