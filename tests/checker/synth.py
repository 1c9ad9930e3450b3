"""A deterministic synthetic history generator: a clean workload and injected anomalies.

The builder plays a correct broker (one list per partition, offset = position) and
records Jepsen-shaped ops. Each scenario injects one anomaly into its own topics with
its own processes, and says exactly which anomaly rows the checker must report.
"""
from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from itertools import count

from spec.history import Op, Poll, Record, Send

TICK_NS = 1_000
FINAL_POLLER = 99


@dataclass
class Pending:
    index: int
    process: int
    f: str
    invoke_ns: int


@dataclass(frozen=True)
class Expected:
    """An anomaly row the checker must report: its name, topic (None for cycles), whether it
    violates a guarantee, and the ops, values and offsets that prove it (None: not compared)."""
    anomaly: str
    topic: str | None
    violation: bool = True
    ops: tuple[int, ...] | None = None
    values: tuple[int, ...] | None = None
    offsets: tuple[int, ...] | None = None


class Builder:
    def __init__(self):
        self.ops: list[Op] = []
        self.logs: dict[tuple[str, int], list[int]] = defaultdict(list)
        self.values = count(1)
        self.now_ns = 0
        self.expected: list[Expected] = []
        self.final_reads: dict[tuple[str, int], list[tuple[int, int]]] = {}
        self.unpolled: set[tuple[str, int]] = set()

    def _tick(self) -> int:
        self.now_ns += TICK_NS
        return self.now_ns

    # -- records ---------------------------------------------------------------------------------
    def append(self, topic: str, value: int | None = None, offset: int | None = None) -> Send:
        """Append a value to the partition's log; the send is acked with its offset (or a given one)."""
        value = next(self.values) if value is None else value
        log = self.logs[(topic, 0)]
        log.append(value)
        return Send(Record(topic, 0, None, value, len(log) - 1 if offset is None else offset))

    def sent(self, topic: str, value: int | None = None, offset: int | None = None) -> Send:
        """A send the log does not hold (failed, lost or acked at a wrong offset)."""
        return Send(Record(topic, 0, None, next(self.values) if value is None else value, offset))

    def read(self, topic: str, start: int = 0, end: int | None = None) -> Poll:
        log = self.logs[(topic, 0)]
        end = len(log) if end is None else end
        return Poll(tuple(Record(topic, 0, None, log[o], o) for o in range(start, end)))

    @staticmethod
    def records(topic: str, pairs: list[tuple[int, int]]) -> Poll:
        return Poll(tuple(Record(topic, 0, None, v, o) for o, v in pairs))

    # -- ops -------------------------------------------------------------------------------------
    def begin(self, process: int, f: str, mops=()) -> Pending:
        index = len(self.ops)
        t = self._tick()
        invoked = tuple(Send(Record(m.record.topic, 0, None, m.record.value)) if isinstance(m, Send) else Poll()
                        for m in mops)
        self.ops.append(Op(index, process, "invoke", f, t, t, invoked))
        return Pending(index, process, f, t)

    def end(self, pending: Pending, type_: str, mops=(), assignment=()) -> int:
        index = len(self.ops)
        self.ops.append(Op(index, pending.process, type_, pending.f, self._tick(), pending.invoke_ns, tuple(mops),
                           tuple(assignment)))
        return index

    def op(self, process: int, f: str, mops, type_: str = "ok") -> int:
        """A whole op, invoked and completed before the next record; returns its completion index."""
        return self.end(self.begin(process, f, mops), type_, mops)

    def assign(self, process: int, topics) -> int:
        pending = self.begin(process, "assign")
        return self.end(pending, "ok", assignment=[(t, 0) for t in topics])

    def final_polls(self) -> None:
        """The final reader: assigns every partition from the beginning and reads every log."""
        partitions = sorted(tp for tp in self.logs if tp not in self.unpolled)
        self.assign(FINAL_POLLER, [t for t, _ in partitions])
        for tp in partitions:
            pairs = self.final_reads.get(tp, list(enumerate(self.logs[tp])))
            self.op(FINAL_POLLER, "poll", [self.records(tp[0], pairs)])


def clean_workload(b: Builder, seed: int = 7, ops: int = 200, processes: int = 4, partitions: int = 3) -> None:
    """Sequential sends, polls and transactions by a few processes; every value is read."""
    rng = random.Random(seed)
    topics = [f"clean-{i}" for i in range(partitions)]
    position = {(p, t): 0 for p in range(processes) for t in topics}
    for p in range(processes):
        b.assign(p, topics)
    for _ in range(ops):
        p, t = rng.randrange(processes), rng.choice(topics)
        choice = rng.random()
        if choice < 0.4:
            b.op(p, "send", [b.append(t) for _ in range(rng.randint(1, 3))])
        elif choice < 0.7:
            poll = b.read(t, position[(p, t)])
            position[(p, t)] = len(b.logs[(t, 0)])
            b.op(p, "poll", [poll])
        else:
            other = rng.choice(topics)
            poll = b.read(other, position[(p, other)])  # before the send: never its own uncommitted record
            position[(p, other)] = len(b.logs[(other, 0)])
            b.op(p, "txn", [poll, b.append(t)])


def scenarios(b: Builder) -> None:
    """Every injected anomaly, each in its own topics; records b.expected."""
    E = b.expected.append

    # inconsistent-offsets: two acked sends both at offset 0; two readers see different values there
    v1, v2 = b.append("inconsistent"), b.sent("inconsistent", offset=0)
    b.op(100, "send", [v1])
    b.op(102, "send", [v2])
    b.op(101, "poll", [b.records("inconsistent", [(0, v1.record.value)])])
    b.final_reads[("inconsistent", 0)] = [(0, v2.record.value)]
    E(Expected("inconsistent-offsets", "inconsistent", values=(v1.record.value, v2.record.value), offsets=(0,)))
    E(Expected("nonlinearizable", "inconsistent"))

    # duplicate: one acked value stored at offsets 0 and 1
    d = b.append("duplicate")
    b.logs[("duplicate", 0)].append(d.record.value)
    b.op(103, "send", [d])
    E(Expected("duplicate", "duplicate", values=(d.record.value,), offsets=(0, 1)))
    E(Expected("int-nonmonotonic-poll", "duplicate", values=(d.record.value, d.record.value)))
    E(Expected("nonlinearizable", "duplicate"))

    # G1a: an aborted transaction's record is read by an ok poll (and the final poller)
    a = b.append("aborted", offset=None)
    aborted = Send(Record("aborted", 0, None, a.record.value, None))
    w = b.op(104, "txn", [aborted], "fail")
    r = b.op(105, "poll", [b.read("aborted")])
    E(Expected("G1a", "aborted", ops=(w, r), values=(a.record.value,), offsets=(0,)))
    E(Expected("G1a", "aborted"))  # the final poller reads it too

    # precommitted-read: a transaction reads its own send before committing
    own = b.append("precommitted")
    t = b.op(106, "txn", [own, b.read("precommitted")])
    E(Expected("precommitted-read", "precommitted", ops=(t,), values=(own.record.value,), offsets=(0,)))

    # G1b: a read spans a committed transaction's two records but sees only the first
    x1, x2 = b.append("intermediate"), b.append("intermediate")
    w = b.op(107, "txn", [x1, x2])
    x3 = b.append("intermediate")
    b.op(108, "send", [x3])
    r = b.op(109, "poll", [b.records("intermediate", [(0, x1.record.value), (2, x3.record.value)])])
    E(Expected("G1b", "intermediate", ops=(w, r), values=(x2.record.value,), offsets=(1,)))
    E(Expected("int-poll-skip", "intermediate", ops=(r,), values=(x1.record.value, x3.record.value)))

    # lost-write: an acked record vanishes below a record that is read
    lost, kept = b.append("lost"), b.append("lost")
    w = b.op(110, "send", [lost])
    b.op(111, "send", [kept])
    b.final_reads[("lost", 0)] = [(1, kept.record.value)]
    E(Expected("lost-write", "lost", ops=(w,), values=(lost.record.value,), offsets=(0,)))
    E(Expected("unseen", "lost", ops=(w,), values=(lost.record.value,)))

    # a lost record is not stored out of order: process 142's acked value vanishes from offset 1,
    # where another producer's record is read, and its next two sends land at offsets 0 and 2;
    # the lost value's ack offset between them is no send-skip (ORD-2) of theirs
    gone = b.sent("lostown", offset=1)
    first, other, then = b.append("lostown"), b.append("lostown"), b.append("lostown")
    w = b.op(142, "send", [gone])
    o1 = b.op(142, "send", [first])
    b.op(143, "send", [other])
    b.op(142, "send", [then])
    E(Expected("lost-write", "lostown", ops=(w,), values=(gone.record.value,), offsets=(1,)))
    E(Expected("unseen", "lostown", ops=(w,), values=(gone.record.value,)))
    E(Expected("inconsistent-offsets", "lostown", offsets=(1,)))
    E(Expected("nonmonotonic-send", "lostown", ops=(w, o1), values=(gone.record.value, first.record.value)))
    E(Expected("realtime-order", "lostown", ops=(w, o1), offsets=(1, 0)))
    E(Expected("nonlinearizable", "lostown"))
    E(Expected("G0-realtime", None, violation=False, ops=(w, o1)))

    # unseen: an acked record nobody ever reads
    u = b.append("unseen")
    w = b.op(112, "send", [u])
    b.unpolled.add(("unseen", 0))
    E(Expected("unseen", "unseen", ops=(w,), values=(u.record.value,), offsets=(0,)))

    # phantom-read: a record nobody sent appears in the log
    p = b.append("phantom")
    b.op(113, "send", [p])
    ghost = next(b.values)
    b.final_reads[("phantom", 0)] = [(0, p.record.value), (1, ghost)]
    E(Expected("phantom-read", "phantom", values=(ghost,), offsets=(1,)))

    # poll-skip: the next poll of a process starts past a record it never read
    sends = [b.append("pollskip") for _ in range(4)]
    b.op(114, "send", sends)
    b.assign(115, ["pollskip"])
    r1 = b.op(115, "poll", [b.read("pollskip", 0, 2)])
    r2 = b.op(115, "poll", [b.read("pollskip", 3, 4)])
    E(Expected("poll-skip", "pollskip", ops=(r1, r2), values=(sends[1].record.value, sends[3].record.value)))

    # nonmonotonic-poll: the next poll of a process starts before where the last one ended
    sends = [b.append("pollback") for _ in range(3)]
    b.op(116, "send", sends)
    b.assign(117, ["pollback"])
    r1 = b.op(117, "poll", [b.read("pollback", 0, 3)])
    r2 = b.op(117, "poll", [b.read("pollback", 1, 3)])
    E(Expected("nonmonotonic-poll", "pollback", ops=(r1, r2),
               values=(sends[2].record.value, sends[1].record.value)))

    # int-nonmonotonic-poll: one poll returns offset 1 before offset 0
    s1, s2 = b.append("intpollback"), b.append("intpollback")
    b.op(118, "send", [s1, s2])
    r = b.op(119, "poll", [b.records("intpollback", [(1, s2.record.value), (0, s1.record.value)])])
    E(Expected("int-nonmonotonic-poll", "intpollback", ops=(r,), values=(s2.record.value, s1.record.value)))

    # nonmonotonic-send: a timed-out (info) send lands after the process's next, acked send
    late = b.sent("sendback", offset=1)
    first = b.append("sendback")
    b.logs[("sendback", 0)].append(late.record.value)
    o1 = b.op(120, "send", [late], "info")
    o2 = b.op(120, "send", [first])
    E(Expected("nonmonotonic-send", "sendback", ops=(o1, o2), values=(late.record.value, first.record.value)))

    # int-nonmonotonic-send: one op's second send got the lower offset
    e1, e2 = b.sent("intsendback", offset=1), b.sent("intsendback", offset=0)
    b.logs[("intsendback", 0)].extend([e2.record.value, e1.record.value])
    o = b.op(121, "send", [e1, e2])
    E(Expected("int-nonmonotonic-send", "intsendback", ops=(o,), values=(e1.record.value, e2.record.value)))

    # int-send-skip (allowed): another producer's record lands between a transaction's two sends,
    # which is also a G0 write cycle (allowed: Kafka does not isolate writes)
    t1 = b.begin(122, "txn")
    i1 = b.append("intsendskip")
    t2 = b.begin(123, "send")
    i2 = b.append("intsendskip")
    o2 = b.end(t2, "ok", [i2])
    i3 = b.append("intsendskip")
    o1 = b.end(t1, "ok", [i1, i3])
    E(Expected("int-send-skip", "intsendskip", violation=False, ops=(o1,),
               values=(i1.record.value, i3.record.value)))
    E(Expected("G0", None, violation=False, ops=(o1, o2)))

    # send-skip: a timed-out (info) send lands after the process's next send, so the process's
    # own record falls between its first two sends (and the next scan step goes backwards)
    k1, k3 = b.append("sendskip"), b.append("sendskip")
    k2 = b.append("sendskip")
    o1 = b.op(124, "send", [k1])
    o2 = b.op(124, "send", [k2], "info")
    o3 = b.op(124, "send", [k3])
    E(Expected("send-skip", "sendskip", ops=(o1, o2), values=(k1.record.value, k2.record.value)))
    E(Expected("nonmonotonic-send", "sendskip", ops=(o2, o3), values=(k2.record.value, k3.record.value)))

    # realtime-order: an append acked before another began got the higher offset
    late = b.sent("realtime", offset=1)
    early = b.sent("realtime", offset=0)
    b.logs[("realtime", 0)].extend([early.record.value, late.record.value])
    a_op = b.op(126, "send", [late])
    b_op = b.op(127, "send", [early])
    E(Expected("realtime-order", "realtime", ops=(a_op, b_op), offsets=(1, 0)))
    E(Expected("nonlinearizable", "realtime"))
    E(Expected("G0-realtime", None, violation=False, ops=(b_op, a_op)))

    # future-read: a poll returns a record whose send had not begun
    fv = next(b.values)
    r = b.op(128, "poll", [b.records("future", [(0, fv)])])
    b.logs[("future", 0)].append(fv)
    w = b.op(129, "send", [Send(Record("future", 0, None, fv, 0))])
    E(Expected("future-read", "future", ops=(w, r), values=(fv,), offsets=(0, 0)))
    E(Expected("nonlinearizable", "future"))
    E(Expected("G1c-realtime", None, ops=(w, r)))

    # G1c: two concurrent transactions each read the other's write (circular information flow)
    t1, t2 = b.begin(130, "txn"), b.begin(131, "txn")
    ca, cb = b.append("cycle-a"), b.append("cycle-b")
    o2 = b.end(t2, "ok", [cb, b.read("cycle-a")])
    o1 = b.end(t1, "ok", [ca, b.read("cycle-b")])
    E(Expected("G1c", None, ops=(o1, o2)))

    # G1c through a write-write edge (allowed with ww_deps): T9 -ww-> T10 -wr-> T9
    t9, t10 = b.begin(132, "txn"), b.begin(133, "txn")
    c1, c2, d1 = b.append("g1cw-a"), b.append("g1cw-a"), b.append("g1cw-b")
    o10 = b.end(t10, "ok", [c2, d1])
    o9 = b.end(t9, "ok", [c1, b.read("g1cw-b")])
    E(Expected("G1c", None, violation=False, ops=(o9, o10)))

    # G0: two concurrent transactions write two partitions in opposite orders
    t3, t4 = b.begin(134, "txn"), b.begin(135, "txn")
    a1, b1, a2, b2 = b.append("ww-a"), b.append("ww-b"), b.append("ww-a"), b.append("ww-b")
    o4 = b.end(t4, "ok", [b1, a2])
    o3 = b.end(t3, "ok", [a1, b2])
    E(Expected("G0", None, violation=False, ops=(o3, o4)))

    # G-single (allowed): read skew; T5 misses T6's write to rw-a but reads its write to rw-b
    b.op(136, "send", [b.append("rw-a")])
    t5, t6 = b.begin(137, "txn"), b.begin(138, "txn")
    seen = b.read("rw-a")
    ga, gb = b.append("rw-a"), b.append("rw-b")
    o6 = b.end(t6, "ok", [ga, gb])
    o5 = b.end(t5, "ok", [seen, b.read("rw-b")])
    E(Expected("G-single", None, violation=False, ops=(o5, o6)))

    # G2 (allowed): write skew; each transaction misses the other's write
    b.op(139, "send", [b.append("g2-a"), b.append("g2-b")])
    t7, t8 = b.begin(140, "txn"), b.begin(141, "txn")
    ra, rb = b.read("g2-a"), b.read("g2-b")
    wa, wb = b.append("g2-a"), b.append("g2-b")
    o8 = b.end(t8, "ok", [rb, wa])
    o7 = b.end(t7, "ok", [ra, wb])
    E(Expected("G2", None, violation=False, ops=(o7, o8)))


def clean_history() -> Builder:
    b = Builder()
    clean_workload(b)
    b.final_polls()
    return b


def injected_history() -> Builder:
    b = Builder()
    clean_workload(b)
    scenarios(b)
    b.final_polls()
    return b


def systematic_history(topics: int = 3, values: int = 40, stored_twice_every: int = 5, lost_every: int = 7) -> Builder:
    """A broker with a systematic bug on every partition (topic sys-i, written by process i): of each
    process's sends, every stored_twice_every-th record is stored twice (a duplicate; the partition is
    not linearizable) and every lost_every-th is acknowledged at an offset the final reads skip (a lost
    write, and a skip in the final poll)."""
    b = Builder()
    lost: set[int] = set()
    for i in range(values):
        for process in range(topics):
            send = b.append(f"sys-{process}")
            if i % stored_twice_every == stored_twice_every - 1:
                b.logs[(send.record.topic, 0)].append(send.record.value)
            elif i % lost_every == lost_every - 1:
                lost.add(send.record.value)
            b.op(process, "send", [send])
    for tp, log in b.logs.items():
        b.final_reads[tp] = [(offset, value) for offset, value in enumerate(log) if value not in lost]
    b.final_polls()
    return b
