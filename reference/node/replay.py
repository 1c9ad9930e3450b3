"""Replaying one committed metadata record into a cluster node's two views: ControllerState
(brokers, partitions, leaders, ISRs: what the active controller decides from) and the
MetadataImage (topics, configs, producer-id blocks, ACLs and SCRAM credentials).

Every node must replay every committed record, or its view diverges from the quorum's for
good; a node whose replay fails stops at once (`halt_on_replay_failure`), as Kafka's
controller does through its fatal fault handler (ProcessTerminatingFaultHandler).
"""
from __future__ import annotations

import logging
import os

from reference.controller.state import ControllerState
from reference.node.metadata import MetadataImage
from reference.security.records import RECORD_TYPES as SECURITY_RECORD_TYPES

# Records for the MetadataImage only (ControllerState never sees them), and those for both.
IMAGE_ONLY_RECORD_TYPES = {"ProducerIdsRecord", *SECURITY_RECORD_TYPES}
IMAGE_RECORD_TYPES = {"TopicRecord", "PartitionRecord", "ConfigRecord", "RemoveTopicRecord", *IMAGE_ONLY_RECORD_TYPES}
METADATA_REPLAY_FAILED_EXIT_STATUS = 1  # Kafka's ProcessTerminatingFaultHandler halts with 1

log = logging.getLogger("kspec.cluster")


def replay(controller: ControllerState, image: MetadataImage, record: dict) -> None:
    """One metadata record into the node's two views; raises when the record contradicts them."""
    kind = record["type"]
    if kind not in IMAGE_ONLY_RECORD_TYPES:
        controller.apply(record)
    if kind in IMAGE_RECORD_TYPES:
        image.apply(record)


def halt_on_replay_failure(offset: int, record: dict) -> None:
    """The last line of defence: a node that cannot replay a committed record stops, loudly,
    instead of serving from a view that lacks it (and the rest of its batch) from now on."""
    log.critical("metadata record at offset %d failed to replay; stopping this node: %s", offset, record,
                 exc_info=True)
    logging.shutdown()  # flush the log before the process is gone
    os._exit(METADATA_REPLAY_FAILED_EXIT_STATUS)  # no shutdown steps: they would act on the diverged view
