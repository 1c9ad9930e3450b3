"""Request handlers: one module per API family, each a thin function
`handle_x(broker, request, context) -> response dict` (None: no response, as acks=0 Produce).

HANDLERS answer at once; WAITING_HANDLERS are `async def` and may wait (a rebalance phase,
the ISR, another node), and the shell awaits them. Fetch is the one handler the shell drives
itself (`fetch.read_fetch`): it re-runs it as appends land (its purgatory). Together they cover
exactly the keys advertised in reference/protocol/api_versions.py.
"""
from __future__ import annotations

import inspect

from reference.handlers.acls import handle_create_acls, handle_delete_acls, handle_describe_acls
from reference.handlers.api_versions import handle_api_versions
from reference.handlers.configs import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from reference.handlers.elect_leaders import handle_elect_leaders
from reference.handlers.find_coordinator import handle_find_coordinator
from reference.handlers.groups import (
    handle_consumer_group_describe,
    handle_consumer_group_heartbeat,
    handle_delete_groups,
    handle_describe_groups,
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_list_groups,
    handle_offset_commit,
    handle_offset_delete,
    handle_offset_fetch,
    handle_sync_group,
)
from reference.handlers.leader_epoch_offsets import handle_offset_for_leader_epoch
from reference.handlers.metadata import handle_describe_cluster, handle_metadata
from reference.handlers.offsets import handle_delete_records, handle_list_offsets
from reference.handlers.produce import handle_produce
from reference.handlers.quorum import handle_describe_quorum
from reference.handlers.producer_ids import handle_init_producer_id
from reference.handlers.transactions import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_describe_transactions,
    handle_end_txn,
    handle_list_transactions,
    handle_txn_offset_commit,
    handle_write_txn_markers,
)
from reference.handlers.sasl import handle_sasl_authenticate, handle_sasl_handshake
from reference.handlers.scram_credentials import (
    handle_alter_user_scram_credentials,
    handle_describe_user_scram_credentials,
)
from reference.handlers.topics import handle_create_partitions, handle_create_topics, handle_delete_topics
from reference.protocol.api_keys import ApiKey
from reference.protocol.api_versions import CLUSTER_ONLY_API_VERSIONS, SUPPORTED_API_VERSIONS

HANDLERS = {
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.METADATA: handle_metadata,
    ApiKey.API_VERSIONS: handle_api_versions,
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.DELETE_RECORDS: handle_delete_records,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster,
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.LIST_GROUPS: handle_list_groups,
    ApiKey.CONSUMER_GROUP_DESCRIBE: handle_consumer_group_describe,
    ApiKey.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: handle_list_transactions,
    ApiKey.DESCRIBE_QUORUM: handle_describe_quorum,  # cluster nodes only: one node has no quorum
    ApiKey.ELECT_LEADERS: handle_elect_leaders,  # cluster nodes only: one node's replicas lead already
    ApiKey.SASL_HANDSHAKE: handle_sasl_handshake,  # a SASL listener's connections answer it themselves
    ApiKey.SASL_AUTHENTICATE: handle_sasl_authenticate,
    ApiKey.DESCRIBE_ACLS: handle_describe_acls,
    ApiKey.CREATE_ACLS: handle_create_acls,
    ApiKey.DELETE_ACLS: handle_delete_acls,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: handle_alter_user_scram_credentials,
}
WAITING_HANDLERS = {
    ApiKey.PRODUCE: handle_produce,
    ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    ApiKey.JOIN_GROUP: handle_join_group,  # waits for the join phase
    ApiKey.SYNC_GROUP: handle_sync_group,  # waits for the leader's assignment
    ApiKey.LEAVE_GROUP: handle_leave_group,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_DELETE: handle_offset_delete,
    ApiKey.DELETE_GROUPS: handle_delete_groups,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: handle_consumer_group_heartbeat,
    ApiKey.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    ApiKey.END_TXN: handle_end_txn,
    ApiKey.WRITE_TXN_MARKERS: handle_write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
}
assert not set(HANDLERS) & set(WAITING_HANDLERS)
assert set(HANDLERS) | set(WAITING_HANDLERS) | {ApiKey.FETCH} == (set(SUPPORTED_API_VERSIONS)
                                                                   | set(CLUSTER_ONLY_API_VERSIONS))
assert all(inspect.iscoroutinefunction(handler) for handler in WAITING_HANDLERS.values())
assert not any(inspect.iscoroutinefunction(handler) for handler in HANDLERS.values())
