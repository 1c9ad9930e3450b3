"""acks=1 (DUR-2): which lost records fall in the documented loss window.

With acks=1 the leader acknowledges a record as soon as it has appended it; until a follower
has fetched it, the leader's log is its only copy, so a leader that then loses its leadership
(killed, paused, cut off, or deposed by an election the nemesis did not cause: a session that
expired under load) takes it along when it rejoins as a follower and truncates to its new
leader's log. Kafka documents this; DUR-1 promises no more than acks=all. So in an acks=1 run
(run.json acks "1") every acknowledged value that no poll ever returned is judged here by the
leadership changes of its partition, as the leader-epoch observer saw them (faults/epochs.py:
every node's Metadata answer every half second), and the per-partition lost-write/unseen rows,
and the rows a window loss explains, are kept only as allowed (explain):

- acks1-window-loss (allowed): the partition's leadership changed after the send: a leader epoch
  above the newest one known at the send was seen after it, and the leader of the ack did not
  itself answer as that epoch's leader more than FOLLOWER_WINDOW_S after the ack; or at the send a
  node still named itself leader at an older epoch than the newest (a deposed leader that had not
  heard of its successor, which answers acks=1 writes alone). The row names the ack, the
  leadership at the ack and the change (its observation op).
- acks1-loss (violation): any other loss: its partition's leadership did not change after the
  ack, or its leader was still leading (in its own answer) FOLLOWER_WINDOW_S after the ack.

The window: a follower in the ISR may lag up to replica.lag.time.max.ms (FOLLOWER_WINDOW_S)
without being dropped from it, so it may lack a record acked that long before its leader fell.
When the election itself is seen does not bound it: on a busy machine the controller's election
and the observer's next answer came 130 s after the kill of a leader that had acked a record
1 s before it. Sampling every half second, an election in the half second before an ack may be
seen only after it; that much the judgement is lenient.

When the leader appended the record is known only to lie between the send and the client's ack:
the delivery report can come seconds later (a fault run saw a leader paused at 38-52 s append a
record sent at 52.06 s, be deposed, and the report reach the client at 61.29 s, with a burst of
other acks from the new leader). So the leadership is the one known when the record was sent, a
change is one seen after the send, and the follower window runs from the ack the client got.

The report's one sentence on the difference is the definition of acks1-window-loss (anomalies.py).
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_validation import retention
from spark_validation.anomalies import anomaly_row
from spark_validation.frames import read_filtered
from spark_validation.options import RunOptions

GUARANTEES = ("DUR-2",)
DUR_1_UNCHECKED = "the producers used acks=1: DUR-1 is for acks=all, each loss is judged under DUR-2"
NOT_APPLICABLE = "the producers used acks=all: an acks=1 run checks it (kspec faults run --acks 1)"
ANOMALIES = ("acks1-window-loss", "acks1-loss")
FOLLOWER_WINDOW_S = 30.0   # Kafka's replica.lag.time.max.ms: how long a follower may lag and stay in sync
NS_PER_S = 1_000_000_000
LEADER_EPOCHS = "leader-epochs"  # faults/epochs.py


@dataclass(frozen=True)
class _View:
    """One node's answer for one partition: who leads at which epoch."""
    time_ns: int
    op: int
    node_index: int
    node_id: int | None
    leader: int
    epoch: int


def check(parquet_path: Path, options: RunOptions) -> list[dict] | None:
    if options.acks != "1":
        return None
    lost = _lost(parquet_path, options.compacted).to_pylist()
    if not lost:
        return []
    epochs = read_filtered(parquet_path, ["index", "seq", "type", "f", "time_ns", "extra"], lambda t: pc.and_(
        pc.and_(pc.equal(t["f"], LEADER_EPOCHS), pc.equal(t["type"], "ok")), pc.equal(t["seq"], 0)))
    views = _views(epochs.to_pylist())
    found = []
    for r in lost:
        where = f"value {r['value']} of {r['topic']}-{r['partition']} (op {r['index']}, offset {r['offset']})"
        sent_ns = min(r["invoke_time_ns"] or r["time_ns"], r["time_ns"])
        at = f"sent at {sent_ns / NS_PER_S:.3f} s, acked at {r['time_ns'] / NS_PER_S:.3f} s"
        partition_views = views.get((r["topic"], r["partition"]), [])
        leading = _leading(partition_views, sent_ns)
        change = _change_after(partition_views, sent_ns, r["time_ns"], leading)
        if change is not None:
            found.append(anomaly_row(
                "acks1-window-loss", f"{where} {at}, {_describe(leading)}; {change[1]}: lost in the acks=1 window",
                violation=False, topic=r["topic"], partition=r["partition"], process=r["process"],
                ops=[r["index"], change[0]], values=[r["value"]], offsets=[r["offset"]]))
        else:
            found.append(anomaly_row(
                "acks1-loss", f"{where} {at}, {_describe(leading)}; lost with no leadership change after its ack "
                f"that its leader had not outlasted by {FOLLOWER_WINDOW_S:.0f} s", topic=r["topic"], partition=r["partition"],
                process=r["process"], ops=[r["index"]], values=[r["value"]], offsets=[r["offset"]]))
    return found


def _lost(parquet_path: Path, compacted: bool) -> pa.Table:
    """The acknowledged sends whose value no ok poll of their partition returned, in history order
    (Arrow joins: the driver holds the sends' and polls' few columns, not a Python row each); in a
    compacted run only those no read value of the same Kafka key at a higher offset superseded."""
    columns = ["index", "seq", "process", "type", "time_ns", "invoke_time_ns", "mop_f", "topic", "partition", "value",
               "offset"]
    rows = read_filtered(parquet_path, columns, lambda t: pc.and_(
        pc.equal(t["type"], "ok"), pc.is_in(t["mop_f"], pa.array(["send", "poll"]))))
    rows = rows.append_column("order", pa.array(np.arange(rows.num_rows)))
    polls = rows.filter(pc.and_(pc.equal(rows["mop_f"], "poll"), pc.is_valid(rows["topic"])))
    tp_value = ["topic", "partition", "value"]
    read = polls.select(tp_value).group_by(tp_value).aggregate([])
    lost = rows.filter(pc.equal(rows["mop_f"], "send")).join(read, tp_value, join_type="left anti")
    if compacted:  # the cleaner removes a value once a later one of its key exists: RET-1 judges those
        def with_key(table: pa.Table) -> pa.Table:
            return table.append_column("key", pc.modulo(table["value"], retention.COMPACTION_KEYS))
        key = ["topic", "partition", "key"]
        newest = with_key(polls).group_by(key).aggregate([("offset", "max")])
        lost = with_key(lost).join(newest, key, join_type="left outer")
        lost = lost.filter(pc.or_kleene(pc.is_null(lost["offset"]), pc.less_equal(
            pc.fill_null(lost["offset_max"], -1), lost["offset"])))
    return lost.sort_by("order")


def _views(observations: list[dict]) -> dict[tuple[str, int], list[_View]]:
    """Every node's answers, by partition, in time order."""
    views: dict[tuple[str, int], list[_View]] = defaultdict(list)
    for r in sorted(observations, key=lambda o: o["time_ns"]):
        extra = json.loads(r["extra"])
        for topic, partition, leader, epoch in extra["leaders"]:
            views[(topic, partition)].append(_View(r["time_ns"], r["index"], extra["node_index"],
                                                   extra.get("node_id"), leader, epoch))
    return views


def _leading(views: list[_View], time_ns: int) -> _View | None:
    """The newest leadership known at time_ns: the highest epoch any node had named by then."""
    return max((v for v in views if v.time_ns <= time_ns), key=lambda v: (v.epoch, v.time_ns), default=None)


def _change_after(views: list[_View], sent_ns: int, acked_ns: int, leading: _View | None) -> tuple[int, str] | None:
    """(observation op, what it shows) of the leadership change that explains a loss sent at
    sent_ns and acknowledged to the client at acked_ns, or None: see the module docstring."""
    newest_epoch = leading.epoch if leading is not None else -1
    last_by_node: dict[int, _View] = {}
    for v in views:
        if v.time_ns > sent_ns:
            break
        last_by_node[v.node_index] = v
    for v in last_by_node.values():  # a deposed leader, still leading in its own view
        if v.node_id is not None and v.leader == v.node_id and v.epoch < newest_epoch:
            return v.op, (f"broker {v.leader} still named itself leader at epoch {v.epoch} at "
                          f"{v.time_ns / NS_PER_S:.3f} s (op {v.op}), deposed by broker {leading.leader} at epoch "
                          f"{newest_epoch}")
    change = next((v for v in views if v.time_ns > sent_ns and v.epoch > newest_epoch), None)
    if change is None or leading is None:
        return None
    # a leader that itself still answered as leader of that epoch FOLLOWER_WINDOW_S after the ack had
    # in-sync followers copy the record by then: its later fall does not explain the loss
    window_end_ns = acked_ns + int(FOLLOWER_WINDOW_S * NS_PER_S)
    if any(window_end_ns < v.time_ns < change.time_ns and v.node_id == v.leader == leading.leader
           and v.epoch == newest_epoch for v in views):
        return None
    return change.op, (f"broker {change.leader} led at epoch {change.epoch} from {change.time_ns / NS_PER_S:.3f} s "
                       f"(op {change.op}, node {change.node_index}'s view)")


def _describe(leading: _View | None) -> str:
    if leading is None:
        return "its leader unknown"
    return f"broker {leading.leader} leading at epoch {leading.epoch}"
def explain(rows: list[dict], windows: list[dict]) -> None:
    """In an acks=1 run: lost-write and unseen judge DUR-1, which holds only for acks=all, so they
    stay as allowed (this check judges each loss); and a violation whose values include a value lost
    in the window (its acks1-window-loss row among windows; its offset then holds a later value:
    inconsistent-offsets, realtime-order, nonlinearizable) follows from that loss, so it is allowed
    too, its detail saying so."""
    window = {(r["topic"], r["partition"], v) for r in windows if r["anomaly"] == "acks1-window-loss"
              for v in r["values"]}
    for r in rows:
        if r["anomaly"] in ("lost-write", "unseen"):
            r["violation"], r["detail"] = False, f"acks=1, judged under DUR-2: {r['detail']}"
        elif r["violation"] and r["anomaly"] not in ANOMALIES and any(
                (r["topic"], r["partition"], v) in window for v in r["values"] or ()):
            r["violation"], r["detail"] = False, f"follows from an acks=1 window loss (DUR-2): {r['detail']}"
