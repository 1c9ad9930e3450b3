"""Tombstones for compaction runs (`--topic-config cleanup.policy=compact`, RET-1).

With compaction on, the workload's records carry repeating Kafka keys (faults/workload.py
record_key: the abstract key and value % COMPACTION_KEYS), so the cleaner has older values to
remove. This writer adds the deletes: every TOMBSTONE_INTERVAL_S a tombstone (null value) for a
random key and sub-key, and when the main phase ends one for sub-key 0 of every key, so that
each partition ends with a tombstone the final reads must still see until delete.retention.ms
has passed. Each is op `tombstone` of its own process: extra topic, partition, key, sub-key,
and the offset once acknowledged (ok), or the error (info: it may have been written).
Consumers leave tombstones out of their polls' records and list them in the poll's extra.
"""
from __future__ import annotations

import random
import threading

from faults.recorder import Recorder
from faults.workload import COMPACTION_KEYS, WorkloadOptions, _is_fatal, encode_long, producer_config
from spec.history import topic_partition

TOMBSTONE_INTERVAL_S = 0.5
FLUSH_TIMEOUT_S = 30.0


class Tombstoner:
    def __init__(self, bootstrap: str, options: WorkloadOptions, recorder: Recorder, process: int, seed: int) -> None:
        self.bootstrap, self.options, self.recorder, self.process = bootstrap, options, recorder, process
        self.rng = random.Random(seed)
        self.producer = self._new_producer()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="tombstones", daemon=True)

    def _new_producer(self):
        from confluent_kafka import Producer
        return Producer(producer_config(self.bootstrap, self.options))

    def start(self) -> "Tombstoner":
        self.thread.start()
        return self

    def stop(self) -> None:
        """End the random tombstones, then one for sub-key 0 of every key, each waited for."""
        self.stopping.set()
        self.thread.join()
        for key in self.options.keys:
            self._delete(key, 0)

    def _run(self) -> None:
        while not self.stopping.wait(TOMBSTONE_INTERVAL_S):
            self._delete(self.options.key_base + self.rng.randrange(self.options.key_count), self.rng.randrange(COMPACTION_KEYS))

    def _delete(self, key: int, sub_key: int) -> None:
        from confluent_kafka import KafkaException
        topic, partition = topic_partition(key)
        extra = {"topic": topic, "partition": partition, "key": key, "sub_key": sub_key}
        invocation = self.recorder.invoke(self.process, "tombstone", extra=extra)
        outcome = {}
        try:
            self.producer.produce(topic, key=encode_long(key) + encode_long(sub_key), value=None, partition=partition,
                                  on_delivery=lambda err, msg: outcome.update(error=err, offset=msg.offset()))
            self.producer.flush(FLUSH_TIMEOUT_S)
        except (BufferError, KafkaException, SystemError) as e:  # SystemError: raised in the delivery callback
            outcome = {"error": e.__cause__ or e if isinstance(e, SystemError) else e}
            if _is_fatal(e):  # e.g. OUT_OF_ORDER_SEQUENCE_NUMBER: every later tombstone would fail; a new producer
                self.producer = self._new_producer()
        if outcome and outcome["error"] is None:
            self.recorder.complete(invocation, "ok", extra={**extra, "offset": outcome["offset"]})
        else:
            self.recorder.complete(invocation, "info", extra={**extra, "error": str(outcome.get("error"))})
