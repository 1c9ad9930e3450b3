"""What a single node (`Broker`, broker.py) and a node of a cluster (`ClusterBroker`,
cluster.py) share: the data dir and its meta.properties, the metadata image's lookups, topic
configs, the security lookups over the image, and the guard around writes to the log dir.
Each subclass brings its own partitions (plain logs, or replicas) and its own way to change
the metadata (its own metadata log, or the controller quorum); reference/node/README.md says
why they are two classes behind one interface (interface.py).
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
import uuid
from dataclasses import dataclass

from reference.config import BrokerConfig, read_properties_file
from reference.node.metadata import MetadataImage, TopicImage
from reference.protocol.errors import ErrorCode, KafkaError
from reference.security.authorizer import StandardAuthorizer
from reference.security.scram import ScramCredential
from reference.storage import LogConfig
from reference.storage.atomic import replace_file
from reference.storage.log_dir_failure import LogDirFailureChannel

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION_DIR = METADATA_TOPIC + "-0"
META_PROPERTIES = "meta.properties"
META_PROPERTIES_VERSION = 1  # KRaft mode meta.properties
TOPIC_NAME_BYTES_MAX = 249
TOPIC_NAME_PATTERN = re.compile(r"[a-zA-Z0-9._-]+")
PARTITIONS_PER_TOPIC_MAX = 10_000


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class BrokerBase:
    def __init__(self, config: BrokerConfig, now_ms: int) -> None:
        assert config.log_dirs, "log.dirs is required"
        self.config = config
        self.data_dir = config.log_dirs
        self.log_dir_failures = LogDirFailureChannel()
        os.makedirs(self.data_dir, exist_ok=True)
        self.cluster_id = self._load_meta_properties()
        self.image = MetadataImage()
        self.appended: set[TopicPartition] = set()  # effects for the shell: wake fetches
        self._last_retention_check_ms = now_ms
        self._last_cleaner_run_ms = now_ms

    def topic(self, name: str) -> TopicImage:
        if name not in self.image.topics_by_name:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r}")
        return self.image.topics_by_name[name]

    def topic_name_by_id(self, topic_id: uuid.UUID) -> str:
        if topic_id not in self.image.topics_by_id:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, str(topic_id))
        return self.image.topics_by_id[topic_id]

    def log_config(self, overrides: dict[str, str]) -> LogConfig:
        """The LogConfig of a topic with these overrides over the broker defaults; KafkaError(INVALID_CONFIG)."""
        return LogConfig.from_properties({**self.config.topic_defaults(), **overrides})

    # -- security (reference/security/) -------------------------------------------------

    @functools.cached_property
    def authorizer(self) -> StandardAuthorizer | None:
        """authorizer.class.name's authorizer over the ACLs in the metadata image; None when unset."""
        return StandardAuthorizer.from_properties(self.config.security_properties,
                                                  lambda: self.image.security.acls.values())

    def scram_credential(self, mechanism: str, user: str) -> ScramCredential | None:
        return self.image.security.scram_credentials.get((user, mechanism))

    # -- storage ------------------------------------------------------------------------

    @contextlib.contextmanager
    def storage_io(self):
        """Around writes to the log dir: an OSError takes it offline (storage/log_dir_failure.py)
        and is raised as KAFKA_STORAGE_ERROR; once offline, nothing more is written there."""
        self.log_dir_failures.check_online(self.data_dir)
        try:
            yield
        except OSError as error:
            raise self.log_dir_failures.fail(self.data_dir, error) from error

    def tick(self, now_ms: int) -> None:
        """Periodic work: time-based flush (flush.ms), retention (log.retention.check.interval.ms)
        and compaction of compacted topics (log.cleaner.enable, log.cleaner.backoff.ms)."""
        with self.storage_io():
            self._tick(now_ms)

    def _tick(self, now_ms: int) -> None:
        raise NotImplementedError

    def _load_meta_properties(self) -> str:
        """Read meta.properties or write a new one; a node.id mismatch is refused."""
        path = os.path.join(self.data_dir, META_PROPERTIES)
        if os.path.exists(path):
            properties = read_properties_file(path)
            if int(properties["node.id"]) != self.config.node_id:
                raise ValueError(
                    f"{path} belongs to node.id {properties['node.id']}, not {self.config.node_id}; "
                    "use that --node-id or another --data-dir"
                )
            return properties["cluster.id"]
        cluster_id = self._new_cluster_id()
        replace_file(path, f"#\n#kspec\ncluster.id={cluster_id}\nnode.id={self.config.node_id}\n"
                           f"version={META_PROPERTIES_VERSION}\n".encode())
        return cluster_id

    def _new_cluster_id(self) -> str:
        raise NotImplementedError


def check_topic_name(name: str) -> None:
    """Kafka's Topic.validate: legal characters, length, not '.' or '..'."""
    problem = None
    if not name:
        problem = "the topic name is empty"
    elif name in (".", ".."):
        problem = f"the topic name cannot be {name!r}"
    elif len(name) > TOPIC_NAME_BYTES_MAX:
        problem = f"the topic name is longer than {TOPIC_NAME_BYTES_MAX} characters"
    elif not TOPIC_NAME_PATTERN.fullmatch(name):
        problem = f"topic name {name!r} has characters outside [a-zA-Z0-9._-]"
    elif name == METADATA_TOPIC:
        problem = f"{METADATA_TOPIC} is reserved for the metadata log"
    if problem:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
