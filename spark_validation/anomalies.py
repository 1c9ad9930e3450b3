"""Every anomaly the checker names, the guarantee it violates, and the row that proves it.

Names are Jepsen's where Jepsen has the anomaly (research/jepsen.md section 3); kspec adds
G1b, G-single, G2, send-skip, phantom-read, realtime-order, future-read and
nonlinearizable. An anomaly with no guarantee is reported for the record but is allowed:
Kafka does not isolate writes between transactions and does not promise serializability.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from spec.catalogue import guarantee


@dataclass(frozen=True)
class AnomalyKind:
    name: str
    guarantee_id: str | None
    definition: str


_KINDS = (
    AnomalyKind("inconsistent-offsets", "VIS-2", "one offset of a partition was seen holding two values"),
    AnomalyKind("duplicate", "IDM-1", "one value was seen at two offsets of a partition"),
    AnomalyKind("duplicate-after-timeout", "IDM-1", "a value stored twice because the application sent it again "
                "after its client reported the first send timed out (_MSG_TIMED_OUT): allowed, the client's resend, "
                "not the broker's duplicate"),
    AnomalyKind("duplicate-after-epoch-bump", "IDM-1", "a value stored twice by one idempotent producer in two "
                "producer epochs (the client bumped its epoch and sent the record again, librdkafka issue 4953): "
                "allowed, no broker can deduplicate across producer epochs"),
    AnomalyKind("lost-write", "DUR-1", "a committed value below the highest read value was never read"),
    AnomalyKind("unseen", "DUR-1", "values acknowledged to producers were never read by any consumer"),
    AnomalyKind("phantom-read", "VIS-1", "a consumer read a value no producer sent"),
    AnomalyKind("G1a", "TXN-2", "an ok op read a value written by a failed (aborted) op"),
    AnomalyKind("precommitted-read", "TXN-2", "an op read a value it wrote itself before committing"),
    AnomalyKind("G1b", "TXN-1", "a read spanned a transaction's writes to a partition but saw only some"),
    AnomalyKind("hanging-transaction", "TXN-1", "a transactional write no marker ended holds its partition's last "
                "stable offset through the final reads: it neither committed nor aborted with its transaction, and "
                "read_committed consumers read nothing after it (the committed records it hides are not lost)"),
    AnomalyKind("poll-skip", "ORD-3", "a process's next poll skipped over offsets after its last poll"),
    AnomalyKind("nonmonotonic-poll", "ORD-3", "a process's next poll started at or before its last poll"),
    AnomalyKind("int-poll-skip", "ORD-3", "within one op, consecutive reads of a partition skipped offsets"),
    AnomalyKind("int-nonmonotonic-poll", "ORD-3", "within one op, a partition's reads went backwards"),
    AnomalyKind("nonmonotonic-send", "ORD-2", "a process's next send landed at or before its last send"),
    AnomalyKind("send-skip", "ORD-2", "a process's own later records landed between its consecutive sends"),
    AnomalyKind("int-send-skip", None, "other records landed between one op's sends to a partition"),
    AnomalyKind("int-nonmonotonic-send", "ORD-2", "within one op, a later send landed at or before an earlier"),
    AnomalyKind("realtime-order", "ORD-1", "an append acked before another began got the higher offset"),
    AnomalyKind("future-read", "VIS-1", "a read returned an offset before every append up to it began"),
    AnomalyKind("nonlinearizable", "ORD-1", "a partition's appends and reads fit no real-time total order"),
    AnomalyKind("replica-divergence", "REP-1", "two replicas hold different records at one offset below both "
                "their high watermarks"),
    AnomalyKind("replica-read-mismatch", "VIS-2", "a replica holds another record at an offset a client had read"),
    AnomalyKind("epoch-regression", "REP-2", "a partition's leader epoch went back (in one node's Metadata, or "
                "along a replica's batches)"),
    AnomalyKind("epoch-two-leaders", "REP-2", "two leaders were named for one leader epoch of a partition"),
    AnomalyKind("stored-unsent", "PRO-1", "a replica holds a record no client sent, in a run with malformed traffic"),
    AnomalyKind("malformed-crash", "PRO-1", "a node stopped running after a burst of malformed frames"),
    AnomalyKind("double-assignment", "GRP-1", "one partition was owned by two members under one generation"),
    AnomalyKind("lost-commit", "GRP-2", "the offsets read back after the run are not the last acknowledged commits"),
    AnomalyKind("rewound-assignment", "GRP-2", "a member given a partition read below its acknowledged committed offset"),
    AnomalyKind("commit-backwards", "GRP-3", "an acknowledged commit moved a partition's committed offset back"),
    AnomalyKind("acks1-window-loss", "DUR-2", "with acks=1 a record acknowledged by a leader that then lost its "
                                              "leadership before any follower had fetched it is lost by design "
                                              "(allowed), while a lost record whose partition kept its leader is a "
                                              "violation"),
    AnomalyKind("power-loss-window", "DUR-1", "a record lost with the unflushed writes of a node that lost power "
                "and then led its partition again, as its last in-sync replica: Kafka does not fsync each write and "
                "re-elects the last ISR member whatever its disk kept (before KIP-966), so DUR-1's condition that one "
                "ISR member survives failed (allowed)"),
    AnomalyKind("acks1-loss", "DUR-2", "an acks=1 record lost while its partition kept the leader that acknowledged it"),
    AnomalyKind("compaction-lost-latest", "RET-1", "compaction lost the latest acknowledged value of a key"),
    AnomalyKind("compaction-offset-reuse", "RET-1", "a compacted log reordered offsets or reused one for another value"),
    AnomalyKind("tombstone-removed-early", "RET-1", "a tombstone was gone before delete.retention.ms had passed"),
    AnomalyKind("G0", None, "a cycle of write-write dependencies"),
    AnomalyKind("G0-realtime", None, "a cycle of write-write and real-time dependencies"),
    AnomalyKind("G1c", "TXN-2", "a dependency cycle with a write-read edge (circular information flow)"),
    AnomalyKind("G1c-realtime", "TXN-2", "as G1c, closed by real-time order"),
    AnomalyKind("G-single", None, "a dependency cycle with exactly one read-write (anti-dependency) edge"),
    AnomalyKind("G-single-realtime", None, "as G-single, closed by real-time order"),
    AnomalyKind("G2", None, "a dependency cycle with two or more read-write edges"),
    AnomalyKind("G2-realtime", None, "as G2, closed by real-time order"),
)
ANOMALY_KINDS: dict[str, AnomalyKind] = {k.name: k for k in _KINDS}
assert all(guarantee(k.guarantee_id) for k in _KINDS if k.guarantee_id)
# A stream processor's committed output (spark_validation/eos.py).
# Kept apart from ANOMALY_KINDS: a queue run's verdict must not list EOS-* as held.
EOS_KINDS = {k.name: k for k in (
    AnomalyKind("eos-duplicate", "EOS-1", "an input value's effect appears in the committed output more times than "
                "the input topic stores the value (each stored input record counts once)"),
    AnomalyKind("eos-lost", "EOS-1", "an acknowledged input record has no effect in the committed output"),
    AnomalyKind("eos-phantom", "EOS-1", "a committed output stems from an input no producer sent"),
    AnomalyKind("eos-count-repeat", "EOS-1", "within one process a key's count did not grow: an effect counted twice"),
    AnomalyKind("eos-count-skip", "EOS-1", "within one process a key's count grew by more than one"),
    AnomalyKind("eos-state-restore", "EOS-2",
                "a restarted process's first output for a key does not continue from the last committed count"),
)}
assert all(guarantee(k.guarantee_id) for k in EOS_KINDS.values())

ANOMALY_SCHEMA = pa.schema([
    pa.field("anomaly", pa.string(), nullable=False),
    pa.field("guarantee", pa.string()),
    pa.field("violation", pa.bool_(), nullable=False),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("process", pa.int64()),
    pa.field("ops", pa.list_(pa.int64())),
    pa.field("values", pa.list_(pa.int64())),
    pa.field("offsets", pa.list_(pa.int64())),
    pa.field("delta", pa.int64()),
    pa.field("detail", pa.string()),
])
ROW_SCHEMA = ANOMALY_SCHEMA.remove(ANOMALY_SCHEMA.get_field_index("guarantee"))  # rows as the checks give them


def anomaly_row(anomaly: str, detail: str, *, violation: bool = True, topic: str | None = None,
                partition: int | None = None, process: int | None = None, ops: list[int] | None = None,
                values: list[int | None] | None = None, offsets: list[int | None] | None = None,
                delta: int | None = None) -> dict:
    """One anomaly row (every column but guarantee, which the checker adds from ANOMALY_KINDS)."""
    assert anomaly in ANOMALY_KINDS, anomaly
    return {"anomaly": anomaly, "violation": violation, "topic": topic, "partition": partition, "process": process,
            "ops": ops, "values": values, "offsets": offsets, "delta": delta, "detail": detail}
