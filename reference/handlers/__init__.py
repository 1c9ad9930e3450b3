"""Request handlers: one module per API family, each a thin function
`handle_x(broker, request, context) -> response dict` (None: no response, as acks=0 Produce).

Fetch is the one handler the shell drives itself (`fetch.read_fetch`), because it may wait.
HANDLERS covers exactly the keys advertised in reference/protocol/api_versions.py.
"""
from __future__ import annotations

from reference.handlers.api_versions import handle_api_versions
from reference.handlers.configs import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from reference.handlers.metadata import handle_describe_cluster, handle_metadata
from reference.handlers.offsets import handle_delete_records, handle_list_offsets
from reference.handlers.produce import handle_produce
from reference.handlers.producer_ids import handle_init_producer_id
from reference.handlers.topics import handle_create_partitions, handle_create_topics, handle_delete_topics
from reference.protocol.api_keys import ApiKey
from reference.protocol.api_versions import SUPPORTED_API_VERSIONS

HANDLERS = {
    ApiKey.PRODUCE: handle_produce,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.METADATA: handle_metadata,
    ApiKey.API_VERSIONS: handle_api_versions,
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.DELETE_RECORDS: handle_delete_records,
    ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster,
}
assert set(HANDLERS) | {ApiKey.FETCH} == set(SUPPORTED_API_VERSIONS)
