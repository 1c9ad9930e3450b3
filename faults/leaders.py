"""Partition leaders over time, as the cluster's Metadata answers name them: the evidence DUR-2
needs (spark_validation/acks.py), which node had acknowledged an acks=1 record.

A thread asks for the run's topics' metadata every SAMPLE_INTERVAL_S and records one op
`leaders` per answer (its own process id), extra leaders: [topic, partition, node index]
(node index as the nemesis names nodes; -1 when the partition has no leader).
"""
from __future__ import annotations

import threading

from faults.recorder import Recorder

SAMPLE_INTERVAL_S = 0.5
METADATA_TIMEOUT_S = 2.0


class LeaderSampler:
    def __init__(self, target, topics: list[str], recorder: Recorder, process: int) -> None:
        self.target, self.topics, self.recorder, self.process = target, topics, recorder, process
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="leader-sampler", daemon=True)

    def start(self) -> "LeaderSampler":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()

    def _run(self) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": self.target.bootstrap, "socket.timeout.ms": 2000, "log_level": 0,
                             **self.target.client_properties})
        while not self.stopping.wait(SAMPLE_INTERVAL_S):
            invocation = self.recorder.invoke(self.process, "leaders")
            try:
                metadata = admin.list_topics(timeout=METADATA_TIMEOUT_S)
            except KafkaException as e:
                self.recorder.complete(invocation, "fail", extra={"error": str(e)})
                continue
            leaders = []
            for topic in self.topics:
                for partition, p in sorted(getattr(metadata.topics.get(topic), "partitions", {}).items()):
                    leaders.append([topic, partition, self._index(p.leader)])
            self.recorder.complete(invocation, "ok", extra={"leaders": leaders})

    def _index(self, broker_id: int) -> int:
        try:
            return self.target.broker_index(broker_id) if broker_id >= 0 else -1
        except ValueError:
            return -1
