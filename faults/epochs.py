"""The leader-epoch observer: every node's view of every partition's leader and leader epoch,
asked over and over while the run goes, recorded in the history.

A thread sends Metadata v12 to each node in turn every INTERVAL_S (a fresh connection each
time: a paused or cut-off node only costs its timeout) and records each answer as an op of
f "leader-epochs" (process EPOCH_PROCESS) whose extra holds the node asked and
[[topic, partition, leader, leader_epoch], ...]. Two checks read them:

- REP-2 (spark_validation/replicas.py), with the batches' partition leader epochs of the replica
  reads (faults/audit.py): epochs seen by one node never go back, and no epoch has two leaders;
- DUR-2 (spark_validation/acks.py): an acks=1 record lost is in the documented window only when
  its partition's leadership changed after the ack.

In a lanes run (faults/lanes.py) one observer serves every lane: one Metadata request per node
for all the lanes' topics, each lane's history getting the answer for its own topics.
"""
from __future__ import annotations

import threading

from faults.audit import WIRE_ERRORS, metadata, parse_address
from faults.recorder import Recorder

EPOCH_PROCESS = -2
INTERVAL_S = 0.5


class EpochObserver:
    def __init__(self, bootstrap: str, topics: list[str], recorder: Recorder,
                 properties: dict[str, str] | None = None, lanes: list[tuple[Recorder, list[str]]] = ()) -> None:
        """lanes: further histories (a lanes run's other lanes), each with its own topics."""
        self.properties = properties  # the run's client properties (TLS, SASL)
        self.addresses = [parse_address(a) for a in bootstrap.split(",")]
        self.sinks = [(recorder, list(topics)), *((r, list(t)) for r, t in lanes)]
        self.topics = sorted({topic for _, topics in self.sinks for topic in topics})
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
        invocations = [recorder.invoke(EPOCH_PROCESS, "leader-epochs", extra={"node_index": index})
                       for recorder, _ in self.sinks]
        try:
            found = metadata(address, self.topics, self.properties)
        except WIRE_ERRORS as e:
            for (recorder, _), invocation in zip(self.sinks, invocations):
                recorder.complete(invocation, "fail", extra={"node_index": index, "error": f"{type(e).__name__}: {e}"})
            return
        # the broker id of the node asked, as its own answer lists it: DUR-2 asks whether a node still
        # named itself leader after another had been elected (a deposed leader acknowledging acks=1 writes)
        node_id = next((n for n, broker in found.brokers.items() if broker == address), None)
        for (recorder, topics), invocation in zip(self.sinks, invocations):
            leaders = [[p.topic, p.partition, p.leader, p.leader_epoch] for p in found.partitions
                       if p.leader >= 0 and p.topic in topics]
            recorder.complete(invocation, "ok", extra={"node_index": index, "node_id": node_id, "leaders": leaders})
        self.observations += 1
