"""Hanging transactions (TXN-1): a partition whose last stable offset an open transaction holds for good.

A transaction's records commit or abort together, each partition's by the marker its
coordinator writes there. A transactional write that reaches a partition after its
transaction's marker (delayed in the network or in a request queue, with no KIP-890
verification to refuse it: kspec.bug.late.produce.joins.next.transaction re-creates that)
opens a transaction there that no coordinator knows of, so no marker ever ends it: it neither
commits nor aborts with the rest of its transaction, and it holds the partition's last stable
offset (LSO), so a read_committed consumer reads nothing after it. The final reads then miss
records that were committed and stored: not lost (DUR-1), hidden by the hanging transaction.

The evidence is the final reads' stuck-partitions op (faults/stuck_reads.py): for each partition
they could not read to its high watermark, the LSO and the records at and above it as a
read_uncommitted consumer reads them. For each partition whose LSO stayed below its high
watermark with a record at the LSO:

- hanging-transaction (TXN-1): names the record at the LSO and the op that sent it (with that
  op's outcome). A violation when that op's client ended its transaction (committed or aborted:
  its markers were written, so nothing will end this write), or when the write has been open
  longer than a coordinator lets a transaction run with Kafka's defaults (transaction.timeout.ms,
  60 s, plus the 10 s between the coordinator's checks for timed-out transactions). A write of
  an undecided transaction (info: its producer was dropped) open for less than that may still
  be aborted by its coordinator: reported, allowed.

`explain` then keeps as allowed the unseen/lost-write rows whose every value lies at or above
the LSO of a hanging transaction on its partition: they are stored and committed, hidden behind
it, and the hanging-transaction row is the violation.
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from spark_validation.anomalies import anomaly_row
from spark_validation.frames import read_filtered
from spark_validation.options import RunOptions

GUARANTEES: tuple[str, ...] = ()  # TXN-1's other anomalies come from the partition checks
NOT_APPLICABLE = "the final reads read every partition to its high watermark"
ANOMALIES = ("hanging-transaction",)
STUCK_PARTITIONS = "stuck-partitions"  # faults/stuck_reads.py
NS_PER_S = 1_000_000_000
OUTCOMES = {"ok": "committed", "fail": "aborted", "info": "undecided"}
# how long a coordinator may leave a transaction open: Kafka's default transaction.timeout.ms plus
# transaction.abort.timed.out.transaction.cleanup.interval.ms
OPEN_MAX_S = 60 + 10


def check(parquet_path: Path, options: RunOptions) -> list[dict] | None:
    stuck = read_filtered(parquet_path, ["index", "type", "f", "time_ns", "extra"], lambda t: pc.and_(
        pc.equal(t["f"], STUCK_PARTITIONS), pc.not_equal(t["type"], "invoke")))
    stuck = [r for r in (stuck.to_pylist() if stuck is not None else []) if r["extra"]]
    if not stuck:
        return None
    # only the sends of the values the final reads found at a last stable offset: a few, however long the history
    at_stable = pa.array(sorted({value for op in stuck for *_, records in json.loads(op["extra"])["partitions"]
                                 for _, value in records if value is not None}), pa.int64())
    columns = ["index", "type", "f", "time_ns", "invoke_time_ns", "mop_f", "topic", "partition", "value"]
    sends = read_filtered(parquet_path, columns, lambda t: pc.and_(pc.and_(
        pc.equal(t["mop_f"], "send"), pc.not_equal(t["type"], "invoke")), pc.is_in(t["value"], at_stable)))
    senders: dict[tuple[str, int, int], dict] = {}  # (topic, partition, value) -> its send's completion
    for r in sends.to_pylist():
        senders.setdefault((r["topic"], r["partition"], r["value"]), r)
    found = []
    for op in stuck:
        for topic, partition, position, stable, high, records in json.loads(op["extra"])["partitions"]:
            at_stable = next((value for offset, value in records if offset == stable), None)
            if stable >= high or at_stable is None:
                continue
            sender = senders.get((topic, partition, at_stable))
            violation = True
            if sender is None:
                by = "that no op of this history sent"
            else:
                sent_ns = min(sender["invoke_time_ns"] or sender["time_ns"], sender["time_ns"])
                outcome = OUTCOMES.get(sender["type"], sender["type"])
                open_s = (op["time_ns"] - sent_ns) / NS_PER_S
                by = (f"sent by op {sender['index']} ({sender['f']}, {outcome}) at {sent_ns / NS_PER_S:.3f} s, "
                      f"{open_s:.0f} s before")
                if sender["type"] == "info" and open_s <= OPEN_MAX_S:
                    violation = False
                    by += f" (undecided, and its coordinator may still abort it within {OPEN_MAX_S} s)"
            found.append(anomaly_row(
                "hanging-transaction",
                f"{topic}-{partition}'s last stable offset stayed at {stable} below its high watermark {high} through "
                f"the final reads: value {at_stable} at offset {stable}, {by}, is in a transaction no marker ended, "
                f"and read_committed consumers read nothing after it",
                violation=violation, topic=topic, partition=partition,
                ops=[op["index"], *([sender["index"]] if sender else [])],
                values=[at_stable], offsets=[stable, high]))
    return found


def explain(rows: list[dict], windows: list[dict]) -> None:
    """unseen/lost-write rows whose every value is at or above the LSO of a hanging transaction (its row
    among windows) on its partition are hidden, not lost: allowed, the detail saying behind what."""
    hanging = {(r["topic"], r["partition"]): r["offsets"][0] for r in windows if r["anomaly"] in ANOMALIES}  # LSOs
    for r in rows:
        stable = hanging.get((r["topic"], r["partition"]))
        if (stable is None or not r["violation"] or r["anomaly"] not in ("unseen", "lost-write")
                or not r["offsets"] or any(o is None or o < stable for o in r["offsets"])):
            continue
        r["violation"] = False
        r["detail"] = (f"committed but hidden behind the hanging transaction at offset {stable} of "
                       f"{r['topic']}-{r['partition']} (TXN-1): {r['detail']}")
