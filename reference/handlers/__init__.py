"""Request handlers: one module per API family, each a thin function
`handle_x(broker, request, context) -> response dict` (None: no response, as acks=0 Produce).

HANDLERS answer at once; WAITING_HANDLERS are `async def` and may wait (a rebalance phase,
the ISR, another node), and the shell awaits them. Fetch is the one handler the shell drives
itself (`fetch.read_fetch`): it re-runs it as appends land (its purgatory). Together they cover
exactly the keys advertised in reference/protocol/api_versions.py.
"""
from __future__ import annotations

import inspect

from reference.handlers import (acls, api_versions, configs, elect_leaders, find_coordinator, groups,
    leader_epoch_offsets, metadata, offsets, produce, producer_ids, quorum, sasl, scram_credentials, topics,
    transactions)
from reference.protocol.api_keys import ApiKey
from reference.protocol.api_versions import CLUSTER_ONLY_API_VERSIONS, SUPPORTED_API_VERSIONS

HANDLERS = {
    ApiKey.LIST_OFFSETS: offsets.handle_list_offsets,
    ApiKey.METADATA: metadata.handle_metadata,
    ApiKey.API_VERSIONS: api_versions.handle_api_versions,
    ApiKey.CREATE_TOPICS: topics.handle_create_topics,
    ApiKey.DELETE_TOPICS: topics.handle_delete_topics,
    ApiKey.DELETE_RECORDS: offsets.handle_delete_records,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: leader_epoch_offsets.handle_offset_for_leader_epoch,
    ApiKey.DESCRIBE_CONFIGS: configs.handle_describe_configs,
    ApiKey.ALTER_CONFIGS: configs.handle_alter_configs,
    ApiKey.CREATE_PARTITIONS: topics.handle_create_partitions,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.handle_incremental_alter_configs,
    ApiKey.DESCRIBE_CLUSTER: metadata.handle_describe_cluster,
    ApiKey.FIND_COORDINATOR: find_coordinator.handle_find_coordinator,
    ApiKey.HEARTBEAT: groups.handle_heartbeat,
    ApiKey.OFFSET_FETCH: groups.handle_offset_fetch,
    ApiKey.DESCRIBE_GROUPS: groups.handle_describe_groups,
    ApiKey.LIST_GROUPS: groups.handle_list_groups,
    ApiKey.CONSUMER_GROUP_DESCRIBE: groups.handle_consumer_group_describe,
    ApiKey.DESCRIBE_TRANSACTIONS: transactions.handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: transactions.handle_list_transactions,
    ApiKey.DESCRIBE_QUORUM: quorum.handle_describe_quorum,  # cluster nodes only: one node has no quorum
    ApiKey.ELECT_LEADERS: elect_leaders.handle_elect_leaders,  # cluster nodes only: one node's replicas lead already
    ApiKey.SASL_HANDSHAKE: sasl.handle_sasl_handshake,  # a SASL listener's connections answer it themselves
    ApiKey.SASL_AUTHENTICATE: sasl.handle_sasl_authenticate,
    ApiKey.DESCRIBE_ACLS: acls.handle_describe_acls,
    ApiKey.CREATE_ACLS: acls.handle_create_acls,
    ApiKey.DELETE_ACLS: acls.handle_delete_acls,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: scram_credentials.handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: scram_credentials.handle_alter_user_scram_credentials,
}
WAITING_HANDLERS = {
    ApiKey.PRODUCE: produce.handle_produce,
    ApiKey.INIT_PRODUCER_ID: producer_ids.handle_init_producer_id,
    ApiKey.JOIN_GROUP: groups.handle_join_group,  # waits for the join phase
    ApiKey.SYNC_GROUP: groups.handle_sync_group,  # waits for the leader's assignment
    ApiKey.LEAVE_GROUP: groups.handle_leave_group,
    ApiKey.OFFSET_COMMIT: groups.handle_offset_commit,
    ApiKey.OFFSET_DELETE: groups.handle_offset_delete,
    ApiKey.DELETE_GROUPS: groups.handle_delete_groups,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: groups.handle_consumer_group_heartbeat,
    ApiKey.ADD_PARTITIONS_TO_TXN: transactions.handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: transactions.handle_add_offsets_to_txn,
    ApiKey.END_TXN: transactions.handle_end_txn,
    ApiKey.WRITE_TXN_MARKERS: transactions.handle_write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: transactions.handle_txn_offset_commit,
}
assert not set(HANDLERS) & set(WAITING_HANDLERS)
assert set(HANDLERS) | set(WAITING_HANDLERS) | {ApiKey.FETCH} == (set(SUPPORTED_API_VERSIONS)
                                                                   | set(CLUSTER_ONLY_API_VERSIONS))
assert all(inspect.iscoroutinefunction(handler) for handler in WAITING_HANDLERS.values())
assert not any(inspect.iscoroutinefunction(handler) for handler in HANDLERS.values())
