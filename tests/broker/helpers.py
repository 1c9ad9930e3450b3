"""Small request builders shared by the broker tests."""
from __future__ import annotations

import time

from reference.protocol.api_keys import ApiKey
from reference.protocol.records import Record, build_batch

PRODUCE_VERSION = 9
FETCH_VERSION = 12
METADATA_VERSION = 12
LIST_OFFSETS_VERSION = 7


def batch_of(values, timestamp_ms: int | None = None) -> bytes:
    timestamp_ms = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    return build_batch([Record(timestamp=timestamp_ms, value=value) for value in values])


def produce_request(topic: str, records: bytes, acks: int = 1, partition: int = 0) -> dict:
    return {"acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}


def produce(client, topic: str, records: bytes, acks: int = 1, partition: int = 0):
    response = client.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(topic, records, acks, partition))
    return response.responses[0].partition_responses[0]


def create_topic(client, name: str, partitions: int = 1, configs: dict | None = None):
    response = client.request(ApiKey.CREATE_TOPICS, 7, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout_ms": 5000})
    return response.topics[0]


def fetch_request(topic: str, offset: int, max_wait_ms: int = 0, min_bytes: int = 0, partition: int = 0,
                  max_bytes: int = 1 << 20) -> dict:
    return {"max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                                         "partition_max_bytes": max_bytes}]}]}


def fetch(client, topic: str, offset: int, **kwargs):
    response = client.request(ApiKey.FETCH, FETCH_VERSION, fetch_request(topic, offset, **kwargs))
    return response.responses[0].partitions[0]


def list_offset(client, topic: str, timestamp: int, partition: int = 0):
    response = client.request(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp}]}]})
    return response.topics[0].partitions[0]
