"""The consumer protocol's member metadata: which topics a classic consumer subscribes to.

A classic group's coordinator treats member metadata as opaque bytes, except where Kafka
looks inside: OffsetDelete refuses to delete offsets of a topic the group still consumes
(GROUP_SUBSCRIBED_TO_TOPIC). The bytes are a ConsumerProtocolSubscription, an int16
version followed by that version's body, decoded with Kafka's own definition.
"""
from __future__ import annotations

from reference.protocol.codec import compile_decoder
from reference.protocol.primitives import ProtocolDecodeError, Reader
from reference.protocol.schema import definitions, message_layout

SUBSCRIPTION = "ConsumerProtocolSubscription"


def subscription_topics(metadata: bytes) -> set[str] | None:
    """The subscribed topic names, or None for bytes that are not a consumer subscription."""
    try:
        reader = Reader(metadata)
        version = reader.int16()
        valid = definitions()[SUBSCRIPTION].valid_versions
        if version not in valid:
            version = valid.high  # newer versions only append fields (Kafka's rule)
        subscription = compile_decoder(message_layout(SUBSCRIPTION, version))(reader)
    except (ProtocolDecodeError, ValueError):
        return None
    return set(subscription.topics)
