"""The leader-epoch observer (REP-2): every node's view of every partition's leader and leader
epoch, asked over and over while the run goes, recorded in the history.

A thread sends Metadata v12 to each node in turn every INTERVAL_S (a fresh connection each
time: a paused or cut-off node only costs its timeout) and records each answer as an op of
f "leader-epochs" (process EPOCH_PROCESS) whose extra holds the node asked and
[[topic, partition, leader, leader_epoch], ...]. The checker reads these with the batches'
partition leader epochs of the replica reads (faults/audit.py): epochs seen by one node never
go back, and no epoch has two leaders.
"""
from __future__ import annotations

import threading

from faults.audit import WIRE_ERRORS, metadata, parse_address
from faults.recorder import Recorder

EPOCH_PROCESS = -2
INTERVAL_S = 0.5


class EpochObserver:
    def __init__(self, bootstrap: str, topics: list[str], recorder: Recorder,
                 properties: dict[str, str] | None = None) -> None:
        self.properties = properties  # the run's client properties (TLS, SASL)
        self.addresses = [parse_address(a) for a in bootstrap.split(",")]
        self.topics = topics
        self.recorder = recorder
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="epoch-observer", daemon=True)
        self.observations = 0

    def start(self) -> "EpochObserver":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()

    def _run(self) -> None:
        while not self.stopping.is_set():
            for index, address in enumerate(self.addresses):
                if self.stopping.is_set():
                    return
                self.observe(index, address)
            self.stopping.wait(INTERVAL_S)

    def observe(self, index: int, address: tuple[str, int]) -> None:
        invocation = self.recorder.invoke(EPOCH_PROCESS, "leader-epochs", extra={"node_index": index})
        try:
            found = metadata(address, self.topics, self.properties)
        except WIRE_ERRORS as e:
            self.recorder.complete(invocation, "fail", extra={"node_index": index, "error": f"{type(e).__name__}: {e}"})
            return
        leaders = [[p.topic, p.partition, p.leader, p.leader_epoch] for p in found.partitions if p.leader >= 0]
        self.recorder.complete(invocation, "ok", extra={"node_index": index, "leaders": leaders})
        self.observations += 1
