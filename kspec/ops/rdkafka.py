"""Two confluent-kafka calls made around librdkafka's known faults, shared by the operator
commands, the mirror and the fault harness (each imports this module; it imports none of them).

- `close_within`: a client's close() waited for at most a bound. After faults librdkafka's
  close has been seen to wait minutes for a group coordinator (confluent-kafka-python issue
  1667); a caller that must end goes on and leaves the close to its own daemon thread.
- `committed_offsets`: a group's committed offsets read by a consumer's OffsetFetch
  (Consumer.committed), never by AdminClient.list_consumer_group_offsets. When that admin
  request is answered NOT_COORDINATOR, as every broker answers while a group's coordinator
  moves, librdkafka's admin client asks a consumer-group handler it does not have to look the
  coordinator up again and the whole process dies with SIGSEGV (librdkafka issue 5040, seen
  in the fault harness's lanes runs and the mirror). The consumer's own coordinator lookup
  retries instead.
"""
from __future__ import annotations

import threading
import time
from typing import Mapping, Protocol

from confluent_kafka import Consumer, TopicPartition

OFFSET_FETCH_CLOSE_TIMEOUT_S = 10.0  # the longest an OffsetFetch consumer's close is waited for


class Closable(Protocol):
    def close(self) -> object: ...


def close_within(clients: Mapping[str, Closable], timeout_s: float) -> None:
    """Close the clients side by side (a thread `close-<name>` each), waiting at most timeout_s
    for all of them together. A client that has not closed by then is left to its daemon thread:
    use this for clients with nothing left to deliver or commit."""
    closing = [threading.Thread(target=client.close, name=f"close-{name}", daemon=True)
               for name, client in clients.items()]
    for thread in closing:
        thread.start()
    deadline_s = time.monotonic() + timeout_s
    for thread in closing:
        thread.join(max(0.0, deadline_s - time.monotonic()))


def committed_offsets(consumer_config: dict, partitions: list[tuple[str, int]], timeout_s: float) -> list[TopicPartition]:
    """The committed offset of each partition (offset < 0 where the group has none) of the group
    named by consumer_config's group.id, by one OffsetFetch from a consumer that never joins the
    group (no subscribe: confluent-kafka needs a group.id, used here only for OffsetFetch). With
    isolation.level read_committed librdkafka asks require_stable (KIP-447). KafkaException when
    not answered within timeout_s."""
    assert "group.id" in consumer_config and "bootstrap.servers" in consumer_config, sorted(consumer_config)
    if not partitions:
        return []
    consumer = Consumer({**consumer_config, "enable.auto.commit": False})
    try:
        return consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=timeout_s)
    finally:
        close_within({"offset-fetch": consumer}, OFFSET_FETCH_CLOSE_TIMEOUT_S)
