"""The mirror lane of a lanes run (`kspec faults run --workload all`, faults/lanes.py): one real
`kspec mirror` process mirroring a topic of the lanes cluster into the same cluster, so that the
run checks MIR-1..3 under the run's own nemesis.

A mirror needs no second cluster: DefaultReplicationPolicy names the copy of topic T from the
source alias A "A.T", so a flow A->B on one cluster copies T beside itself (Kafka's MM2
integration tests and the conformance suite's MIR tests mirror a broker to itself the same
way). The lane is faults/mirror_workload.py's MirrorWorkload as `--workload mirror` runs it
(faults/mirror_run.py), with both bootstrap lists the lanes cluster's:

- numbered records sent to the lane's topic (MirrorWorkloadOptions.topic) at the lane's share
  of --rate;
- a consumer group reading it on the source side and committing, so the mirror emits
  checkpoints (MIR-3);
- exactly.once.support=enabled (MIR-2: no record copied twice);
- the mirror killed with -9 about every --interval seconds once it copies, and started again.

At the end (after the run's heal) the lane waits for the mirror to cover every acked send and
checkpoint the group's last commits, then records both sides (mirror/history.py) into
RUN/lanes/mirror/, where `kspec check RUN` checks it with spark_validation/mirror.py
(spark_validation/mirror_lane.py turns its verdict into a lane's). The lane's history.parquet
holds only the nemesis's flips (the lanes' FanOutRecorder writes them into every lane), so the
report draws the faults over this lane too.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from faults.mirror_workload import COPYING_TIMEOUT_S, MirrorWorkload, MirrorWorkloadOptions
from confluent_kafka import KafkaException

from faults.recorder import Recorder
from mirror.clients import MirrorError
from mirror.history import MIRROR_FILE

START_ATTEMPTS = 3
LANE_TOPIC = "mirrored"   # the queue workloads' topics are t0, t1, ...: no clash
# "heartbeats" would be copied to primary.heartbeats, that again to primary.primary.heartbeats, ...:
# on one cluster the flow copies only the lane's topic (as the conformance suite's self-mirror does)
SELF_MIRROR_PROPERTIES = (("heartbeats.replication.enabled", "false"),)
# the mirror's clients connect PLAINTEXT (mirror/config.py takes no client properties from a run)
PLAINTEXT_ONLY = "the mirror lane's clients connect PLAINTEXT: a --secure or --command-config run skips it"


class MirrorLane:
    """The mirror lane as faults/lanes.py's SideLanes drives a side lane: start, stop_invoking
    (before the heal: only stops sending and killing), stop (after the heal: the sender's last
    records delivered, a killed mirror started again), finish (settle, record both sides)."""

    def __init__(self, lane, target, out_dir: Path, seed: int, kill_interval_s: float) -> None:
        self.lane, self.out_dir = lane, Path(out_dir)
        self.recorder = Recorder(self.out_dir)  # the nemesis's flips, for the report's fault bands
        options = MirrorWorkloadOptions(topic=LANE_TOPIC, records_per_s=lane.workload.rate_hz,
                                        kill_interval_s=kill_interval_s, exactly_once=True,
                                        replication_factor=lane.workload.replication_factor,
                                        properties=SELF_MIRROR_PROPERTIES)
        self.workload = _Driver(MirrorWorkload(target.bootstrap, target.bootstrap, self.out_dir, options, seed=seed))
        self.result: dict = {}
        self.notes: list[str] = []  # how the mirror fared (slow to start, behind at the end): not failures

    def start(self) -> None:
        """The mirror started and copying (or the wait given up after COPYING_TIMEOUT_S: then
        the lane runs on, and a mirror that never copies shows as records lost, MIR-1). The
        lane's topic is created first; a cluster that refuses START_ATTEMPTS times (a broker
        transport failure on a loaded machine) skips the lane with the reason, as a Connect
        pipeline that does not start skips its lane."""
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self.workload.mirror.start()  # raises before anything is started: safe to call again
                break
            except KafkaException as e:
                if attempt == START_ATTEMPTS:
                    self.result = {"skipped": f"the mirror lane's topic was not created: {e.args[0].str()}"}
                    self.workload.skipped = True
                    return
        if not self.workload.mirror.wait_copying(COPYING_TIMEOUT_S):
            self.notes.append(f"the mirror did not copy within {COPYING_TIMEOUT_S:.0f} s of its start")

    def finish(self, final_read_timeout_s: float, data_dirs: dict | None) -> None:
        """Settle and record both sides. A side that cannot be read to its end (MirrorError: the
        cluster still not answering) leaves the lane without a mirror history: the lane is then
        skipped, with that reason, rather than the whole run failing."""
        mirror = self.workload.mirror
        if self.workload.skipped:
            self.recorder.close()
            return
        try:
            mirror.close(final_read_timeout_s)
        except MirrorError as e:
            mirror.detach_log()
            self.result = {"skipped": f"the mirror's history could not be recorded: {e}"}
            if mirror.mirror.poll() is None:
                mirror.mirror.kill()
            (self.out_dir / MIRROR_FILE).unlink(missing_ok=True)  # no partial history for `kspec check`
            self.recorder.close()
            return
        self.recorder.close()
        if not mirror.caught_up:  # its tail is judged pending, not lost (spark_validation/mirror.py)
            self.notes.append(f"the mirror's progress did not cover every acked send within "
                              f"{final_read_timeout_s:.0f} s")
        # both sides were read to their end (a MirrorError above otherwise): the final reads are
        # complete even when the mirror was behind; how far it got is in its recorded progress
        self.result = {"completions": mirror.completions(), "final_reads_complete": True,
                       "mirror_caught_up": mirror.caught_up, "checkpoints_caught_up": mirror.checkpointed,
                       "mirror_kills": len(mirror.kills), "notes": self.notes,
                       "workload_failures": self.workload.failures}
        (self.out_dir / "results.json").write_text(json.dumps(
            {"lane": self.lane.name, "mirror": dataclasses.asdict(mirror.options), **self.result},
            indent=2, sort_keys=True))

    def abort(self) -> None:
        """After an error: nothing more sent, the mirror killed."""
        mirror = self.workload.mirror
        mirror.stopping.set()
        if not self.workload.skipped and mirror.mirror is not None and mirror.mirror.poll() is None:
            mirror.mirror.kill()
        mirror.detach_log()


class _Driver:
    """What SideLanes calls on a lane's workload, for the mirror workload."""

    def __init__(self, mirror: MirrorWorkload) -> None:
        self.mirror = mirror
        self.failures: list[str] = []
        self.skipped = False  # the mirror did not start: nothing to stop

    def create_topics(self) -> None:
        """The mirror workload creates its topic as it starts."""

    def stop_invoking(self) -> None:
        # only the flag: joining the sender waits for its last deliveries, which must not hold up the heal
        self.mirror.stopping.set()

    def stop(self) -> None:
        if not self.skipped:
            self.mirror.stop_invoking()

    def close(self) -> None:
        """The mirror runs on until finish() has seen it catch up."""
