"""Partition replication: the replica core (leader and follower), the leader-epoch cache."""
from reference.replication.leader_epoch_cache import LeaderEpochCache
from reference.replication.replica import (
    AlterPartitionRequest,
    EpochEndOffset,
    EpochEndOffsetRequest,
    FetchAnswer,
    PartitionChange,
    PartitionReplica,
    ReplicaConfig,
    ReplicaFetch,
    ReplicationBugs,
    Role,
)

__all__ = [
    "AlterPartitionRequest", "EpochEndOffset", "EpochEndOffsetRequest", "FetchAnswer", "LeaderEpochCache",
    "PartitionChange", "PartitionReplica", "ReplicaConfig", "ReplicaFetch", "ReplicationBugs", "Role",
]
