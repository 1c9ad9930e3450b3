"""The queue workload: Jepsen's Kafka workload, driven by confluent-kafka, every op recorded.

As in jepsen.tests.kafka (research/jepsen.md section 1): abstract integer keys map to
topic "t{key // 2}", partition key % 2; values are unique per key (one shared counter
per key), sent as 8-byte big-endian longs. concurrency worker threads invoke ops, paced
so that together they invoke about rate_hz ops per second. A worker owns one consumer
(its polling process) and one idempotent producer, and its sends are pipelined:

- send: 1..sends_per_op_max records to random keys, handed to the producer without
  waiting; the op completes from the records' delivery reports: ok when every record
  was acked (with its offset), fail only when no record can have been written (never
  handed over, or an error librdkafka raises before sending), info otherwise. A send
  waiting on an unreachable leader so holds up no other op, as a faulted partition
  holds up no other partition in the producer. Each send in flight is its own Jepsen
  process (one op at a time per process, as histories require): after ok or fail its
  id serves a later send, after info it is retired, as Jepsen retires a process whose
  op is indeterminate. A producer with a fatal error is replaced.
- poll: one consumer.consume(); ok with the records grouped by key, as Jepsen's poll
  value is (a map of key to records); within a key they stay in offset order.
- assign: with probability assign_p, a new random set of keys; kept keys keep their
  position, new ones start at the earliest offset (the workload never commits).
- crash: with probability crash_p, the polling process drops its consumer and a new
  one (new process id) takes its place (a consumer crash).
- txn (with txn set, in place of send and poll): 1..TXN_MOPS_MAX sends and polls in one
  transaction, the polled offsets sent to it, then commit; see Client.txn. A transaction
  runs one at a time on the worker's transactional producer; after any outcome but ok the
  process ends and a new one (new producer, new consumer) takes its place. With probability
  txn_abort_p (Jepsen's abort-p, 0.1) the client aborts the transaction once its sends were
  acknowledged, as a user testing isolation would: the op fails (an aborted write, which no
  read_committed consumer may read: G1a, TXN-2) and the process goes on with its producer.

Sends get message.timeout.ms = send_timeout_s = 120 s (Kafka's delivery.timeout.ms default),
well above the longest fault plus recovery in a run, so a record is not timed out while it
may be in flight. librdkafka's idempotent producer answers such a timeout by bumping its
producer epoch locally and re-sending the records still queued from sequence 0 under the new
epoch (librdkafka issue 4953); the broker cannot tell those from new records, so a record the
broker had appended before the fault is stored twice (an IDM-1 duplicate the client caused).
With 10 s, a 60 s run under partitions and kills stored hundreds of values twice. The run
stays bounded: faults all end at the time limit, and the final phase waits for the sends
still in flight. Transactions keep their own short txn_timeout_s (see Client).
A send op whose records librdkafka reported timed out (_MSG_TIMED_OUT) lists them in its
completion's extra, "timed_out": [[topic, partition, value], ...]: such a record may be stored
all the same, and if the application sends its value again the broker rightly keeps both (the
checker allows that duplicate under IDM-1: spark_validation/resends.py).

After the main phase, `final_reads` has a fresh process assign every key from the
beginning and poll until it has read up to each partition's high watermark.
"""
from __future__ import annotations

import functools
import itertools
import logging
import random
import struct
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Iterator

from faults import stuck_reads
from faults.recorder import Recorder
from spec.history import Op, Poll, Record, Send, key_of, topic_partition

POLL_RECORDS_MAX = 500
ADMIN_TIMEOUT_S = 30.0
CLIENT_LOG_LEVEL = 4          # librdkafka syslog level: warnings and errors
CLIENT_LOGGER = logging.getLogger("faults.clients")  # run.py sends it to the run's clients.log
FINAL_POLL_TIMEOUT_S = 1.0
LATE_START_S_MAX = 1.0        # a process this far behind its pace skips ahead instead of bursting
TXN_MOPS_MAX = 4              # as Jepsen's :max-txn-length
SENDS_IN_FLIGHT_MAX = 512     # a worker's pipelined sends; at the limit it waits for delivery reports
SERVE_WAIT_S_MAX = 0.1        # the longest a worker waits for delivery reports before looking again
CLOSE_TIMEOUT_S = 10.0        # the longest the run waits for its clients to close
TXN_CALL_GRACE_S = 5.0        # a transactional call still blocked this long past its own timeout is given up
ASSIGNORS = ("roundrobin", "range", "cooperative-sticky", "consumer")  # subscribe mode's (faults/subscribe.py)


def encode_long(n: int) -> bytes:
    return struct.pack(">q", n)


def decode_long(data: bytes | None) -> int | None:
    return None if data is None or len(data) != 8 else struct.unpack(">q", data)[0]


COMPACTION_KEYS = 4  # with compaction, a record's Kafka key is its key and value % COMPACTION_KEYS (RET-1)


def record_key(record: Record, compacted: bool) -> bytes:
    """The Kafka key: the abstract key, and with compaction a sub-key that repeats (faults/compaction.py)."""
    return encode_long(record.key) + (encode_long(record.value % COMPACTION_KEYS) if compacted else b"")


@dataclass(frozen=True)
class WorkloadOptions:
    key_count: int = 8
    key_base: int = 0             # keys range(key_base, key_base + key_count): side-by-side workloads' own topics (faults/lanes.py)
    concurrency: int = 8
    rate_hz: float = 200.0
    sends_per_op_max: int = 2
    acks: str = "all"
    idempotence: bool = True
    isolation_level: str = "read_committed"
    replication_factor: int = 1
    assign_p: float = 1 / 64
    crash_p: float = 0.0
    send_timeout_s: float = 120.0     # message.timeout.ms of sends: above any fault plus recovery (see above)
    txn_timeout_s: float = 10.0       # transaction.timeout.ms and the transactional calls' timeouts
    poll_timeout_s: float = 0.02
    txn: bool = False             # transactions of 1..TXN_MOPS_MAX sends and polls instead of sends and polls
    txn_abort_p: float = 0.1      # a transaction the client aborts after its sends were acked (Jepsen's abort-p)
    sub_via: str = "assign"       # or "subscribe": members of one group (faults/subscribe.py)
    topic_config: dict = field(default_factory=dict)  # --topic-config: the run's topics' configs
    assignor: str = "roundrobin"  # subscribe mode: roundrobin or range (eager), cooperative-sticky, consumer (KIP-848)
    client_properties: dict = field(default_factory=dict)  # security.protocol, sasl.*, ssl.*: every client's (faults/security.py)

    def __post_init__(self) -> None:
        assert self.key_count >= 1 and self.concurrency >= 1 and self.rate_hz > 0
        assert self.key_base >= 0 and self.key_base % 2 == 0, "a key base starts a topic (two keys a topic)"
        assert self.acks in ("0", "1", "all", "-1") and self.isolation_level in ("read_committed", "read_uncommitted")
        assert 0 <= self.assign_p <= 1 and 0 <= self.crash_p <= 1 and 0 <= self.txn_abort_p <= 1
        assert self.send_timeout_s > 0 and self.txn_timeout_s > 0
        assert self.sub_via in ("assign", "subscribe") and self.assignor in ASSIGNORS
        assert not (self.txn and self.sub_via == "subscribe"), "transactions run in assign mode"

    @property
    def compacted(self) -> bool:
        return "compact" in self.topic_config.get("cleanup.policy", "")

    @property
    def keys(self) -> range:
        return range(self.key_base, self.key_base + self.key_count)

    @property
    def topics(self) -> list[str]:
        return sorted({topic_partition(k)[0] for k in self.keys}, key=lambda t: int(t[1:]))


class TxnCallBlocked(Exception):
    """A transactional call of librdkafka's still running TXN_CALL_GRACE_S past its own timeout."""


def _bounded(call, *args, limit_s: float):
    """call(*args) on a thread of its own, given up after limit_s. librdkafka's transactional
    calls can block far past their timeout: send_offsets_to_transaction waits on a group
    coordinator request whose timeout is never checked (librdkafka issues 5456 and 5511, a
    coordinator that restarted or left the metadata), and commit_transaction retries without
    a deadline. A call given up keeps its thread; the caller drops the producer it used."""
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["value"] = call(*args)
        except BaseException as e:  # handed to the caller's thread below
            outcome["error"] = e
    thread = threading.Thread(target=target, name="txn-call", daemon=True)
    thread.start()
    thread.join(limit_s)
    if thread.is_alive():
        raise TxnCallBlocked(f"{getattr(call, '__name__', 'the call')} still blocked {limit_s:.0f} s after it began")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


NOT_HANDED_OVER = "not handed over to the producer"  # the error of a record produce() refused
ABORTED_BY_CLIENT = "aborted by the client after its sends were acknowledged"  # a txn op's error (txn_abort_p)


# librdkafka errors that mean the records never left the client: a definite failure.
@functools.cache
def _definite_error_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError
    return frozenset({KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION, KafkaError._INVALID_ARG,
                      KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.TOPIC_AUTHORIZATION_FAILED})


def producer_config(bootstrap: str, options: WorkloadOptions, extra: dict | None = None) -> dict:
    # without idempotence a retried request can land after a later one: one request in flight
    # keeps the producer within ORD-2's condition (idempotence on, or max in-flight 1)
    in_flight = {} if options.idempotence else {"max.in.flight.requests.per.connection": 1}
    return {"bootstrap.servers": bootstrap, "acks": options.acks, "enable.idempotence": options.idempotence,
            **in_flight,
            "linger.ms": 0, "message.timeout.ms": int(options.send_timeout_s * 1000), "request.timeout.ms": 3000,
            "log_level": CLIENT_LOG_LEVEL, "logger": CLIENT_LOGGER, **options.client_properties, **(extra or {})}


@dataclass
class _SendInFlight:
    invocation: Op
    records: list[Record]
    outcomes: list[tuple | None]  # per record: (error, offset) once its delivery report came


class Sender:
    """A worker's idempotent producer with pipelined sends (see the module docstring).

    Single-threaded: send, serve and close run on the worker's thread, and so do the
    delivery callbacks (librdkafka runs them inside producer.poll and flush)."""

    def __init__(self, bootstrap: str, options: WorkloadOptions, recorder: Recorder,
                 process_ids: Iterator[int]) -> None:
        from confluent_kafka import Producer
        self.recorder = recorder
        self.process_ids = process_ids
        self.producer = Producer(producer_config(bootstrap, options))
        self.compacted = options.compacted
        self.in_flight: dict[int, _SendInFlight] = {}  # process -> its send
        self.idle_processes: list[int] = []
        self.fatal = False  # the producer hit a fatal error: every later send would fail

    def send(self, records: list[Record]) -> None:
        """Invoke one send op and hand its records over; it completes in a later serve or close."""
        from confluent_kafka import KafkaException
        while len(self.in_flight) >= SENDS_IN_FLIGHT_MAX and not self.fatal:  # bounded: records time out
            self.serve(SERVE_WAIT_S_MAX)
        process = self.idle_processes.pop() if self.idle_processes else next(self.process_ids)
        invocation = self.recorder.invoke(process, "send", mops=[Send(r) for r in records])
        self.in_flight[process] = _SendInFlight(invocation, records, [None] * len(records))
        for index, r in enumerate(records):
            try:
                self.producer.produce(r.topic, key=record_key(r, self.compacted), value=encode_long(r.value),
                                      partition=r.partition, on_delivery=self._on_delivery(process, index))
            except (BufferError, KafkaException) as e:  # this record and the rest were never handed over
                self.fatal |= _is_fatal(e)
                for rest in range(index, len(records)):
                    self._delivered(process, rest, NOT_HANDED_OVER, None)
                break

    def serve(self, timeout_s: float = 0.0) -> None:
        """Run delivery callbacks (completing sends), waiting up to timeout_s for one. A fatal
        error librdkafka raises here (e.g. OUT_OF_ORDER_SEQUENCE_NUMBER) marks the producer
        fatal; the worker then replaces it, and close() completes its sends."""
        from confluent_kafka import KafkaException
        try:
            self.producer.poll(timeout_s)
        except (KafkaException, SystemError) as e:
            if not _is_fatal(e):
                raise
            self.fatal = True

    def close(self, timeout_s: float) -> None:
        """Wait up to timeout_s for every send in flight; those still unknown then complete as info."""
        from confluent_kafka import KafkaException
        for step in (lambda: self.producer.flush(timeout_s), self.producer.purge, lambda: self.producer.flush(0)):
            try:
                step()
            except (KafkaException, SystemError) as e:  # a fatal producer raises; its sends complete below
                if not _is_fatal(e):
                    raise
                self.fatal = True
        for process, send in list(self.in_flight.items()):
            for index, outcome in enumerate(send.outcomes):
                if outcome is None:
                    self._delivered(process, index, "no delivery report", None)
        assert not self.in_flight

    def _on_delivery(self, process: int, index: int):
        def callback(err, msg) -> None:
            self.fatal |= err is not None and err.fatal()
            self._delivered(process, index, err, None if err else msg.offset())
        return callback

    def _delivered(self, process: int, index: int, error, offset: int | None) -> None:
        send = self.in_flight[process]
        assert send.outcomes[index] is None, "one delivery report per record"
        send.outcomes[index] = (error, offset)
        if None not in send.outcomes:
            del self.in_flight[process]
            if self._complete(send) != "info":
                self.idle_processes.append(process)

    def _complete(self, send: _SendInFlight) -> str:
        """Record the op's completion; returns its type."""
        acked = [Send(Record(r.topic, r.partition, r.key, r.value, offset if error is None else None))
                 for r, (error, offset) in zip(send.records, send.outcomes)]
        errors = [error for error, _ in send.outcomes if error is not None]
        if not errors:
            self.recorder.complete(send.invocation, "ok", mops=acked)
            return "ok"
        definite = _definite_error_codes()
        all_definite = len(errors) == len(acked) and all(e is NOT_HANDED_OVER or _code(e) in definite for e in errors)
        kind = "fail" if all_definite else "info"
        from confluent_kafka import KafkaError
        timed_out = [[r.topic, r.partition, r.value] for r, (error, _) in zip(send.records, send.outcomes)
                     if error is not None and _code(error) == KafkaError._MSG_TIMED_OUT]
        self.recorder.complete(send.invocation, kind, mops=acked,
                               extra={"error": str(errors[0]), **({"timed_out": timed_out} if timed_out else {})})
        return kind


class Client:
    """One Jepsen polling process: a consumer, and with txn set a transactional producer."""

    def __init__(self, process: int, bootstrap: str, options: WorkloadOptions) -> None:
        from confluent_kafka import Consumer, Producer
        self.process = process
        self.options = options
        # A short transaction timeout, as Jepsen's: a transaction left open by a killed node or a
        # dropped client is aborted soon, so read_committed consumers are not held back long.
        # librdkafka requires message.timeout.ms <= transaction.timeout.ms.
        txn_timeout_ms = int(options.txn_timeout_s * 1000)
        self.producer = Producer(producer_config(bootstrap, options, {
            "transactional.id": f"kspec-faults-{process}", "transaction.timeout.ms": txn_timeout_ms,
            "message.timeout.ms": txn_timeout_ms})) if options.txn else None
        self.transactions_initialised = False
        self.producer_blocked = False  # a transactional call was given up (TxnCallBlocked): never touch it again
        self.leader_epochs: list[list] = []  # of the last poll: see _leader_epochs
        # Per assigned partition, where the next read starts: the offset assign() or a rewind set, or
        # the last record read + 1. Kept here because librdkafka's position() is unset (-1001) until
        # a partition has returned a record, so it cannot tell a kept partition's place.
        self.positions: dict[tuple[str, int], int] = {}
        self.consumer = Consumer(self.consumer_config(bootstrap))

    def consumer_config(self, bootstrap: str) -> dict:
        """The consumer's configuration (faults/subscribe.py's members add their group's)."""
        return {"bootstrap.servers": bootstrap, "group.id": "kspec-faults", "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "isolation.level": self.options.isolation_level,
                "fetch.wait.max.ms": 50, "enable.partition.eof": False, "log_level": CLIENT_LOG_LEVEL,
                "logger": CLIENT_LOGGER, **self.options.client_properties}

    def close(self) -> None:
        """Drop the clients; one in a fatal state (e.g. a fenced transactional producer) raises, and is dropped too."""
        from confluent_kafka import KafkaException
        steps = [self.producer.purge, lambda: self.producer.flush(0)] \
            if self.producer is not None and not self.producer_blocked else []
        for step in (*steps, self.consumer.close):
            try:
                step()
            except KafkaException:
                continue

    def txn(self, recorder: Recorder, plan: list[Record | None], abort: bool = False) -> str:
        """One transaction: each planned Record is sent, each None is a poll; then the polled
        offsets go into the transaction (sendOffsetsToTransaction) and it commits, or with
        abort set, once every send was acknowledged, the client aborts it (abort_transaction).

        ok = committed; fail = aborted (nothing of it is visible to read_committed);
        info = the commit's outcome is unknown; aborted = the client aborted it as asked
        (recorded as fail, its sends with their offsets and ABORTED_BY_CLIENT as its error).
        After any outcome but ok the consumer seeks back to the first offset it polled of
        each partition, as Jepsen's client does."""
        from confluent_kafka import KafkaException, TopicPartition
        invocation = recorder.invoke(self.process, "txn", mops=[Poll() if r is None else Send(r) for r in plan])
        mops: list[Send | Poll] = []
        outcomes: dict[int, tuple] = {}

        def on_delivery(index: int):
            def callback(err, msg) -> None:
                outcomes[index] = (err, None if err else msg.offset())
            return callback

        def completed_mops() -> list[Send | Poll]:
            return [Send(Record(m.record.topic, m.record.partition, m.record.key, m.record.value,
                                outcomes.get(i, (True, None))[1])) if isinstance(m, Send) else m
                    for i, m in enumerate(mops)]

        timeout_s = self.options.txn_timeout_s
        limit_s = timeout_s + TXN_CALL_GRACE_S
        try:
            if not self.transactions_initialised:
                _bounded(self.producer.init_transactions, timeout_s, limit_s=limit_s)
                self.transactions_initialised = True
            self.producer.begin_transaction()
        except TxnCallBlocked as e:  # init_transactions sends nothing of this transaction
            self.producer_blocked = True
            recorder.complete(invocation, "fail", mops=invocation.mops, extra={"error": str(e)})
            return "fail"
        except KafkaException as e:  # nothing was sent
            recorder.complete(invocation, "fail", mops=invocation.mops, extra={"error": str(e)})
            return "fail"
        stage = "txn"
        try:
            for index, r in enumerate(plan):
                if r is None:
                    mops.append(self._consume()[0])
                else:
                    self.producer.produce(r.topic, key=encode_long(r.key), value=encode_long(r.value),
                                          partition=r.partition, on_delivery=on_delivery(len(mops)))
                    mops.append(Send(r))
            self.producer.flush(timeout_s)
            failed = [o[0] for o in outcomes.values() if o[0] is not None]
            if len(outcomes) < sum(isinstance(m, Send) for m in mops) or failed:
                raise KafkaException(failed[0] if failed else "no delivery report")
            if abort:
                stage = "abort"
                _bounded(self.producer.abort_transaction, timeout_s, limit_s=limit_s)
                self._rewind(mops)
                recorder.complete(invocation, "fail", mops=completed_mops(),
                                  extra={"error": ABORTED_BY_CLIENT, "stage": stage})
                return "aborted"
            next_offsets = {}
            for m in mops:
                for r in m.records if isinstance(m, Poll) else ():
                    next_offsets[(r.topic, r.partition)] = max(next_offsets.get((r.topic, r.partition), 0), r.offset + 1)
            if next_offsets:
                stage = "send-offsets"
                _bounded(self.producer.send_offsets_to_transaction,
                         [TopicPartition(t, p, o) for (t, p), o in sorted(next_offsets.items())],
                         self.consumer.consumer_group_metadata(), timeout_s, limit_s=limit_s)
            stage = "commit"
            _bounded(self.producer.commit_transaction, timeout_s, limit_s=limit_s)
        except TxnCallBlocked as e:
            # Whether the transaction commits is unknown (the producer, dropped, may still end it),
            # so the op is info; the process ends and a new one takes its place (see Workload).
            self.producer_blocked = True
            self._rewind(mops)
            recorder.complete(invocation, "info", mops=completed_mops(), extra={"error": str(e), "stage": stage})
            return "info"
        except KafkaException as e:
            kind = self._abort(e, stage)
            self._rewind(mops)
            recorder.complete(invocation, kind, mops=completed_mops(), extra={"error": str(e), "stage": stage})
            return kind
        recorder.complete(invocation, "ok", mops=completed_mops())
        return "ok"

    def _abort(self, error, stage: str) -> str:
        """fail if the transaction is known aborted, info if its outcome is unknown."""
        from confluent_kafka import KafkaException
        kafka_error = error.args[0] if error.args and hasattr(error.args[0], "txn_requires_abort") else None
        if stage == "commit" and not (kafka_error and kafka_error.txn_requires_abort()):
            return "info"  # the commit may have happened
        try:
            _bounded(self.producer.abort_transaction, self.options.txn_timeout_s,
                     limit_s=self.options.txn_timeout_s + TXN_CALL_GRACE_S)
            return "fail"
        except TxnCallBlocked:
            self.producer_blocked = True
            return "info"
        except KafkaException:
            return "info"

    def _rewind(self, mops: list) -> None:
        from confluent_kafka import KafkaException, TopicPartition
        first = {}
        for m in mops:
            for r in m.records if isinstance(m, Poll) else ():
                first.setdefault((r.topic, r.partition), r.offset)
        for (topic, partition), offset in first.items():
            try:
                self.consumer.seek(TopicPartition(topic, partition, offset))
                self.positions[(topic, partition)] = offset
            except KafkaException:  # no longer assigned: nothing to rewind
                pass

    def _consume(self) -> tuple[Poll, list[str]]:
        """One consumer.consume(): its records grouped by key (stable: offset order within a key
        stays), and the errors it reported."""
        messages = self.consumer.consume(num_messages=POLL_RECORDS_MAX, timeout=self.options.poll_timeout_s)
        # tombstones (null values, faults/compaction.py) are no queue values: left out
        records = [Record(m.topic(), m.partition(), decode_long((m.key() or b"")[:8]), decode_long(m.value()),
                          m.offset()) for m in messages if not m.error() and m.value() is not None]
        self.tombstones_read = [[m.topic(), m.partition(), m.offset(), decode_long((m.key() or b"")[8:])]
                                for m in messages if not m.error() and m.value() is None]
        self.leader_epochs = _leader_epochs(messages)
        for r in records:
            self.positions[(r.topic, r.partition)] = r.offset + 1
        records.sort(key=lambda r: key_of(r.topic, r.partition))
        return Poll(tuple(records)), [str(m.error()) for m in messages if m.error()]

    def poll(self, recorder: Recorder) -> str:
        invocation = recorder.invoke(self.process, "poll", mops=(Poll(),))
        try:
            polled, errors = self._consume()
        except Exception as e:  # an indeterminate poll: the history says so
            recorder.complete(invocation, "info", extra={"error": f"{type(e).__name__}: {e}"})
            return "info"
        extra = {**({"error": errors[0]} if errors else {}),
                 **({"leader_epochs": self.leader_epochs} if self.leader_epochs else {}),
                 **({"tombstones": self.tombstones_read} if self.tombstones_read else {})}
        recorder.complete(invocation, "ok", mops=(polled,), extra=extra or None)
        return "ok"

    def assign(self, recorder: Recorder, keys: list[int], from_beginning: bool = False) -> str:
        """Replace the assignment. A partition kept keeps its position (as Java's assign() does);
        a new one starts at the committed offset, i.e. the earliest (nothing is committed)."""
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_STORED, TopicPartition
        assignment = [topic_partition(k) for k in sorted(keys)]
        invocation = recorder.invoke(self.process, "assign", assignment=assignment,
                                     extra={"seek-to-beginning": True} if from_beginning else None)
        default = OFFSET_BEGINNING if from_beginning else OFFSET_STORED
        self.positions = {tp: default if from_beginning else self.positions.get(tp, default) for tp in assignment}
        self.consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in self.positions.items()])
        recorder.complete(invocation, "ok")
        return "ok"


def _leader_epochs(messages) -> list[list]:
    """[topic, partition, offset, leader epoch] where a partition's batch leader epoch starts or
    changes among a poll's messages (the epoch of the leader that appended them; REP-2)."""
    found, last = [], {}
    for m in messages:
        epoch = None if m.error() else m.leader_epoch()
        if epoch is not None and last.get((m.topic(), m.partition())) != epoch:
            last[(m.topic(), m.partition())] = epoch
            found.append([m.topic(), m.partition(), m.offset(), epoch])
    return found


def close_all(clients: list[Client], timeout_s: float = CLOSE_TIMEOUT_S) -> None:
    """Close clients side by side, waiting at most timeout_s: after faults, librdkafka's close
    sometimes never returns (confluent-kafka-python issue 1667), and a run must still end.
    A client that has not closed by then is left to its daemon thread (close-<process>)."""
    from kspec.ops.rdkafka import close_within
    close_within({str(client.process): client for client in clients}, timeout_s)


def committed_offsets(bootstrap: str, group: str, partitions: list[tuple[str, int]], properties: dict,
                      timeout_s: float, require_stable: bool = False) -> dict[tuple[str, int], int]:
    """The group's committed offsets of these partitions (those it has one for), by OffsetFetch
    from a consumer that does not join the group (require_stable as KIP-447's, which librdkafka
    sends for read_committed; kspec/ops/rdkafka.py says why not the admin client's).
    KafkaException when not answered in time."""
    from kspec.ops.rdkafka import committed_offsets as offset_fetch
    config = {"bootstrap.servers": bootstrap, "group.id": group,
              "isolation.level": "read_committed" if require_stable else "read_uncommitted",
              "log_level": CLIENT_LOG_LEVEL, "logger": CLIENT_LOGGER, **properties}
    return {(tp.topic, tp.partition): tp.offset for tp in offset_fetch(config, partitions, timeout_s)
            if tp.error is None and tp.offset >= 0}


def _is_fatal(error) -> bool:
    """A fatal KafkaException, also one raised while a delivery callback ran: confluent-kafka
    then surfaces it as a SystemError caused by it."""
    if isinstance(error, SystemError):
        error = error.__cause__
    kafka_error = error.args[0] if isinstance(error, Exception) and error.args else None
    return bool(getattr(kafka_error, "fatal", lambda: False)())


def _code(error) -> int | None:
    """The KafkaError code of a delivery error or of a KafkaException raised by produce()."""
    if error is not None and not hasattr(error, "code") and getattr(error, "args", None):
        error = error.args[0]
    code = getattr(error, "code", None)
    return code() if callable(code) else None


class Workload:
    """concurrency processes invoking ops until stop(); see the module docstring."""

    def __init__(self, bootstrap: str, recorder: Recorder, options: WorkloadOptions, seed: int = 0) -> None:
        self.bootstrap = bootstrap
        self.recorder = recorder
        self.options = options
        self.seed = seed
        self.values = {k: itertools.count(1) for k in options.keys}
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.next_process = itertools.count(options.concurrency)  # ids for replacement processes
        self.failures: list[str] = []  # exceptions that ended a worker thread
        self.stopped_clients: list[Client] = []  # closed by close()
        self.stopped_senders: list[Sender] = []  # drained; their producers are destroyed in close()

    def create_topics(self) -> None:
        """Two partitions per topic, created through the admin API; retried until the cluster answers."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "logger": CLIENT_LOGGER, **self.options.client_properties})
        pending = set(self.options.topics)
        deadline = time.monotonic() + ADMIN_TIMEOUT_S
        while pending:
            futures = admin.create_topics([NewTopic(t, 2, self.options.replication_factor,
                                                    config=dict(self.options.topic_config)) for t in sorted(pending)],
                                          operation_timeout=10)
            for topic, future in futures.items():
                try:
                    future.result()
                    pending.discard(topic)
                except KafkaException as e:
                    if e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                        pending.discard(topic)
                    elif time.monotonic() > deadline:
                        raise
            if pending:
                time.sleep(0.5)

    def start(self) -> None:
        for worker in range(self.options.concurrency):
            thread = threading.Thread(target=self._run_worker, args=(worker,), name=f"workload-{worker}",
                                      daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop_invoking(self) -> None:
        """No new ops from now on; the sends in flight go on until stop()."""
        self.stopping.set()

    def stop(self) -> None:
        """Stop invoking ops; every worker waits up to send_timeout_s + 1 for its sends in flight.
        The clients stay open until close()."""
        self.stop_invoking()
        for thread in self.threads:
            thread.join()

    def close(self) -> None:
        """Close the workers' clients. Call it after the final heal: a consumer closing while a node
        is paused or cut off waits for its requests to that node to time out (socket.timeout.ms)."""
        assert all(not thread.is_alive() for thread in self.threads), "stop() first"
        close_all(self.stopped_clients)
        self.stopped_clients.clear()
        self.stopped_senders.clear()

    def _run_worker(self, worker: int) -> None:
        options = self.options
        rng = random.Random(self.seed * 1_000_003 + worker)
        interval_s = options.concurrency / options.rate_hz
        client = Client(worker, self.bootstrap, options)
        sender = None if options.txn else Sender(self.bootstrap, options, self.recorder, self.next_process)
        try:
            client.assign(self.recorder, self._random_keys(rng))
            next_s = time.monotonic() + rng.uniform(0, interval_s)
            while not self.stopping.is_set():
                delay_s = next_s - time.monotonic()
                if delay_s > 0:
                    self._wait(sender, delay_s)
                elif delay_s < -LATE_START_S_MAX:
                    next_s = time.monotonic()
                next_s += interval_s
                roll = rng.random()
                if roll < options.crash_p:
                    client = self._crash(client)
                    client.assign(self.recorder, self._random_keys(rng))
                elif roll < options.crash_p + options.assign_p:
                    client.assign(self.recorder, self._random_keys(rng))
                elif options.txn:
                    plan = [self._next_record(rng) if rng.random() < 0.5 else None
                            for _ in range(rng.randint(1, TXN_MOPS_MAX))]
                    abort = rng.random() < options.txn_abort_p
                    if client.txn(self.recorder, plan, abort) not in ("ok", "aborted"):
                        client = self._replace(client)
                        client.assign(self.recorder, self._random_keys(rng))
                elif rng.random() < 0.5:
                    if sender.fatal:
                        sender.close(0)
                        sender = Sender(self.bootstrap, options, self.recorder, self.next_process)
                    sender.send([self._next_record(rng) for _ in range(rng.randint(1, options.sends_per_op_max))])
                else:
                    client.poll(self.recorder)
                if sender is not None:
                    sender.serve()
        except Exception as e:  # recorded for the run's results; the other workers go on
            where = traceback.extract_tb(e.__traceback__)[-1]
            self.failures.append(f"worker {worker}: {type(e).__name__}: {e} at {where.filename}:{where.lineno}")
        finally:
            if sender is not None:
                sender.close(options.send_timeout_s + 1)
                self.stopped_senders.append(sender)
            self.stopped_clients.append(client)

    def _wait(self, sender: Sender | None, delay_s: float) -> None:
        """Wait out a worker's pace, running delivery callbacks meanwhile."""
        if sender is None:
            self.stopping.wait(delay_s)
            return
        deadline_s = time.monotonic() + delay_s
        while (left_s := deadline_s - time.monotonic()) > 0 and not self.stopping.is_set():
            sender.serve(min(left_s, SERVE_WAIT_S_MAX))

    def _next_record(self, rng: random.Random) -> Record:
        key = self.options.key_base + rng.randrange(self.options.key_count)
        return Record(*topic_partition(key), key, next(self.values[key]))

    def _random_keys(self, rng: random.Random) -> list[int]:
        count = rng.randint(1, self.options.key_count)
        return rng.sample(self.options.keys, count)

    def _replace(self, client: Client) -> Client:
        client.close()
        return Client(next(self.next_process), self.bootstrap, self.options)

    def _crash(self, client: Client) -> Client:
        invocation = self.recorder.invoke(client.process, "crash")
        self.recorder.complete(invocation, "info")
        return self._replace(client)

    def final_reads(self, timeout_s: float) -> bool:
        """A fresh process reads every partition from the beginning up to its high watermark.

        The high watermarks are asked for read_uncommitted: a read_committed consumer is told the
        last stable offset instead, which stays below a transaction its killed producer left open
        until the coordinator aborts it (transaction.timeout.ms), and the records committed after
        that would go unread. Returns whether the reads got there within timeout_s; when they did not,
        faults/stuck_reads.py records where they stuck and on what."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition
        client = Client(next(self.next_process), self.bootstrap, self.options)
        watermarks = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "kspec-faults-watermarks",
                               "isolation.level": "read_uncommitted", "log_level": CLIENT_LOG_LEVEL,
                               "logger": CLIENT_LOGGER, **self.options.client_properties})
        keys = list(self.options.keys)
        deadline = time.monotonic() + timeout_s
        try:
            high_watermarks = {}
            for key in keys:
                topic, partition = topic_partition(key)
                while (topic, partition) not in high_watermarks:
                    try:
                        _, high = watermarks.get_watermark_offsets(TopicPartition(topic, partition),
                                                                   timeout=FINAL_POLL_TIMEOUT_S)
                        high_watermarks[(topic, partition)] = high
                    except KafkaException:
                        if time.monotonic() > deadline:
                            return False
            client.assign(self.recorder, keys, from_beginning=True)
            to_read = [TopicPartition(t, p) for (t, p), high in sorted(high_watermarks.items()) if high > 0]
            while time.monotonic() < deadline:
                client.poll(self.recorder)
                positions = client.consumer.position(to_read)
                if all(tp.offset >= high_watermarks[(tp.topic, tp.partition)] for tp in positions):
                    return True
            # where the reads stuck, and on what (an open transaction holding the last stable offset)
            highs = [(tp, high_watermarks[(tp.topic, tp.partition)]) for tp in client.consumer.position(to_read)]
            stuck = [(tp.topic, tp.partition, tp.offset, high) for tp, high in highs if tp.offset < high]
            if stuck and self.options.isolation_level == "read_committed":
                stuck_reads.record(self.bootstrap, self.recorder, client.process, stuck, self.options.client_properties,
                                   {"log_level": CLIENT_LOG_LEVEL, "logger": CLIENT_LOGGER}, decode_long)
            return False
        finally:
            from kspec.ops.rdkafka import close_within
            close_within({"watermarks": watermarks, str(client.process): client}, CLOSE_TIMEOUT_S)


def checker_options(workload: WorkloadOptions) -> dict:
    """run.json: what `kspec check` needs to know of a workload (spark_validation/options.py)."""
    return {"sub_via": [workload.sub_via], "ww_deps": True, "acks": workload.acks,
            **({"topic_config": workload.topic_config} if workload.topic_config else {})}
