"""Connect's embedded group protocol (protocol type `connect`) and its assignors. Sans-IO.

Workers join one group (group.id) and offer, best first, `compatible` (v1, incremental
cooperative, KIP-415) and `default` (v0, eager); connect.protocol=eager offers `default`
only. Encodings (ConnectProtocol, IncrementalCooperativeConnectProtocol), big-endian:

    metadata v0:   version INT16, url STRING, config_offset INT64
    metadata v1:   ... + allocation NULLABLE_BYTES (the member's current assignment, encoded)
    assignment v0: version INT16, error INT16, leader STRING, leader_url STRING,
                   config_offset INT64, assignment ARRAY{connector STRING, tasks ARRAY INT32}
    assignment v1: ... + revoked ARRAY{connector STRING, tasks ARRAY INT32}, delay INT32

In a connector's tasks array, -1 stands for the Connector instance itself.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

CONNECTOR_TASK = -1
NO_ERROR, CONFIG_MISMATCH = 0, 1
PROTOCOLS = {"eager": [("default", 0)], "compatible": [("compatible", 1), ("default", 0)]}
# sessioned (v2, KIP-507): v1's formats; a group that chose it signs its internal requests
# (connect/signing.py).
PROTOCOLS["sessioned"] = [("sessioned", 2)] + PROTOCOLS["compatible"]
VERSIONS = {"default": 0, "compatible": 1, "sessioned": 2}


@dataclass(frozen=True, order=True)
class Work:
    """A unit of work: a connector (task == -1) or one of its tasks."""
    connector: str
    task: int = CONNECTOR_TASK


@dataclass
class WorkerState:
    url: str
    config_offset: int
    allocation: frozenset[Work] | None = None  # v1: what the member runs now


@dataclass
class Assignment:
    error: int
    leader: str
    leader_url: str
    config_offset: int
    assigned: frozenset[Work] = frozenset()
    revoked: frozenset[Work] = frozenset()
    delay_ms: int = 0


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int16(self, v: int):
        self.parts.append(struct.pack(">h", v))

    def int32(self, v: int):
        self.parts.append(struct.pack(">i", v))

    def int64(self, v: int):
        self.parts.append(struct.pack(">q", v))

    def string(self, s: str):
        data = s.encode()
        self.int16(len(data))
        self.parts.append(data)

    def nullable_bytes(self, b: bytes | None):
        if b is None:
            self.int32(-1)
        else:
            self.int32(len(b))
            self.parts.append(b)

    def work(self, works: frozenset[Work]):
        by_connector: dict[str, list[int]] = {}
        for w in sorted(works):
            by_connector.setdefault(w.connector, []).append(w.task)
        self.int32(len(by_connector))
        for connector, tasks in by_connector.items():
            self.string(connector)
            self.int32(len(tasks))
            for t in tasks:
                self.int32(t)

    def bytes(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = memoryview(data), 0

    def _unpack(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def int16(self) -> int:
        return self._unpack(">h")

    def int32(self) -> int:
        return self._unpack(">i")

    def int64(self) -> int:
        return self._unpack(">q")

    def string(self) -> str:
        n = self.int16()
        s = bytes(self.data[self.pos:self.pos + n]).decode()
        self.pos += n
        return s

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        if n < 0:
            return None
        b = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return b

    def work(self) -> frozenset[Work]:
        works = set()
        for _ in range(self.int32()):
            connector = self.string()
            works.update(Work(connector, self.int32()) for _ in range(self.int32()))
        return frozenset(works)


def encode_metadata(version: int, state: WorkerState) -> bytes:
    w = _Writer()
    w.int16(version)
    w.string(state.url)
    w.int64(state.config_offset)
    if version >= 1:
        w.nullable_bytes(None if state.allocation is None else
                         encode_assignment(1, Assignment(NO_ERROR, "", "", state.config_offset, state.allocation)))
    return w.bytes()


def decode_metadata(data: bytes) -> WorkerState:
    r = _Reader(data)
    version = r.int16()
    state = WorkerState(r.string(), r.int64())
    if version >= 1:
        allocation = r.nullable_bytes()
        state.allocation = decode_assignment(allocation).assigned if allocation else None
    return state


def encode_assignment(version: int, a: Assignment) -> bytes:
    w = _Writer()
    w.int16(version)
    w.int16(a.error)
    w.string(a.leader)
    w.string(a.leader_url)
    w.int64(a.config_offset)
    w.work(a.assigned)
    if version >= 1:
        w.work(a.revoked)
        w.int32(a.delay_ms)
    return w.bytes()


def decode_assignment(data: bytes) -> Assignment:
    r = _Reader(data)
    version = r.int16()
    a = Assignment(r.int16(), r.string(), r.string(), r.int64(), r.work())
    if version >= 1:
        a.revoked = r.work()
        a.delay_ms = r.int32()
    return a


def _round_robin(members: list[str], works: list[Work], loads: dict[str, int]) -> dict[str, set[Work]]:
    """Each work to the member with the least load so far (ties: member order)."""
    result: dict[str, set[Work]] = {m: set() for m in members}
    for work in works:
        member = min(members, key=lambda m: (loads[m], members.index(m)))
        result[member].add(work)
        loads[member] += 1
    return result


def eager_assign(members: dict[str, WorkerState], configured: list[Work]) -> dict[str, frozenset[Work]]:
    """Eager (protocol `default`): everything was revoked before the join; deal it out again,
    connectors first, then tasks."""
    order = sorted(members)
    ordered = [w for w in configured if w.task == CONNECTOR_TASK] + [w for w in configured if w.task != CONNECTOR_TASK]
    dealt = _round_robin(order, ordered, dict.fromkeys(order, 0))
    return {m: frozenset(dealt[m]) for m in order}


@dataclass
class IncrementalAssignor:
    """KIP-415's leader: moves only what must move. A departed worker's work is held for up to
    scheduled.rebalance.max.delay.ms, so a worker that restarts quickly gets it back; when
    the delay expires it goes to the others. A new worker gets its share through a first
    round that revokes work from the loaded workers and a second that assigns it."""
    max_delay_ms: int
    previous: dict[str, frozenset[Work]] = field(default_factory=dict)  # last assignment made
    delay_deadline_ms: int | None = None

    def assign(self, members: dict[str, WorkerState], configured: list[Work], now_ms: int
               ) -> tuple[dict[str, frozenset[Work]], dict[str, frozenset[Work]], int]:
        """(assigned, revoked, delay_ms) by member: `assigned` is what each member should run
        after this round (its whole assignment)."""
        configured_set = set(configured)
        order = sorted(members)
        current = {m: set(members[m].allocation or ()) for m in order}
        revoked = {m: {w for w in current[m] if w not in configured_set} for m in order}  # deleted work
        for m in order:
            current[m] -= revoked[m]
        running = set().union(*current.values()) if current else set()
        previous_departed = {m: works for m, works in self.previous.items() if m not in members}
        lost = {w for works in previous_departed.values() for w in works if w in configured_set and w not in running}
        delay_ms = 0
        if lost:
            if self.delay_deadline_ms is None:
                self.delay_deadline_ms = now_ms + self.max_delay_ms
            if now_ms < self.delay_deadline_ms:
                delay_ms = self.delay_deadline_ms - now_ms
            else:
                lost = set()  # held long enough: from now on it is unassigned work like any other
                self.delay_deadline_ms = None
        else:
            self.delay_deadline_ms = None
        unassigned = sorted(configured_set - running - lost)
        # Connectors and tasks are dealt and balanced separately, as Connect does.
        for is_connector in (True, False):
            kind = lambda works: {w for w in works if (w.task == CONNECTOR_TASK) == is_connector}  # noqa: E731
            loads = {m: len(kind(current[m])) for m in order}
            for m, works in _round_robin(order, sorted(kind(unassigned)), loads).items():
                current[m] |= works
            # Balance: nobody above the ceiling of the fair share while someone is below its floor.
            if unassigned or lost or not order:
                continue
            total = sum(loads.values())
            floor, ceiling = total // len(order), -(-total // len(order))
            if any(loads[m] < floor for m in order):
                for m in order:
                    excess = set(sorted(kind(current[m]))[ceiling:])
                    revoked[m] |= excess
                    current[m] -= excess
        self.previous = {m: frozenset(current[m]) for m in order}
        if delay_ms:  # remember whose work is held, to recognise it as lost in the next round
            self.previous.update({m: frozenset(w for w in works if w in lost)
                                  for m, works in previous_departed.items()})
        return ({m: frozenset(current[m]) for m in order}, {m: frozenset(revoked[m]) for m in order}, delay_ms)
