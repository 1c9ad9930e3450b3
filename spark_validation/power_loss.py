"""Power loss (DUR-1): which lost records a power loss of their partition's last in-sync replica explains.

Kafka does not fsync a partition's log on each write (flush.messages and flush.ms default to
Long.MAX_VALUE): it relies on replication, and a power loss drops the node's unflushed writes
(faults/lazyfs.py drops them; the power nemesis records the bytes dropped per file). When the
node that lost them is elected leader of the partition again, its shorter log wins and the other
replicas truncate to it, so offsets are handed out again. Kafka's KRaft controller does exactly
that when the node was the partition's last ISR member: a fenced broker leaves every ISR but the
last member stays, and leads again once it returns, whatever its disk kept ("last replica
standing"; KIP-966's eligible leader replicas and unclean-shutdown detection, Kafka 4.0+ with
eligible.leader.replicas.version=1, exist to close it). DUR-1 holds only while one ISR member
survives; there the only one left did not survive with its writes. So in a run with the power
nemesis every acknowledged value that the final reads did not return at its acknowledged offset
(or, without final reads, that no poll returned), and every value a poll read at an offset where
the final reads found another, is judged against the power losses:

- power-loss-window (allowed): a power loss after the value was sent (or, for a read value, after
  it was first read there) dropped unflushed bytes of its partition's log on a node, and after the
  heal restarted that node a leader-epoch observation (faults/epochs.py) names its broker leader
  of the partition at a newer epoch than the newest known at the restart (an election made while
  it was down never served its short log: its restart fences it first). The row names the send
  (or the first read) and every such power loss and election (which one the other replicas
  truncated to only the ISR tells: the reference's metadata log has it).
Any other loss stays what durability.py found (lost-write, unseen: DUR-1 violations).

The ISR is not visible from outside, so the judgement is lenient in one way: a broker that
re-elected a power-cut replica while another ISR member still held the records (which Kafka never
does: a re-registered broker leaves every ISR it is not the last member of) is excused too. The
replica audit (replicas.py) and the reference's own metadata log are where that would show.

`explain` then keeps the lost-write/unseen rows of those values, and the rows that follow from
their offsets being handed out again (inconsistent-offsets, realtime-order, ...), as allowed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from spark_validation import retention
from spark_validation.acks import LEADER_EPOCHS, NS_PER_S, _View, _views
from spark_validation.anomalies import anomaly_row
from spark_validation.frames import read_filtered
from spark_validation.linearizability import NONLINEARIZABLE_CAUSES
from spark_validation.options import RunOptions

GUARANTEES: tuple[str, ...] = ()  # it only explains DUR-1 losses the partition checks found
NOT_APPLICABLE = "the run had no power nemesis (--nemesis power)"
ANOMALIES = ("power-loss-window",)
START_POWER = "start-power"  # faults/nemesis.py: its completion's value has dropped_files by node index
STOP_POWER = "stop-power"  # its completion's value lists the nodes restarted
# what follows from an offset handed out again; judged by the values or offsets the row names
REUSE_CONSEQUENCES = (*NONLINEARIZABLE_CAUSES, "nonlinearizable", "replica-read-mismatch", "nonmonotonic-send",
                      "send-skip", "poll-skip", "nonmonotonic-poll", "int-poll-skip", "int-nonmonotonic-poll")
REUSE_BY_OFFSET_ONLY = ("epoch-regression",)  # its values are leader epochs, not records
# a lost value's own rows: DUR-1's, DUR-2's in an acks=1 run (Kafka loses an acks=1 record the same
# way), RET-1's latest value of a key (lost with the power, not by the cleaner)
LOST_KINDS = ("lost-write", "unseen", "acks1-loss", "compaction-lost-latest")


@dataclass(frozen=True)
class PowerLoss:
    op: int
    time_ns: int
    node_index: int
    restarted_ns: int  # when the heal restarted the node (the end of the history if it never did)
    dropped: dict[tuple[str, int], int]  # (topic, partition) -> unflushed log bytes dropped


def check(parquet_path: Path, options: RunOptions) -> list[dict] | None:
    # the power nemesis's ops first (a few columns): a history without a power loss is not read further
    power = read_filtered(parquet_path, ["index", "type", "f", "time_ns", "extra"], lambda t: pc.and_(
        pc.is_in(t["f"], pa.array([START_POWER, STOP_POWER])), pc.not_equal(t["type"], "invoke")))
    losses = _power_losses(power.to_pylist() if power is not None else [])
    if not losses:
        return None
    # a power run's sends and polls, as Python rows: a fault run's history (minutes of ops), never a long one
    columns = ["index", "seq", "process", "type", "f", "time_ns", "invoke_time_ns", "mop_f", "topic", "partition",
               "value", "offset", "extra"]
    rows = read_filtered(parquet_path, columns, lambda t: pc.or_(
        pc.is_in(t["f"], pa.array([LEADER_EPOCHS, "assign"])), pc.is_in(t["mop_f"], pa.array(["send", "poll"])))
    ).to_pylist()
    # the final reads (faults/workload.py final_reads: a fresh process assigned from the beginning)
    # are what the run kept; a value read earlier at an offset handed out again is lost all the same
    final = {r["process"] for r in rows if r["f"] == "assign" and r["extra"]
             and json.loads(r["extra"]).get("seek-to-beginning")}
    polls = [r for r in rows if r["mop_f"] == "poll" and r["type"] == "ok" and r["topic"] is not None]
    kept_polls = [r for r in polls if not final or r["process"] in final]
    read = {(r["topic"], r["partition"], r["value"]) for r in kept_polls}
    kept = {(r["topic"], r["partition"], r["offset"]): r["value"] for r in kept_polls}

    # each offset's value seen last (acknowledged or read): where the final reads did not read an
    # offset (a compacted log), the later value there tells that it was handed out again
    last_seen: dict[tuple[str, int, int], tuple[int, int]] = {}
    for r in rows:
        if r["mop_f"] in ("send", "poll") and r["type"] == "ok" and r["offset"] is not None and r["topic"] is not None:
            where = (r["topic"], r["partition"], r["offset"])
            if r["time_ns"] >= last_seen.get(where, (-1, None))[0]:
                last_seen[where] = (r["time_ns"], r["value"])

    def reused(topic: str, partition: int, offset: int | None, value: int) -> bool:
        """With final reads: another value is at this offset in them, or, where they did not read it,
        was seen there last (a copy the producer sent again elsewhere does not bring back the offset
        that was handed out again)."""
        if not final or offset is None:
            return False
        where = (topic, partition, offset)
        return (kept[where] if where in kept else last_seen[where][1]) != value

    # (topic, partition, value, offset) -> (since when it was stored, op, process, how it is known)
    gone: dict[tuple, tuple[int, int, int, str]] = {}
    for r in rows:
        if r["mop_f"] == "send" and r["type"] == "ok" and (
                (r["topic"], r["partition"], r["value"]) not in read
                or reused(r["topic"], r["partition"], r["offset"], r["value"])):
            sent_ns = min(r["invoke_time_ns"] or r["time_ns"], r["time_ns"])
            gone[(r["topic"], r["partition"], r["value"], r["offset"])] = (sent_ns, r["index"], r["process"], "sent")
    for r in sorted(polls, key=lambda r: r["time_ns"]):  # a committed record read, then its offset reused
        key = (r["topic"], r["partition"], r["value"], r["offset"])
        if key not in gone and reused(*key[:2], r["offset"], r["value"]):
            gone[key] = (r["time_ns"], r["index"], r["process"], "read")
    if options.compacted:  # the cleaner removes a value once a later one of its key exists: RET-1 judges those
        newest: dict[tuple, int] = {}
        for r in kept_polls:  # superseded in what the run kept, not by a value lost too
            key = (r["topic"], r["partition"], r["value"] % retention.COMPACTION_KEYS)
            newest[key] = max(newest.get(key, -1), r["offset"])
        gone = {k: v for k, v in gone.items()  # (an offset that holds another value is never the cleaner's doing)
                if k[3] is None or reused(*k[:2], k[3], k[2])
                or newest.get((k[0], k[1], k[2] % retention.COMPACTION_KEYS), -1) <= k[3]}
    if not gone:
        return []
    observations = [r for r in rows if r["f"] == LEADER_EPOCHS and r["type"] == "ok" and r["seq"] == 0]
    views = _views(observations)
    broker_of = {}  # node index -> broker id, as the nodes answered
    for r in observations:
        extra = json.loads(r["extra"])
        if extra.get("node_id") is not None:
            broker_of[extra["node_index"]] = extra["node_id"]
    found = []
    for (topic, partition, value, offset), (since_ns, op, process, how) in gone.items():
        where = (topic, partition)
        candidates = [(election, loss) for loss in losses
                      if loss.time_ns > since_ns and loss.dropped.get(where) and loss.node_index in broker_of
                      for election in [_elected_after(views.get(where, []), loss, broker_of[loss.node_index])]
                      if election is not None]
        if candidates:  # which of them the others truncated to the ISR would tell; every one is named
            candidates.sort(key=lambda c: c[0].time_ns)
            cuts = "; ".join(
                f"the power loss of node {loss.node_index} at {loss.time_ns / NS_PER_S:.3f} s (op {loss.op}) dropped "
                f"{loss.dropped[where]} unflushed byte(s) of its log, and broker {election.leader} led it again at "
                f"epoch {election.epoch} from {election.time_ns / NS_PER_S:.3f} s (op {election.op})"
                for election, loss in candidates)
            found.append(anomaly_row(
                "power-loss-window",
                f"value {value} of {topic}-{partition} at offset {offset}, {how} at {since_ns / NS_PER_S:.3f} s "
                f"(op {op}); {cuts}: a replica back without its unflushed writes led it, as Kafka re-elects its last "
                f"in-sync replica",
                violation=False, topic=topic, partition=partition, process=process,
                ops=[op, *(o for election, loss in candidates for o in (loss.op, election.op))],
                values=[value], offsets=[offset]))
    return found


def _power_losses(completions: list[dict]) -> list[PowerLoss]:
    """Every node a power cut dropped log bytes on, with the partitions whose logs lost bytes and
    when the node was restarted."""
    losses = []
    completions = sorted(completions, key=lambda r: r["time_ns"])
    for at, r in enumerate(completions):
        value = (json.loads(r["extra"]) if r["extra"] else {}).get("value") or {}
        if r["f"] != START_POWER:
            continue
        for node, files in (value.get("dropped_files") or {}).items():
            restarted_ns = next((h["time_ns"] for h in completions[at + 1:] if h["f"] == STOP_POWER
                                 and int(node) in ((json.loads(h["extra"]) if h["extra"] else {}).get("value") or {})
                                 .get("restarted", ())), 1 << 62)
            dropped: dict[tuple[str, int], int] = {}
            for path, size in files.items():
                directory, _, name = path.strip("/").partition("/")
                topic, _, partition = directory.rpartition("-")
                if name.endswith(".log") and size > 0 and topic and partition.isdigit():
                    key = (topic, int(partition))
                    dropped[key] = dropped.get(key, 0) + size
            if dropped:
                losses.append(PowerLoss(r["index"], r["time_ns"], int(node), restarted_ns, dropped))
    return sorted(losses, key=lambda loss: loss.time_ns)


def _elected_after(views: list[_View], loss: PowerLoss, broker_id: int) -> _View | None:
    """The first observation after the cut node came back naming its broker leader at an epoch
    above the newest one any node had named by then: an election of the node with what its disk
    kept (one made while it was down, before its restart fenced it, never served its short log)."""
    newest = max((v.epoch for v in views if v.time_ns <= loss.restarted_ns), default=-1)
    return next((v for v in views if v.time_ns > loss.restarted_ns and v.leader == broker_id and v.epoch > newest),
                None)


def explain(rows: list[dict], windows: list[dict]) -> None:
    """Keep as allowed the lost-value rows (LOST_KINDS) whose every value a power loss explains (its
    power-loss-window row among windows), and the violations that follow from those values' offsets
    being handed out again: a row naming such a value, or (for the kinds that name offsets of a reused
    range) an offset at or below the highest offset a power-loss-window value had."""
    window = {(r["topic"], r["partition"], v) for r in windows if r["anomaly"] in ANOMALIES for v in r["values"]}
    if not window:
        return
    reused_max: dict[tuple[str, int], int] = {}
    for r in windows:
        if r["anomaly"] in ANOMALIES and r["offsets"] and r["offsets"][0] is not None:
            where = (r["topic"], r["partition"])
            reused_max[where] = max(reused_max.get(where, -1), r["offsets"][0])
    for r in rows:
        if not r["violation"]:
            continue
        where = (r["topic"], r["partition"])
        values = [(r["topic"], r["partition"], v) for v in r["values"] or ()]
        in_reused = any(o is not None and o <= reused_max.get(where, -1) for o in r["offsets"] or ())
        if r["anomaly"] in LOST_KINDS and values and all(v in window for v in values):
            r["violation"] = False
            r["detail"] = f"lost with its last in-sync replica's power (power-loss-window): {r['detail']}"
        elif ((r["anomaly"] in REUSE_CONSEQUENCES and (any(v in window for v in values) or in_reused))
              or (r["anomaly"] in REUSE_BY_OFFSET_ONLY and in_reused)):
            r["violation"], r["detail"] = False, f"follows from a power-loss-window loss (DUR-1): {r['detail']}"
