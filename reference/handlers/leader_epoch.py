"""The current-leader-epoch check of Fetch and ListOffsets (KIP-320).

A client that names a leader epoch older than the partition's is fenced; a newer one means
this broker has not yet learned of it. -1 skips the check.
"""
from __future__ import annotations

from reference.protocol.errors import ErrorCode, KafkaError

NO_LEADER_EPOCH = -1


def check_current_leader_epoch(partition, current_leader_epoch: int) -> None:
    if current_leader_epoch == NO_LEADER_EPOCH or current_leader_epoch == partition.leader_epoch:
        return
    if current_leader_epoch < partition.leader_epoch:
        raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH,
                         f"epoch {current_leader_epoch} < leader epoch {partition.leader_epoch}")
    raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                     f"epoch {current_leader_epoch} > leader epoch {partition.leader_epoch}")
