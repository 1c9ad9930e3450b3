"""Subscribe mode (`--sub-via subscribe`, as Jepsen calls it): consumers in one group, every
rebalance and every offset commit recorded with the generation or member epoch it carried.

Each worker's polling process is a member of the group GROUP_ID, subscribed to every topic
of the run, with one of three assignors:

- `roundrobin` or `range` (eager, classic protocol): every rebalance revokes everything, then
  assigns anew (range assigns per topic, so with two partitions a topic only two members get any);
- `cooperative-sticky` (classic protocol, KIP-429): only the partitions that move are revoked;
- `consumer` (KIP-848, group.protocol=consumer): the broker assigns; member epochs instead of
  one generation for the group.

What a member records, besides its sends and polls (ops of f):

- `subscribe`: the topics (one assignment row per topic, partition null);
- `rebalance`: one per rebalance callback (librdkafka runs them inside consume(), so they are
  recorded right after the poll that ran them, with the time the callback ran in extra):
  extra event (assign, revoke or lost), the partitions of the event, the generation (classic)
  or member epoch (KIP-848) read from consumer_group_metadata() inside the callback, the
  member id; the assignment rows are the partitions the member owns after the event;
- `commit`: a synchronous commit of the member's positions; extra offsets, generation, member.
  ok = the broker acknowledged every offset; info = an error (see Member.commit: librdkafka
  retries a commit, so an error does not say that nothing was written); fail = refused by the
  client before sending.

After the final reads a fresh process reads the group's committed offsets back with OffsetFetch
(OffsetFetch, faults/workload.py committed_offsets): op `offset-fetch`, extra offsets. The checker
(spark_validation/groups.py) compares them with the acknowledged commits (GRP-2), checks the
commits never go backwards (GRP-3) and that no partition had two owners in one generation (GRP-1).
"""
from __future__ import annotations

import random
import struct
import threading
import time

from faults.recorder import Recorder
from faults.workload import ADMIN_TIMEOUT_S, CLIENT_LOGGER, Client, Sender, Workload, WorkloadOptions, committed_offsets
from spec.history import topic_partition

GROUP_ID = "kspec-faults-subscribe"
COMMIT_P = 0.1                 # of a member's ops: a commit of its positions
COMMIT_TIMEOUT_S = 10.0        # a commit not answered by then is left behind (Member._commit_within)
SESSION_TIMEOUT_MS = 6000      # classic protocol: Kafka's group.min.session.timeout.ms
HEARTBEAT_INTERVAL_MS = 1000
GROUP_FORMED_TIMEOUT_S = 20.0  # the longest start() waits for every member's first partitions
OFFSETS_TOPIC = "__consumer_offsets"
MAX_POLL_INTERVAL_MS = 10_000  # the rebalance timeout: how long a classic rebalance waits for a member
CGMD_MAGIC = b"CGMDv2:"        # librdkafka's serialized consumer group metadata


def group_metadata(consumer) -> tuple[int, str]:
    """(generation id or member epoch, member id) from consumer_group_metadata(): librdkafka
    serializes it as CGMDv2:, the int32 generation in host order, then group id and member id
    as NUL-terminated strings."""
    data = bytes(consumer.consumer_group_metadata())
    assert data.startswith(CGMD_MAGIC), data[:16]
    (generation,) = struct.unpack("=i", data[len(CGMD_MAGIC):len(CGMD_MAGIC) + 4])
    rest = data[len(CGMD_MAGIC) + 4:].split(b"\0")
    return generation, rest[1].decode() if len(rest) > 1 else ""


class Member(Client):
    """A polling process that is a member of the group (see the module docstring)."""

    def __init__(self, process: int, bootstrap: str, options: WorkloadOptions,
                 assigned: threading.Event | None = None) -> None:
        super().__init__(process, bootstrap, options)
        self.owned: set[tuple[str, int]] = set()
        self.events: list[dict] = []   # rebalance callbacks not yet recorded
        self.assigned = assigned       # set at its first assignment (empty or not)
        self.stuck = False             # a commit did not return: the worker replaces this member
        self.closing = False           # close() runs: its revocation callback records nothing

    def consumer_config(self, bootstrap: str) -> dict:
        config = {**super().consumer_config(bootstrap), "group.id": GROUP_ID}
        if self.options.assignor == "consumer":
            return {**config, "group.protocol": "consumer"}
        return {**config, "partition.assignment.strategy": self.options.assignor,
                "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
                "max.poll.interval.ms": MAX_POLL_INTERVAL_MS}

    def subscribe(self, recorder: Recorder) -> None:
        topics = self.options.topics
        self.recorder = recorder
        invocation = recorder.invoke(self.process, "subscribe", assignment=[(t, None) for t in topics])
        self.consumer.subscribe(topics, on_assign=self._on("assign"), on_revoke=self._on("revoke"),
                                on_lost=self._on("lost"))
        recorder.complete(invocation, "ok")

    def _on(self, event: str):
        def callback(consumer, partitions) -> None:
            # confluent-kafka (un)assigns, incrementally for cooperative protocols, when the callback does not
            moved = {(p.topic, p.partition) for p in partitions}
            if event == "assign":
                self.owned |= moved
                if self.assigned is not None:
                    self.assigned.set()
            else:
                self.owned -= moved
            for tp in moved - self.owned:
                self.positions.pop(tp, None)
            if self.closing:
                # consumer.close() runs this callback while librdkafka's group handler is terminating:
                # consumer_group_metadata() then waits for an answer that never comes, holding the
                # GIL, and the whole run hangs (seen in a lanes run). The run's ops are over by then.
                return
            try:
                generation, member = group_metadata(consumer)
            except RuntimeError:  # the consumer was closed (a stuck member's commit thread): no metadata left
                generation, member = -1, ""
            self.events.append({"event": event, "partitions": sorted(map(list, moved)), "generation": generation,
                                "member": member, "callback_time_ns": self.recorder.now_ns()})
        return callback

    def close(self) -> None:
        self.closing = True
        super().close()

    def poll(self, recorder: Recorder) -> str:
        kind = super().poll(recorder)
        self.record_rebalances(recorder)
        return kind

    def record_rebalances(self, recorder: Recorder) -> None:
        """Record the callbacks the last consume() ran, one op each, owned partitions as the assignment."""
        owned = set(self.owned)
        for event in reversed(self.events):  # owned after each event, from the last back to the first
            event["owned"] = sorted(owned)
            moved = {tuple(tp) for tp in event["partitions"]}
            owned = owned - moved if event["event"] == "assign" else owned | moved
        for event in self.events:
            invocation = recorder.invoke(self.process, "rebalance", extra=None)
            recorder.complete(invocation, "ok", assignment=[tuple(tp) for tp in event.pop("owned")], extra=event)
        self.events.clear()

    def commit(self, recorder: Recorder) -> str:
        """Commit the positions of the owned partitions that have one, synchronously."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition
        offsets = sorted((t, p, o) for (t, p), o in self.positions.items() if (t, p) in self.owned and o >= 0)
        if not offsets:
            return "skipped"
        generation, member = group_metadata(self.consumer)
        extra = {"offsets": [list(o) for o in offsets], "generation": generation, "member": member}
        invocation = recorder.invoke(self.process, "commit", extra=extra)
        try:
            answer = self._commit_within([TopicPartition(t, p, o) for t, p, o in offsets], COMMIT_TIMEOUT_S)
            errors = [str(tp.error) for tp in answer or () if tp.error is not None]
            kind, error = ("ok", None) if not errors else ("info", errors[0])
        except TimeoutError:  # the member is left behind (see _commit_within): the commit may still land
            kind, error = "info", f"no answer within {COMMIT_TIMEOUT_S:g} s"
        except KafkaException as e:
            # librdkafka retries an OffsetCommit whose answer it lost; the error is the last
            # attempt's, so an earlier one may have been written: unknown (a run saw a commit
            # fail with UNKNOWN_MEMBER_ID after 10 s whose offsets OffsetFetch returned later).
            # Only an error raised before anything was sent is definite.
            code = e.args[0].code() if e.args and hasattr(e.args[0], "code") else None
            kind, error = ("fail" if code in (KafkaError._NO_OFFSET, KafkaError._STATE) else "info"), str(e)
        recorder.complete(invocation, kind, extra={**extra, **({"error": error} if error else {})})
        if not self.stuck:
            self.record_rebalances(recorder)  # a synchronous commit also serves callbacks
        return kind

    def _commit_within(self, offsets, timeout_s: float):
        """consumer.commit(asynchronous=False) has no timeout, and under faults librdkafka's has been
        seen to wait for minutes: it runs on a thread of its own, and after timeout_s the member is
        marked stuck (its worker replaces it; the consumer is closed with the run's other clients)."""
        outcome: dict = {}

        def commit() -> None:
            try:
                outcome["answer"] = self.consumer.commit(offsets=offsets, asynchronous=False)
            except Exception as e:  # handed to the caller's thread
                outcome["error"] = e
        thread = threading.Thread(target=commit, name=f"commit-{self.process}", daemon=True)
        thread.start()
        thread.join(timeout_s)
        if thread.is_alive():
            self.stuck = True
            raise TimeoutError
        if "error" in outcome:
            raise outcome["error"]
        return outcome["answer"]


class SubscribeWorkload(Workload):
    """The queue workload with members of one group in place of assigning consumers.

    start() returns once every member has had its first assignment and every partition of
    __consumer_offsets (made by the members' first FindCoordinator) has its whole replica set in
    sync, each wait at most GROUP_FORMED_TIMEOUT_S: the faults then strike a group that has formed,
    so a short run checks rebalances and commits under faults rather than a first join, or a
    follower's first catch-up under min.insync.replicas, that faults keep from completing."""

    def start(self) -> None:
        self.assigned = [threading.Event() for _ in range(self.options.concurrency)]
        super().start()
        deadline_s = time.monotonic() + GROUP_FORMED_TIMEOUT_S
        for assigned in self.assigned:
            assigned.wait(max(0.0, deadline_s - time.monotonic()))
        self._wait_offsets_topic_in_sync(time.monotonic() + GROUP_FORMED_TIMEOUT_S)

    def _wait_offsets_topic_in_sync(self, deadline_s: float) -> None:
        from confluent_kafka import KafkaException, TopicCollection
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "logger": CLIENT_LOGGER, **self.options.client_properties})
        while time.monotonic() < deadline_s:
            try:
                described = admin.describe_topics(TopicCollection([OFFSETS_TOPIC]), request_timeout=5)
                partitions = described[OFFSETS_TOPIC].result(timeout=10).partitions
                if partitions and all(len(p.isr) == len(p.replicas) for p in partitions):
                    return
            except (KafkaException, TimeoutError):
                pass  # not created yet, or no answer in time: ask again
            time.sleep(0.5)

    def _run_worker(self, worker: int) -> None:
        options = self.options
        rng = random.Random(self.seed * 1_000_003 + worker)
        interval_s = options.concurrency / options.rate_hz
        member = Member(worker, self.bootstrap, options, self.assigned[worker])
        sender = Sender(self.bootstrap, options, self.recorder, self.next_process)
        try:
            member.subscribe(self.recorder)
            next_s = time.monotonic() + rng.uniform(0, interval_s)
            while not self.stopping.is_set():
                delay_s = next_s - time.monotonic()
                if delay_s > 0:
                    self._wait(sender, delay_s)
                next_s = max(next_s + interval_s, time.monotonic() - interval_s)
                roll = rng.random()
                if roll < options.crash_p:
                    member = self._crash(member)
                    member.subscribe(self.recorder)
                elif roll < options.crash_p + COMMIT_P:
                    member.commit(self.recorder)
                    if member.stuck:  # its consumer is busy in the commit: a new member takes its place
                        self.stopped_clients.append(member)
                        member = Member(next(self.next_process), self.bootstrap, options)
                        member.subscribe(self.recorder)
                elif rng.random() < 0.5:
                    if sender.fatal:
                        sender.close(0)
                        sender = Sender(self.bootstrap, options, self.recorder, self.next_process)
                    sender.send([self._next_record(rng) for _ in range(rng.randint(1, options.sends_per_op_max))])
                else:
                    member.poll(self.recorder)
                sender.serve()
        except Exception as e:  # recorded for the run's results; the other workers go on
            import traceback
            where = traceback.extract_tb(e.__traceback__)[-1]
            self.failures.append(f"worker {worker}: {type(e).__name__}: {e} at {where.filename}:{where.lineno}")
        finally:
            sender.close(options.send_timeout_s + 1)
            self.stopped_senders.append(sender)
            self.stopped_clients.append(member)

    def _replace(self, client: Client) -> Client:
        client.close()
        return Member(next(self.next_process), self.bootstrap, self.options)

    def final_reads(self, timeout_s: float) -> bool:
        fetcher = next(self.next_process)  # before the final reader's: run.py takes the last process as that
        complete = super().final_reads(timeout_s)
        self.fetch_committed_offsets(fetcher)
        return complete

    def fetch_committed_offsets(self, process: int) -> None:
        """OffsetFetch of the group's committed offsets of the run's partitions, by a fresh
        process, retried until answered (faults/workload.py committed_offsets)."""
        from confluent_kafka import KafkaException
        invocation = self.recorder.invoke(process, "offset-fetch", extra={"group": GROUP_ID})
        partitions = sorted({topic_partition(key) for key in self.options.keys})
        deadline_s = time.monotonic() + ADMIN_TIMEOUT_S
        while True:
            try:
                committed = committed_offsets(self.bootstrap, GROUP_ID, partitions, self.options.client_properties,
                                              timeout_s=10)
                offsets = sorted([t, p, o] for (t, p), o in committed.items())
                self.recorder.complete(invocation, "ok", extra={"group": GROUP_ID, "offsets": offsets})
                return
            except KafkaException as e:
                if time.monotonic() > deadline_s:
                    self.recorder.complete(invocation, "fail", extra={"group": GROUP_ID, "error": str(e)})
                    return
                time.sleep(0.5)
