"""The ApiVersions table this broker advertises: API key -> (min version, max version).

Every version in a range is implemented by a handler in reference/handlers/. Clients send
min(their max, our max) (research/protocol.md §1), so the maxima follow Apache Kafka 4.3
and every client gets its preferred version, flexible ones included. APIs that are not
implemented yet (share groups, delegation tokens, ...) are absent, so clients never send them.
"""
from __future__ import annotations

from reference.protocol.api_keys import ApiKey

SUPPORTED_API_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    # Advertised from 0 although v0-2 are refused (the connection is closed): librdkafka
    # before 2.11.1 (kcat here) disables compression unless Produce min is 0 (KAFKA-18659).
    ApiKey.PRODUCE: (0, 13),
    ApiKey.FETCH: (4, 18),  # v0-3 removed in Kafka 4.0 (KIP-896)
    ApiKey.LIST_OFFSETS: (1, 11),  # v0 removed in Kafka 4.0 (KIP-896)
    ApiKey.METADATA: (0, 13),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 7),  # v0-1 removed in Kafka 4.0 (KIP-896)
    ApiKey.DELETE_TOPICS: (1, 6),  # v0 removed in Kafka 4.0 (KIP-896)
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 5),  # v6 (KIP-939 two-phase commit) is unstable
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),  # v0-1 removed in Kafka 4.0 (KIP-896)
    ApiKey.DESCRIBE_CONFIGS: (1, 4),  # v0 removed in Kafka 4.0 (KIP-896)
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    # Group coordination (reference/handlers/groups.py).
    ApiKey.OFFSET_COMMIT: (2, 9),  # v0-1 removed in Kafka 4.0 (KIP-896); v10 names topics by id
    ApiKey.OFFSET_FETCH: (1, 9),  # v0 removed in Kafka 4.0 (KIP-896); v10 names topics by id
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 0),
    # Transactions (reference/handlers/transactions.py), transaction version 1: EndTxn and
    # TxnOffsetCommit v5 (KIP-890 part 2) are not offered; AddPartitionsToTxn v4+ is for brokers.
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 4),
    ApiKey.WRITE_TXN_MARKERS: (0, 1),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    # Security (reference/security/): SASL (KIP-43, KIP-152, KIP-368), ACLs, SCRAM credentials (KIP-554).
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_ACLS: (1, 3),  # v0 removed in Kafka 4.0 (KIP-896)
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}

# Served by cluster nodes only (ClusterBroker.api_versions): a single node has no controller quorum,
# and no leader to elect (its one replica of each partition leads it).
CLUSTER_ONLY_API_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.DESCRIBE_QUORUM: (0, 2),
    ApiKey.ELECT_LEADERS: (0, 2),
}

# Versions inside an advertised range that the broker still refuses (see PRODUCE above).
REFUSED_VERSIONS: dict[ApiKey, range] = {ApiKey.PRODUCE: range(0, 3)}


def is_supported(api_key: int, api_version: int,
                 advertised: dict[ApiKey, tuple[int, int]] = SUPPORTED_API_VERSIONS) -> bool:
    if api_key not in advertised:
        return False
    key = ApiKey(api_key)
    low, high = advertised[key]
    return low <= api_version <= high and api_version not in REFUSED_VERSIONS.get(key, ())

# Kafka's inter-node RPCs, served to the other nodes of a cluster (reference/server/cluster.py):
# the controller quorum's (KIP-595, KIP-996), the brokers' to the active controller (KIP-631,
# KIP-497) and forwarded admin requests (KIP-590). Kafka's ApiMessageType gives them the
# "controller" listener only, so no client listener's ApiVersions lists them; the Fetch of the
# metadata log is an ordinary Fetch (its range is the clients').
INTER_NODE_API_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.VOTE: (0, 2),
    ApiKey.BEGIN_QUORUM_EPOCH: (0, 1),
    ApiKey.END_QUORUM_EPOCH: (0, 1),
    ApiKey.ALTER_PARTITION: (2, 3),  # v0-1 name topics, kspec's brokers send topic ids
    ApiKey.ENVELOPE: (0, 0),
    ApiKey.BROKER_REGISTRATION: (0, 4),
    ApiKey.BROKER_HEARTBEAT: (0, 1),
}

# What a controller listener (controller.listener.names) serves and lists in ApiVersions besides
# INTER_NODE_API_VERSIONS: Kafka's APIs whose ApiMessageType listeners include "controller" and
# that kspec's controller answers (the Fetch is the metadata log's), no broker's API.
CONTROLLER_LISTENER_APIS = frozenset({
    ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.FETCH, ApiKey.DESCRIBE_QUORUM,
    ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS, ApiKey.ALTER_CONFIGS,
    ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ELECT_LEADERS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
})
