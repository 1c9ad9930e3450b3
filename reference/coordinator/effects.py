"""What a coordinator call hands back to its caller: replies that completed, records to append.

The coordinator cores never do I/O. A JoinGroup or SyncGroup request is answered only when
its rebalance phase completes, which may happen during another member's request or a timer
tick, so every reply travels with the opaque `token` the caller gave for its request (the
shell uses an asyncio future). Records are what must be appended to `__consumer_offsets`
before any reply of the same call is sent, so that an acknowledged commit is durable.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference.coordinator.records import RecordKey


@dataclass(frozen=True)
class OffsetsRecord:
    """One record for a partition of __consumer_offsets; value None is a tombstone."""

    partition: int
    key: RecordKey
    value: bytes | None


@dataclass
class Effects:
    replies: list[tuple[Any, dict]] = field(default_factory=list)
    records: list[OffsetsRecord] = field(default_factory=list)

    def reply(self, token: Any, response: dict) -> None:
        assert token is not None, "a reply needs the token of the request it answers"
        assert "error_code" in response, response
        self.replies.append((token, response))

    def extend(self, other: Effects) -> None:
        self.replies += other.replies
        self.records += other.records
