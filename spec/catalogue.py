"""The guarantee catalogue: every guarantee kspec checks, by stable id.

This is the one vocabulary of the project. The spec states each id as a checkable
property, conformance tests are tagged with ids, checker anomalies name the ids they
violate and every report is a table by id. Ids are stable: extend, never renumber.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Guarantee:
    id: str
    statement: str
    holds_when: str
    # The spec's invariants that check it, as "model: invariant name" (spec/models/).
    invariants: tuple[str, ...] = ()


_GUARANTEES = (
    Guarantee("ORD-1", "a partition assigns contiguous, strictly increasing offsets in append order", "always",
              ("log: offsets contiguous in append order",)),
    Guarantee("ORD-2", "one producer's records to one partition are stored in send order",
              "idempotence on, or max in-flight 1", ("idempotence: stored in send order",)),
    Guarantee("ORD-3", "a consumer reads a partition in offset order, with no skipped committed offset",
              "assign mode; subscribe mode between rebalances",
              ("log: consumer in offset order without gaps",)),
    Guarantee("DUR-1", "a record acked with acks=all is never lost",
              "ISR >= min.insync.replicas at ack, clean elections, one ISR member survives",
              ("replication: acked records on every ISR member",)),
    Guarantee("DUR-2", "with acks=1 a record is on the leader only at ack time "
                       "(the loss window is documented, not a bug)", "acks=1"),
    Guarantee("VIS-1", "consumers never see a record above the high watermark", "always",
              ("log: consumer below the high watermark", "replication: high watermark within the log")),
    Guarantee("VIS-2", "once offset o of a partition was read as record r, every later read of o returns r",
              "clean elections", ("log: reads are repeatable", "replication: exposed records on every ISR member")),
    Guarantee("REP-1", "replicas agree on every offset below both their high watermarks (log matching)",
              "clean elections",
              ("replication: log matching below the high watermarks", "replication: followers match their leader")),
    Guarantee("REP-2", "leader epochs only grow; one leader per epoch", "always",
              ("replication: one leader per epoch", "replication: quorum leader epoch only grows")),
    Guarantee("GRP-1", "within one generation a partition belongs to at most one member of a group", "always",
              ("group: one owner per partition within a generation",)),
    Guarantee("GRP-2", "a committed group offset survives coordinator failover and broker restart",
              "offsets topic replicated"),
    Guarantee("GRP-3", "a group's committed offset for a partition never moves backwards",
              "commits carry the member's generation and its consumed position; no explicit offset reset",
              ("group: committed offsets never move back",)),
    Guarantee("IDM-1", "an idempotent producer's retries never duplicate a record", "one producer session",
              ("idempotence: no batch stored twice",)),
    Guarantee("TXN-1", "a transaction's records and offsets commit or abort together", "transactional producer",
              ("transactions: nothing from a fenced epoch appended after the fence",
               "transactions: a late write never joins the next transaction",
               "transactions: one marker outcome for every partition of a transaction")),
    Guarantee("TXN-2", "read_committed consumers never see aborted or open-transaction records",
              "isolation.level=read_committed", ("transactions: read_committed returns only committed records",)),
    Guarantee("RET-1", "retention and compaction never reuse or reorder offsets; "
                       "compaction keeps the latest value per key", "always",
              ("log: log start <= high watermark <= log end", "log: log start and high watermark only grow")),
    Guarantee("PRO-1", "a malformed or unsupported request gets an error code or a closed connection; "
                       "stored data is untouched", "always"),
    Guarantee("EOS-1", "every input record's effect appears exactly once in the committed output of an "
                       "exactly-once stream processor (read with isolation.level=read_committed)",
              "processing.guarantee exactly-once: the outputs, state changelog and input offsets in one transaction"),
    Guarantee("EOS-2", "a stream processor's state restored from its changelog after a crash equals its state "
                       "before the crash (the last committed state)", "changelog topics written in the same transactions"),
    Guarantee("MIR-1", "every record committed in a mirrored source partition appears in its remote partition, "
                       "in source order", "mirror running, source retention not outrun",
              ("mirror: copies in source order", "mirror: progress only past copied records")),
    Guarantee("MIR-2", "with exactly-once mirroring no source record appears twice in the target",
              "exactly.once.support=enabled", ("mirror: no record copied twice",)),
    Guarantee("MIR-3", "a translated group offset never points past a record the group had not consumed in the source",
              "checkpoints on", ("mirror: checkpoint never past an unconsumed record",)),
    Guarantee("CON-1", "a Connect sink receives every record of its topics at least once across worker failures",
              "distributed Connect"),
    Guarantee("CON-2", "with exactly-once source support no source record is written twice",
              "exactly.once.source.support=enabled"),
    Guarantee("CON-3", "a Connect source writes every record it read to its topic at least once across worker "
                       "failures (its source offsets are committed only after their records are acked)",
              "distributed Connect"),
    Guarantee("AUTH-1", "no request but the handshake is served before authentication succeeds on a SASL listener",
              "SASL listener"),
    Guarantee("AUTH-2", "an operation that the ACLs deny is refused with its authorization error and changes nothing",
              "authorizer on"),
    Guarantee("AUTH-3", "a client principal cannot act as a replica or a controller (replica Fetch, "
                        "WriteTxnMarkers, controller RPCs need CLUSTER_ACTION)", "authorizer on"),
)

CATALOGUE: dict[str, Guarantee] = {g.id: g for g in _GUARANTEES}


def guarantee(guarantee_id: str) -> Guarantee:
    """The guarantee with this id; a KeyError names the known ids."""
    try:
        return CATALOGUE[guarantee_id]
    except KeyError:
        raise KeyError(f"unknown guarantee id {guarantee_id!r}; known: {', '.join(CATALOGUE)}") from None
