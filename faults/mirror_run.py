"""`kspec faults run --workload mirror`: two reference clusters and `kspec mirror` between them,
under faults across the clusters.

    source cluster (--nodes nodes) ──link── mirror ── target cluster (--nodes nodes)

Every node and the mirror get a network namespace of their own on one bridge (faults/net.py):
namespaces 0..N-1 are the source cluster, N..2N-1 the target cluster, 2N the mirror, which
lives beside the target as MirrorMaker 2 is deployed (it reads across the link and writes
locally). The harness and its clients stay on the host and reach every node.

Faults (--nemesis, each flipped on Jepsen's schedule, faults/nemesis.py's Schedule):
- partition: the link between the clusters is cut: the source's nodes drop every packet from
  the target's nodes and the mirror, and those drop the source's (iptables DROP, as a
  partition between nodes); the clients on the host still reach both sides.
- kill: kill -9 the leader of a mirrored partition on one side (source or target, at random),
  restarted at the package's stop.
- pause: SIGSTOP the leader of a mirrored partition on one side, SIGCONT at the stop.
- the mirror itself is killed with -9 about every --interval seconds once it copies, and started again
  (faults/mirror_workload.py), whatever --nemesis says.

The workload (faults/mirror_workload.py) sends numbered records to the source topic, reads it
as a consumer group that commits, samples the mirror's progress, and at the end (faults healed,
the mirror caught up with every acked send, and then, time allowing, checkpointed the group's
last commits) records both clusters' records and the group's checkpoints into the results
folder, so `kspec check OUT` reports MIR-1, MIR-2 (with `--mirror-set exactly.once.support=enabled`)
and MIR-3 (spark_validation/mirror.py).

Network namespaces are needed (root, `ip`, `iptables`): the proxy layer cuts a node's client
links, and the mirror is a client of both clusters, so it cannot cut one cluster off from the
other while the harness still reads both.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import time
from pathlib import Path
from typing import Callable

from faults import net
from faults.mirror_workload import COPYING_TIMEOUT_S, SOURCE_ALIAS, MirrorWorkload, MirrorWorkloadOptions, mm2_settings
from faults.nemesis import Schedule
from faults.targets import NETNS_PORT, ReferenceNode, Target, reference_overrides
from mirror.config import ConfigError, parse

PACKAGES = ("partition", "kill", "pause")
SIDES = ("source", "target")
TICK_S = 0.2


def run_mirror(options, out_dir: Path, progress: Callable = lambda status: None) -> object:
    """One mirror fault run (options: faults.run.RunOptions); returns faults.run.RunResult."""
    from faults.run import CLIENTS_LOG_FILE, TIMELINE_FILE, RunError, RunResult, Status, _log_clients_to

    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise RunError(f"{out_dir} is not empty; give a new folder for the results")
    if options.target != "reference" or options.secure or options.client_properties:
        raise RunError("--workload mirror runs two reference clusters: no --target, --secure or --command-config")
    unknown = sorted(set(options.nemeses) - set(PACKAGES))
    if unknown or options.nemesis_variants:
        raise RunError(f"--workload mirror takes the nemeses {', '.join(PACKAGES)} (the link between the "
                       f"clusters, leaders on either side), not {', '.join(unknown) or 'variants'}")
    if options.network == "proxy":
        raise RunError("--workload mirror cuts the link between its clusters with network namespaces: "
                       "drop --network proxy")
    try:
        net.check_capability()
    except net.NetworkUnavailable as e:
        raise RunError(f"--workload mirror needs network namespaces: {e}") from None
    nodes = options.nodes
    workload_options = MirrorWorkloadOptions(
        records_per_s=options.workload.rate_hz, kill_interval_s=options.interval_s,
        exactly_once=options.mirror_properties.get("exactly.once.support") in ("enabled", "required"),
        replication_factor=min(nodes, 3), properties=tuple(options.mirror_properties.items()))
    try:  # the mirror reads its file as this does: a bad --mirror-set is one line, before anything starts
        parse(mm2_settings(workload_options, "source:9092", "target:9092"))
    except ConfigError as e:
        raise RunError(f"--mirror-set: {e}") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(options.seed)
    with contextlib.ExitStack() as cleanup:
        _log_clients_to(out_dir / CLIENTS_LOG_FILE, cleanup)
        network = net.Network(f"ksm{os.getpid() % 100000}", 2 * nodes + 1)
        cleanup.callback(network.destroy)
        network.create()
        clusters = {side: _cluster(side, index * nodes, nodes, out_dir / side, network, options.broker_properties)
                    for index, side in enumerate(SIDES)}
        for cluster in clusters.values():
            cleanup.callback(cluster.stop)
            cluster.start()
        for cluster in clusters.values():
            cluster.wait_until_serving()
        _record_processes(network, clusters)
        workload = MirrorWorkload(clusters["source"].bootstrap, clusters["target"].bootstrap, out_dir,
                                  workload_options, seed=options.seed,
                                  wrap=lambda command: network.wrap(2 * nodes, command))
        nemesis = LinkNemesis(network, clusters, workload.options.topic, out_dir / TIMELINE_FILE, rng)
        cleanup.callback(nemesis.close)
        schedule = Schedule(tuple(options.nemeses), options.interval_s, rng) if options.nemeses else None
        cleanup.callback(workload.detach_log)  # also when the run ends in an error
        workload.start()
        cleanup.callback(lambda: workload.mirror and workload.mirror.poll() is None and workload.mirror.kill())
        cleanup.callback(workload.stopping.set)  # its threads end however the run ends
        progress(Status("mirror start", 0.0, options.time_limit_s, 0.0, workload.completions(), {}))
        if not workload.wait_copying():  # the main phase (and its clock) starts once the mirror copies
            raise RunError(f"the mirror did not copy within {COPYING_TIMEOUT_S:.0f} s; see {out_dir / 'mirror.log'}")
        started_s, sent_before = time.monotonic(), _sent(workload)
        try:
            while (elapsed_s := time.monotonic() - started_s) < options.time_limit_s:
                for action, package in schedule.due(elapsed_s) if schedule else ():
                    nemesis.apply(action, package)
                    _record_processes(network, clusters)
                progress(Status("main", elapsed_s, options.time_limit_s,
                                (_sent(workload) - sent_before) / max(elapsed_s, 1e-3),
                                workload.completions(), dict(nemesis.active)))
                time.sleep(TICK_S)
            main_ops_per_s = (_sent(workload) - sent_before) / (time.monotonic() - started_s)
        finally:
            # Healed first: sends in flight to a killed or cut-off node complete only once it is back.
            for action, package in schedule.heal_all() if schedule else ():
                nemesis.apply(action, package)
            workload.stop_invoking()
        _record_processes(network, clusters)
        progress(Status("final reads", options.time_limit_s, options.time_limit_s, 0.0, workload.completions(), {}))
        workload.close(options.final_read_timeout_s + options.quiet_s)
        result = RunResult(out_dir, "netns", "the link between the clusters is cut with network namespaces",
                           workload.completions(), main_ops_per_s, workload.caught_up, None,
                           [] if workload.caught_up else
                           [f"the mirror's progress did not cover every acked send within "
                            f"{options.final_read_timeout_s + options.quiet_s:.0f} s"])
        _write_results(out_dir, options, result, workload)
    return result


def _cluster(side: str, first: int, nodes: int, run_dir: Path, network: net.Network,
             overrides: dict[str, str]) -> Target:
    """A reference cluster on namespaces first..first+nodes-1, as faults/targets.py's
    reference_target makes one on namespaces 0..nodes-1."""
    run_dir.mkdir(parents=True, exist_ok=True)
    hosts = [network.node_address(first + i) for i in range(nodes)]
    cluster = reference_overrides(nodes, ",".join(f"{i + 1}@{host}:{NETNS_PORT}" for i, host in enumerate(hosts)))
    members = [ReferenceNode(str(run_dir / f"node-{i}"), listen=f"{host}:{NETNS_PORT}",
                             node_id=i + 1 if nodes > 1 else 0,
                             overrides={"advertised.host.name": host, **cluster, **overrides},
                             stderr_path=str(run_dir / f"node-{i}.log"),
                             wrap=lambda command, n=first + i: network.wrap(n, command))
               for i, host in enumerate(hosts)]
    return Target(side, members, "netns", network)


def _record_processes(network: net.Network, clusters: dict[str, Target]) -> None:
    """The nodes' pids in the network's state file, for `kspec faults clean` after a crash."""
    net.record_processes(network.state_path, [n.pid for c in clusters.values() for n in c.nodes if n.running])


class LinkNemesis:
    """Carries out the mirror run's flips and writes each to the timeline (nemesis.jsonl)."""

    def __init__(self, network: net.Network, clusters: dict[str, Target], topic: str, timeline_path: Path,
                 rng: random.Random) -> None:
        self.network, self.clusters, self.rng = network, clusters, rng
        self.topics = {"source": topic, "target": f"{SOURCE_ALIAS}.{topic}"}
        self.timeline = open(timeline_path, "a", buffering=1)
        self.started_ns = time.monotonic_ns()
        self.killed: list[tuple[str, int]] = []
        self.paused: list[tuple[str, int]] = []
        self.active: dict[str, dict] = {}

    def apply(self, action: str, package: str) -> dict:
        assert action in ("start", "stop") and package in PACKAGES
        try:
            value = getattr(self, f"_{action}_{package}")()
        except Exception as e:  # a fault that could not be applied is recorded, not fatal
            value = {"error": f"{type(e).__name__}: {e}"}
        if action == "start":
            self.active[package] = value
        else:
            self.active.pop(package, None)
        self.timeline.write(json.dumps({"time_ns": time.monotonic_ns() - self.started_ns, "action": action,
                                        "package": package, "value": value}) + "\n")
        return value

    def _start_partition(self) -> dict:
        """Cut the link: the source's namespaces and the target side's (its nodes, the mirror) drop each other."""
        nodes = len(self.clusters["source"].nodes)
        source, target_side = set(range(nodes)), set(range(nodes, 2 * nodes + 1))
        self.network.partition({**{n: target_side for n in source}, **{n: source for n in target_side}})
        return {"variant": "link", "source_nodes": sorted(source), "target_side": sorted(target_side)}

    def _stop_partition(self) -> dict:
        self.network.heal()
        return {}

    def _leader(self) -> tuple[str, int, str]:
        """A side at random and the leader there of a mirrored partition (a random node when the
        leader is unknown, killed or paused): (side, node index, variant)."""
        side = self.rng.choice(SIDES)
        cluster = self.clusters[side]
        partition = self.rng.randrange(MirrorWorkloadOptions.partitions)
        candidates = [i for i, node in enumerate(cluster.nodes)
                      if node.running and (side, i) not in self.killed + self.paused]
        leader = cluster.leader_of(self.topics[side], partition)
        if leader in candidates:
            return side, leader, "leader"
        return side, self.rng.choice(candidates or range(len(cluster.nodes))), "random"

    def _start_kill(self) -> dict:
        return self._fault_leader(lambda cluster, node: cluster.kill(node), self.killed)

    def _stop_kill(self) -> dict:
        restarted = []
        for side, index in self.killed:
            self.clusters[side].restart(index)
            restarted.append(f"{side}-{index}")
        self.killed = []
        return {"restarted": restarted}

    def _start_pause(self) -> dict:
        return self._fault_leader(lambda cluster, node: cluster.pause(node), self.paused)

    def _fault_leader(self, fault, held: list) -> dict:
        """Kill or pause (fault) a mirrored partition's leader on a random side, kept in held until healed."""
        side, victim, variant = self._leader()
        fault(self.clusters[side], victim)
        held.append((side, victim))
        return {"variant": variant, "side": side, "node": victim}

    def _stop_pause(self) -> dict:
        for side, index in self.paused:
            self.clusters[side].resume(index)
        resumed, self.paused = [f"{side}-{index}" for side, index in self.paused], []
        return {"resumed": resumed}

    def close(self) -> None:
        self.timeline.close()


def _sent(workload: MirrorWorkload) -> int:
    return len(workload.sends)


def _write_results(out_dir: Path, options, result, workload: MirrorWorkload) -> None:
    from faults.run import RESULTS_FILE, _options_without_secrets
    results = {
        "workload": "mirror",
        "options": _options_without_secrets(options),
        "network_mode": result.mode,
        "network_mode_reason": result.mode_reason,
        "completions": result.completions,
        "main_phase_sends_per_s": round(result.ops_per_s, 1),
        "mirror_caught_up": result.final_reads_complete,
        "checkpoints_caught_up": workload.checkpointed,  # the group's last commits checkpointed in time
        "mirror_kills": len(workload.kills),
        "workload_failures": result.workload_failures,
    }
    (out_dir / RESULTS_FILE).write_text(json.dumps(results, indent=2, sort_keys=True))
