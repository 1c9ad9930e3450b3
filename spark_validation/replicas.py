"""The replica audit's checks: REP-1, REP-2, VIS-2 and PRO-1 from the replica reads, the
leader-epoch observations and the malformed-traffic nemesis a fault run records
(faults/audit.py, faults/epochs.py, faults/malformed.py).

These ops are few (one per replica read, a few per second of observations), so the check
runs on the driver over Arrow columns rather than as a Spark job; the records of the
replica reads are a partition's log once per replica.

Anomalies, each with the ops that show it:
- replica-divergence (REP-1): two replicas hold different records at one offset below both
  their high watermarks (or one holds an offset the other lacks there); one row per pair of
  replicas and method (follower fetch, segment files), naming the first such offset, both
  records and how many offsets differ.
- replica-read-mismatch (VIS-2): a client read offset o as value v, and a replica holds
  another value at o below its high watermark.
- epoch-regression (REP-2): one node's Metadata named a lower leader epoch for a partition
  than it had named before, or batches' leader epochs go down as offsets go up, in one
  replica's log or in what the clients' polls returned (faults/workload.py records the epoch
  of each batch a poll read).
- epoch-two-leaders (REP-2): two leaders were named for one leader epoch of a partition.
- stored-unsent (PRO-1): a replica holds a record that no client sent (its key or value is not
  one of the workload's 8-byte longs, or no send carried that value to that partition): with
  the malformed nemesis in the run, that is stored data the malformed traffic changed.
- malformed-crash (PRO-1): a node stopped running after a burst of malformed frames.

`check` also says, per guarantee, whether the history let it be checked, and if not why
("not checked: ..."), so a broker that lacks an API is reported as such, not as held.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from spark_validation.anomalies import anomaly_row
from spark_validation.frames import read_filtered

REPLICA_READ, LEADER_EPOCHS, START_MALFORMED = "replica-read", "leader-epochs", "start-malformed"
COLUMNS = ["index", "process", "type", "f", "mop_f", "topic", "partition", "key", "value", "offset", "extra"]
DIVERGENT_OFFSETS_SHOWN = 8


def _read(parquet_path: Path, fs: list[str]) -> pa.Table:
    """The completions of ops with f in fs, in history order (read one row group at a time)."""
    return read_filtered(parquet_path, COLUMNS, lambda t: pc.and_(pc.is_in(t["f"], pa.array(fs)),
                                                                  pc.not_equal(t["type"], "invoke"))).sort_by("index")


class _Read:
    """One replica read: its op, node, method, high watermark, records by offset, batch epochs."""

    def __init__(self, index: int, extra: dict) -> None:
        self.index = index
        self.node = extra["node"]
        self.method = extra["method"]
        self.topic, self.partition = extra["topic"], extra["partition"]
        self.high_watermark = extra["high_watermark"]
        self.log_start_offset = extra["log_start_offset"]
        self.epochs = extra.get("epochs", [])
        self.foreign = extra.get("foreign", [])
        self.records: dict[int, tuple] = {}  # offset -> (key, value)

    def where(self) -> str:
        return f"node {self.node} ({self.method})"


def check(parquet_path: Path, compacted: bool = False) -> tuple[list[dict], dict[str, str]]:
    """(anomaly rows, guarantee id -> why it was not checked) for REP-1, REP-2 and PRO-1, which are
    held only when the history holds what checks them. With compacted topics each replica's cleaner
    removes records on its own schedule, so an offset one replica (or a client) has and another no
    longer holds is no difference; the records both hold must still agree."""
    rows = _read(parquet_path, [REPLICA_READ, LEADER_EPOCHS, START_MALFORMED]).to_pylist()
    if any(r["f"] in (REPLICA_READ, LEADER_EPOCHS) for r in rows):  # a run that audits: its client ops too
        rows += _read(parquet_path, ["send", "poll", "txn"]).to_pylist()
    reads: dict[int, _Read] = {}
    failed_reads: list[dict] = []
    observations: list[tuple[int, dict]] = []
    malformed: list[tuple[int, dict]] = []
    sent: dict[tuple[str, int], set] = defaultdict(set)
    client_reads: dict[tuple[str, int], dict[int, tuple[int, int]]] = defaultdict(dict)  # offset -> (value, op)
    polled_epochs: list[tuple[str, int, int, int, int]] = []  # (topic, partition, offset, epoch, op)
    for r in rows:
        extra = json.loads(r["extra"]) if r["extra"] else None
        if r["f"] == REPLICA_READ:
            if r["type"] != "ok":
                if extra:
                    failed_reads.append(extra)
                continue
            read = reads.get(r["index"])
            if read is None and extra is not None:
                read = reads[r["index"]] = _Read(r["index"], extra)
            if read is not None and r["offset"] is not None:
                read.records[r["offset"]] = (r["key"], r["value"])
        elif r["f"] == LEADER_EPOCHS:
            if r["type"] == "ok" and extra:
                observations.append((r["index"], extra))
        elif r["f"] == START_MALFORMED:
            if extra and "nodes" in extra.get("value", {}):
                malformed.append((r["index"], extra["value"]))
        elif extra and "leader_epochs" in extra:  # a client poll's batch epochs (faults/workload.py)
            polled_epochs += [(t, p, o, e, r["index"]) for t, p, o, e in extra["leader_epochs"]]
        if r["f"] in (REPLICA_READ, LEADER_EPOCHS, START_MALFORMED):
            continue
        if r["mop_f"] == "send" and r["topic"] is not None:
            sent[(r["topic"], r["partition"])].add(r["value"])
        elif r["mop_f"] == "poll" and r["type"] == "ok" and r["topic"] is not None and r["offset"] is not None:
            client_reads[(r["topic"], r["partition"])].setdefault(r["offset"], (r["value"], r["index"]))
    found: list[dict] = []
    by_partition: dict[tuple[str, int], list[_Read]] = defaultdict(list)
    for read in reads.values():
        for offset, key_hex, value_hex, crc in read.foreign:  # records that are no workload longs: by their bytes
            read.records[offset] = (f"0x{key_hex}", f"0x{value_hex} (crc {crc})")
        by_partition[(read.topic, read.partition)].append(read)
    for (topic, partition), partition_reads in sorted(by_partition.items()):
        found += _divergence(topic, partition, partition_reads, compacted)
        found += _mismatch(topic, partition, partition_reads, client_reads[(topic, partition)], compacted)
        for read in partition_reads:
            found += _batch_epochs(read)
            found += _unsent(read, sent[(topic, partition)]) if malformed else []
    found += _observed_epochs(observations)
    found += _polled_epochs(polled_epochs)
    found += _crashes(malformed)
    return found, _unchecked(by_partition, failed_reads, observations, reads, malformed, polled_epochs)


def _divergence(topic: str, partition: int, reads: list[_Read], compacted: bool) -> list[dict]:
    rows = []
    for i, a in enumerate(reads):
        for b in reads[i + 1:]:
            if a.node == b.node or _family(a.method) != _family(b.method):  # replicas read the same way
                continue
            low, high = max(a.log_start_offset, b.log_start_offset), min(a.high_watermark, b.high_watermark)
            offsets = set(a.records) & set(b.records) if compacted else set(a.records) | set(b.records)
            differ = [o for o in sorted(offsets) if low <= o < high and a.records.get(o) != b.records.get(o)]
            if not differ:
                continue
            first = differ[0]
            shown = ", ".join(f"{o}: {a.records.get(o, 'nothing')} vs {b.records.get(o, 'nothing')}"
                              for o in differ[:DIVERGENT_OFFSETS_SHOWN])
            rows.append(anomaly_row(
                "replica-divergence",
                f"{topic}-{partition}: {a.where()} and {b.where()} differ at {len(differ)} offset(s) below both "
                f"high watermarks ({a.high_watermark}, {b.high_watermark}); (key, value) {shown}"
                f"{' ...' if len(differ) > DIVERGENT_OFFSETS_SHOWN else ''}",
                topic=topic, partition=partition, ops=[a.index, b.index],
                values=[_int((a.records.get(first) or (None, None))[1]), _int((b.records.get(first) or (None, None))[1])],
                offsets=[first], delta=len(differ)))
    return rows


def _family(method: str) -> str:
    """Reads over the wire (a follower fetch, or a fetch after a preferred election) compare with
    each other; segment files with segment files (their high watermarks are checkpointed ones)."""
    return "segment-files" if method == "segment-files" else "fetch"


def _mismatch(topic: str, partition: int, reads: list[_Read], client: dict[int, tuple[int, int]],
              compacted: bool) -> list[dict]:
    rows = []
    for read in reads:
        wrong = [(o, v, op) for o, (v, op) in sorted(client.items())
                 if read.log_start_offset <= o < read.high_watermark and (read.records.get(o) or (None, None))[1] != v
                 and not (compacted and o not in read.records)]
        if wrong:
            o, v, op = wrong[0]
            rows.append(anomaly_row(
                "replica-read-mismatch",
                f"{topic}-{partition}: offset {o} was read as value {v}; {read.where()} holds "
                f"{read.records.get(o, 'nothing')} there ({len(wrong)} offset(s) so)",
                topic=topic, partition=partition, ops=[op, read.index],
                values=[v, _int((read.records.get(o) or (None, None))[1])], offsets=[o], delta=len(wrong)))
    return rows


def _batch_epochs(read: _Read) -> list[dict]:
    for (offset_a, epoch_a), (offset_b, epoch_b) in zip(read.epochs, read.epochs[1:]):
        if epoch_b < epoch_a:
            return [anomaly_row(
                "epoch-regression",
                f"{read.topic}-{read.partition} on {read.where()}: the batch at offset {offset_b} has leader epoch "
                f"{epoch_b}, below epoch {epoch_a} of the batch at {offset_a}",
                topic=read.topic, partition=read.partition, ops=[read.index], offsets=[offset_a, offset_b],
                values=[epoch_a, epoch_b])]
    return []


def _polled_epochs(polled: list[tuple[str, int, int, int, int]]) -> list[dict]:
    """Clients' polls, all together: along a partition's offsets the batches' leader epochs never go down."""
    rows = []
    by_partition = defaultdict(list)
    for topic, partition, offset, epoch, op in polled:
        by_partition[(topic, partition)].append((offset, epoch, op))
    for (topic, partition), seen in sorted(by_partition.items()):
        seen.sort()
        highest = seen[0]
        for offset, epoch, op in seen[1:]:
            if epoch < highest[1] and offset > highest[0]:
                rows.append(anomaly_row(
                    "epoch-regression",
                    f"{topic}-{partition}: a client read offset {offset} in a batch of leader epoch {epoch}, after "
                    f"offset {highest[0]} in epoch {highest[1]}",
                    topic=topic, partition=partition, ops=[highest[2], op], offsets=[highest[0], offset],
                    values=[highest[1], epoch]))
                break
            if epoch > highest[1]:
                highest = (offset, epoch, op)
    return rows


def _observed_epochs(observations: list[tuple[int, dict]]) -> list[dict]:
    rows = []
    last: dict[tuple[int, str, int], tuple[int, int, int]] = {}    # (node, t, p) -> (epoch, leader, op)
    leaders: dict[tuple[str, int, int], dict[int, int]] = defaultdict(dict)  # (t, p, epoch) -> leader -> op
    regressed = set()
    for index, extra in observations:
        for topic, partition, leader, epoch in extra.get("leaders", []):
            if epoch < 0:
                continue
            leaders[(topic, partition, epoch)].setdefault(leader, index)
            key = (extra["node_index"], topic, partition)
            if key in last and epoch < last[key][0] and key not in regressed:
                regressed.add(key)
                rows.append(anomaly_row(
                    "epoch-regression",
                    f"{topic}-{partition}: node index {key[0]} named leader {leader} in epoch {epoch} after it had "
                    f"named leader {last[key][1]} in epoch {last[key][0]}",
                    topic=topic, partition=partition, ops=[last[key][2], index], values=[last[key][0], epoch]))
            last[key] = (epoch, leader, index)
    for (topic, partition, epoch), named in sorted(leaders.items()):
        if len(named) > 1:
            rows.append(anomaly_row(
                "epoch-two-leaders",
                f"{topic}-{partition}: leader epoch {epoch} was named with leaders {', '.join(map(str, sorted(named)))}",
                topic=topic, partition=partition, ops=sorted(named.values()), values=[epoch]))
    return rows


def _int(value) -> int | None:
    """A value for the anomaly table's int64 column: None for a record that is no workload long."""
    return value if isinstance(value, int) else None


def _unsent(read: _Read, sent: set) -> list[dict]:
    unsent = [(o, kv) for o, kv in sorted(read.records.items())
              if o < read.high_watermark and (not isinstance(kv[1], int) or kv[1] not in sent)]
    if not unsent:
        return []
    o, (key, value) = unsent[0]
    return [anomaly_row(
        "stored-unsent",
        f"{read.topic}-{read.partition} on {read.where()}: {len(unsent)} record(s) no client sent, first at offset {o} "
        f"(key {key}, value {value})",
        topic=read.topic, partition=read.partition, ops=[read.index], values=[_int(value)], offsets=[o],
        delta=len(unsent))]


def _crashes(malformed: list[tuple[int, dict]]) -> list[dict]:
    rows = []
    for index, value in malformed:
        for node, what in sorted(value["nodes"].items()):
            if what.get("running") is False:
                rows.append(anomaly_row(
                    "malformed-crash", f"node index {node} stopped running after a burst of {what['frames']} "
                    f"malformed frames ({what})", ops=[index]))
    return rows


def _unchecked(by_partition: dict, failed_reads: list[dict], observations: list, reads: dict,
               malformed: list, polled_epochs: list) -> dict[str, str]:
    why: dict[str, str] = {}
    compared = any(len({r.node for r in rs}) > 1 for rs in by_partition.values())
    if not compared:
        if by_partition and not failed_reads:
            why["REP-1"] = "every partition has one replica (replication factor 1): no two replicas to compare"
        elif failed_reads:
            errors = sorted({e.get("error", "?").split(" from node")[0] for e in failed_reads})
            why["REP-1"] = (f"the broker lacks follower reads (Fetch v11+ from a follower, KIP-392): "
                            f"{', '.join(errors)[:200]}")
        else:
            why["REP-1"] = "the history holds no replica reads (no replica audit in this run)"
    epochs_seen = any(epoch >= 0 for _, extra in observations for *_, epoch in extra.get("leaders", []))
    if not epochs_seen and not polled_epochs and not any(r.epochs for r in reads.values()):
        why["REP-2"] = ("the broker's Metadata names no leader epochs (v7+)" if observations
                        else "the history holds no leader-epoch observations")
    if not malformed:
        why["PRO-1"] = "the run had no malformed nemesis (--nemesis malformed)"
    elif not reads:
        why["PRO-1"] = "no replica could be read after the malformed traffic"
    return why
