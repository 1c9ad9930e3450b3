"""Acceptance: the Spark checker finds a historical bug in a real fault run, and nothing without it.

A 3-node reference cluster (faults/targets.py) runs the recorded Jepsen-style workload
(faults/workload.py) while a scripted nemesis makes kspec.bug.ack.before.isr bite every
time: it pauses the followers of one partition (SIGSTOP: alive, not fetching), sends a
record there through a recorded client, kills the leader once that send is acked (or after
ACK_WAIT_S when it is not), resumes the followers and restarts the old leader. With the bug
the leader acked records only it had, so the follower elected next never has them (DUR-1);
without it nothing is acked while the followers are paused. After the final reads the
history goes through every check, as `kspec check` runs them.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from faults import net
from faults.nemesis import LEADER_KEY
from faults.proxy import ToxiproxyClient, ToxiproxyServer
from faults.recorder import Recorder
from faults.run import choose_mode
from faults.targets import Target, reference_target
from faults.workload import Sender, Workload, WorkloadOptions
from spark_validation.checker import CheckResult, run_checks
from spark_validation.options import RunOptions
from spec.history import NEMESIS_PROCESS, Record, read_history, topic_partition

NODES = 3
# Each consumer keeps its first assignment: a re-assign that keeps a partition before anything new
# was read there restarts it at the earliest offset (position() is unknown until a read), which
# the checker rightly reports as nonmonotonic-poll; the loss is this test's subject.
WORKLOAD = WorkloadOptions(concurrency=4, rate_hz=100, replication_factor=3, assign_p=0.0)
PROBE = WorkloadOptions(send_timeout_s=10.0)
OK_BEFORE_FAULT_MIN = 40      # the workload is really running before the fault
PROBE_RECORDS = 3
SERVE_S = 0.05
ACK_WAIT_S = 1.5              # the probe waits this long for its ack: the pause stays under the broker session timeout
# A follower's fetch parked at the leader when it was paused would carry the probe's records into
# its socket buffer, to be appended on resume: the probe is sent once every parked fetch has expired.
REPLICA_FETCH_WAIT_MAX_MS = 100
PARKED_FETCH_EXPIRY_S = 3 * REPLICA_FETCH_WAIT_MAX_MS / 1000
ATTEMPTS_MAX = 3              # scripted faults per run until the probe's send is acked (with the bug)
WAIT_S = 60.0                 # bound on every condition polled (a loaded 2-core machine)
FINAL_READ_TIMEOUT_S = 60.0


@dataclass
class Window:
    """One scripted fault: when it paused the followers and killed the leader, the values the
    probe sent meanwhile and the partitions the killed node led."""
    pause_ns: int
    kill_ns: int
    probe_values: set[int]
    led: set[tuple[str, int]]


def wait_until(condition, what: str, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s:.0f} s: {what}")


def elected(target: Target, instead_of: int | None = None) -> int:
    """The node that leads LEADER_KEY's partition, once there is one (other than instead_of)."""
    found: list[int] = []
    wait_until(lambda: found.append(target.leader_of(*topic_partition(LEADER_KEY))) or found[-1] not in (None, instead_of),
               f"a leader of {topic_partition(LEADER_KEY)} other than node {instead_of}")
    return found[-1]


@contextlib.contextmanager
def reference_cluster(run_dir: Path, overrides: dict[str, str]):
    """A started reference target in namespaces where they can be made, else behind the proxy layer."""
    mode, _ = choose_mode("auto", ())
    with contextlib.ExitStack() as cleanup:
        network = toxiproxy = None
        if mode == "netns":
            network = net.Network(f"kc{time.monotonic_ns() % 100000}", NODES)
            cleanup.callback(network.destroy)
            network.create()
        else:
            server = ToxiproxyServer().start()
            cleanup.callback(server.stop)
            toxiproxy = ToxiproxyClient(server.url)
        target = reference_target(NODES, run_dir, mode, network, toxiproxy, overrides)
        cleanup.callback(target.stop)
        target.start()
        target.wait_until_serving()
        yield target


def nemesis_op(recorder: Recorder, f: str, value: dict) -> int:
    """Record one scripted fault as the nemesis does; returns its time."""
    invocation = recorder.invoke(NEMESIS_PROCESS, f)
    return recorder.complete(invocation, "info", extra={"value": value}).time_ns


def pause_send_kill(target: Target, recorder: Recorder, workload: Workload, probe: Sender) -> tuple[Window, bool]:
    """One scripted fault on the partition of LEADER_KEY (see the module docstring), and whether
    the probe's send was acked before the kill."""
    topic, partition = topic_partition(LEADER_KEY)
    leader = elected(target)
    led = {topic_partition(key) for key in range(WORKLOAD.key_count) if target.leader_of(*topic_partition(key)) == leader}
    followers = [n for n in range(NODES) if n != leader]
    for node in followers:
        target.pause(node)
    pause_ns = nemesis_op(recorder, "start-pause", {"variant": "followers", "nodes": followers})
    time.sleep(PARKED_FETCH_EXPIRY_S)
    records = [Record(topic, partition, LEADER_KEY, next(workload.values[LEADER_KEY])) for _ in range(PROBE_RECORDS)]
    probe.send(records)
    served_until(probe, time.monotonic() + ACK_WAIT_S)
    acked = not probe.in_flight
    target.kill(leader)
    kill_ns = nemesis_op(recorder, "start-kill", {"variant": "leader", "node": leader})
    for node in followers:
        target.resume(node)
    nemesis_op(recorder, "stop-pause", {"resumed": followers})
    elected(target, instead_of=leader)
    target.restart(leader)
    nemesis_op(recorder, "stop-kill", {"restarted": [leader]})
    return Window(pause_ns, kill_ns, {r.value for r in records}, led), acked


def served_until(probe: Sender, deadline_s: float) -> None:
    """Run the probe's delivery callbacks until its send completed or the deadline passed."""
    while probe.in_flight and time.monotonic() < deadline_s:
        probe.serve(SERVE_S)


def fault_run(run_dir: Path, ack_before_isr: bool) -> list[Window]:
    """A recorded workload on a cluster with or without the bug, under the scripted fault; the
    windows of every attempt (with the bug: until a probe send was acked while its followers
    were paused)."""
    windows: list[Window] = []
    overrides = {"kspec.bug.ack.before.isr": str(ack_before_isr).lower(),
                 "replica.fetch.wait.max.ms": str(REPLICA_FETCH_WAIT_MAX_MS)}
    with reference_cluster(run_dir, overrides) as target:
        recorder = Recorder(run_dir)
        workload = Workload(target.bootstrap, recorder, WORKLOAD)
        workload.create_topics()
        probe = Sender(target.bootstrap, PROBE, recorder, workload.next_process)
        probe.send([Record(*topic_partition(LEADER_KEY), LEADER_KEY, next(workload.values[LEADER_KEY]))])
        served_until(probe, time.monotonic() + WAIT_S)
        workload.start()
        try:
            wait_until(lambda: recorder.completions["ok"] >= OK_BEFORE_FAULT_MIN, "the workload runs")
            for _ in range(ATTEMPTS_MAX if ack_before_isr else 1):
                window, acked = pause_send_kill(target, recorder, workload, probe)
                windows.append(window)
                if acked:
                    break
            elected(target)
            served_until(probe, time.monotonic() + WAIT_S)
        finally:
            workload.stop()
            probe.close(PROBE.send_timeout_s)
        assert workload.final_reads(FINAL_READ_TIMEOUT_S), "the final reads reach every high watermark"
        recorder.close()
    # The bug's loss is also the idempotent producer's: its acked sequence numbers vanished with the old leader.
    assert all("OUT_OF_ORDER_SEQUENCE_NUMBER" in failure for failure in workload.failures) and (
        ack_before_isr or not workload.failures), workload.failures
    return windows


@dataclass
class CheckedRun:
    windows: list[Window]
    history: pa.Table
    result: CheckResult

    def acked_before_kill(self, window: Window) -> set[tuple[str, int, int]]:
        """(topic, partition, value) of the probe's records in window acked before the leader was killed."""
        h = self.history
        topic, partition = topic_partition(LEADER_KEY)
        rows = h.filter(pc.and_(pc.and_(pc.equal(h["type"], "ok"), pc.equal(h["mop_f"], "send")),
                                pc.and_(pc.equal(h["topic"], topic), pc.equal(h["partition"], partition))))
        rows = rows.filter(pc.and_(pc.is_in(rows["value"], pa.array(sorted(window.probe_values), pa.int64())),
                                   pc.less_equal(rows["time_ns"], window.kill_ns)))
        return {(r["topic"], r["partition"], r["value"]) for r in rows.to_pylist()}

    def invoked_and_completed_ns(self, op_indexes: list[int]) -> list[tuple[int, int]]:
        h = self.history
        done = h.filter(pc.and_(pc.is_in(h["index"], pa.array(op_indexes, pa.int64())), pc.equal(h["seq"], 0)))
        return list(zip(done["invoke_time_ns"].to_pylist(), done["time_ns"].to_pylist()))


def checked_run(spark, run_dir: Path, ack_before_isr: bool) -> CheckedRun:
    windows = fault_run(run_dir, ack_before_isr)
    history = read_history(run_dir / "history.parquet")
    acked_sends = pc.sum(pc.and_(pc.equal(history["type"], "ok"), pc.equal(history["mop_f"], "send"))).as_py()
    assert acked_sends >= OK_BEFORE_FAULT_MIN // 2, "a real workload ran"
    return CheckedRun(windows, history, run_checks(spark, run_dir / "history.parquet", RunOptions()))


@pytest.fixture(scope="module")
def bug_on(spark, tmp_path_factory) -> CheckedRun:
    return checked_run(spark, tmp_path_factory.mktemp("bug-on"), True)


@pytest.fixture(scope="module")
def bug_off(spark, tmp_path_factory) -> CheckedRun:
    return checked_run(spark, tmp_path_factory.mktemp("bug-off"), False)


@pytest.mark.timeout(600)
def test_with_ack_before_isr_the_checker_names_every_acked_record_the_killed_leader_took_along(bug_on):
    window = bug_on.windows[-1]
    probe_lost = bug_on.acked_before_kill(window)
    assert probe_lost, f"a probe send was acked while its followers were paused, in {len(bug_on.windows)} attempt(s)"
    verdict = bug_on.result.verdict
    assert not bug_on.result.valid and verdict["guarantees"]["DUR-1"]["status"] == "violated", verdict
    rows = bug_on.result.anomalies.to_pylist()
    unseen = {(r["topic"], r["partition"], v) for r in rows if r["anomaly"] == "unseen" for v in r["values"]}
    assert probe_lost <= unseen, f"the checker names the probe's lost values: {probe_lost - unseen}"
    lost_ops = [op for r in rows if r["anomaly"] in ("unseen", "lost-write") for op in r["ops"]]
    # a lost record reached the old leader before it was killed and was acked after its followers paused
    # (an op with records for other partitions may complete much later)
    assert all(any(invoked_ns <= w.kill_ns and completed_ns >= w.pause_ns for w in bug_on.windows)
               for invoked_ns, completed_ns in bug_on.invoked_and_completed_ns(lost_ops)), \
        "every lost record was in flight during a scripted fault"
    # the loss has consequences (reused offsets re-read, producer retries stored twice), all on those partitions
    led = set().union(*(w.led for w in bug_on.windows))
    elsewhere = [r for r in rows if r["violation"] and r["topic"] is not None and (r["topic"], r["partition"]) not in led]
    assert elsewhere == [], f"violations only on partitions the killed leaders led ({sorted(led)}): {elsewhere}"


@pytest.mark.timeout(600)
def test_without_the_bug_the_same_fault_loses_nothing_and_the_history_is_valid(bug_off):
    assert bug_off.acked_before_kill(bug_off.windows[0]) == set(), "nothing is acked while the followers are paused"
    assert bug_off.result.valid and bug_off.result.verdict["violations"] == {}, bug_off.result.verdict["anomalies"]
