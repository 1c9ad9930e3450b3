"""OffsetForLeaderEpoch (key 23): where a leader epoch ends on this leader's log (KIP-101/279).

Followers ask it before fetching, to find where their log diverges from the leader's; clients
ask it after a leader change to detect truncation (KIP-320). CurrentLeaderEpoch fences a stale
asker (FENCED_LEADER_EPOCH) or one ahead of this broker (UNKNOWN_LEADER_EPOCH).
"""
from __future__ import annotations

from reference.handlers.context import RequestContext
from reference.node.broker import TopicPartition
from reference.node.interface import BrokerNode
from reference.protocol.errors import KafkaError


def handle_offset_for_leader_epoch(broker: BrokerNode, request, context: RequestContext) -> dict:
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            try:
                answer = broker.offset_for_leader_epoch(TopicPartition(topic.topic, wanted.partition),
                                                        wanted.current_leader_epoch, wanted.leader_epoch)
                result = {"error_code": answer.error, "leader_epoch": answer.leader_epoch,
                          "end_offset": answer.end_offset}
            except KafkaError as e:
                result = {"error_code": e.code, "leader_epoch": -1, "end_offset": -1}
            partitions.append({"partition": wanted.partition, **result})
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
