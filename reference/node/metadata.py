"""The cluster metadata image: topics, partitions, configs and producer-id blocks, built
by replaying metadata records in order.

This is the seed of KRaft's metadata log (KIP-500, KIP-631): every change is first written
as a record to `__cluster_metadata-0`, then applied here; on start the broker replays the
log. Records are JSON objects named after their KRaft counterparts: TopicRecord,
PartitionRecord, ConfigRecord, RemoveTopicRecord, ProducerIdsRecord, and the security records
(ACLs and SCRAM credentials, reference/security/records.py). Sans-IO: no files,
no clock; `apply` is the only way the image changes.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from reference.controller.state import apply_config_record
from reference.security import records as security_records

# Config resource types (DescribeConfigs / AlterConfigs ResourceType, KIP-133).
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4  # described, never altered: broker configs come from the command line
GROUP_RESOURCE = 32  # a group's configs (Kafka 4.0, KIP-848's GroupConfig)


@dataclass
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partition_count: int = 0
    configs: dict[str, str] = field(default_factory=dict)  # overrides only


@dataclass
class MetadataImage:
    topics_by_name: dict[str, TopicImage] = field(default_factory=dict)
    topics_by_id: dict[uuid.UUID, str] = field(default_factory=dict)
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # group id -> its overrides
    next_producer_id: int = 0  # the first producer id not yet handed out
    security: security_records.SecurityImage = field(default_factory=security_records.SecurityImage)

    def apply(self, record: dict) -> None:
        """Apply one metadata record; the image stays consistent or the record is refused."""
        kind = record["type"]
        if kind == "TopicRecord":
            name, topic_id = record["name"], uuid.UUID(record["topic_id"])
            assert name not in self.topics_by_name and topic_id not in self.topics_by_id, record
            self.topics_by_name[name] = TopicImage(name, topic_id)
            self.topics_by_id[topic_id] = name
        elif kind == "PartitionRecord":
            topic = self.topics_by_name[self.topics_by_id[uuid.UUID(record["topic_id"])]]
            assert record["partition_id"] == topic.partition_count, (record, topic)
            topic.partition_count += 1
        elif kind == "ConfigRecord" and record["resource_type"] == GROUP_RESOURCE:
            apply_config_record(self.group_configs.setdefault(record["resource_name"], {}), record)
            if not self.group_configs[record["resource_name"]]:
                del self.group_configs[record["resource_name"]]
        elif kind == "ConfigRecord":
            assert record["resource_type"] == TOPIC_RESOURCE, record
            apply_config_record(self.topics_by_name[record["resource_name"]].configs, record)
        elif kind == "RemoveTopicRecord":
            name = self.topics_by_id.pop(uuid.UUID(record["topic_id"]))
            del self.topics_by_name[name]
        elif kind == "ProducerIdsRecord":
            assert record["next_producer_id"] > self.next_producer_id, record
            self.next_producer_id = record["next_producer_id"]
        elif kind in security_records.RECORD_TYPES:
            self.security.apply(record)
        else:
            raise ValueError(f"unknown metadata record type {kind!r}")
