"""Nemeses: which faults start and heal when, and what each one does to a target.

The schedule is Jepsen's (research/jepsen.md section 6): every fault package flips
between start and stop, each flip after a uniformly random delay of 0..2 x interval_s
(mean interval_s), all packages at once and independently; at the end every active fault
is healed and a quiet period follows, so every acked write can be read back. `Schedule`
is sans-IO: time and randomness come in, (action, package) pairs come out.

Packages and their variants, each start choosing one variant at random:

| package | start | stop |
|---|---|---|
| partition | one node isolated; the leader of a key's partition isolated; random halves; majorities ring; bridge; a lone node cut from its clients; (proxy mode: one node's client links cut) | heal |
| kill | kill -9 a random node, a partition leader, or the controller | restart every killed node |
| pause | SIGSTOP a random node or a partition leader | SIGCONT |
| link | a Toxiproxy toxic (latency, jitter, bandwidth, timeout, reset_peer, slicer) on a random node's link (proxy mode) | remove every toxic |
| power | cut the power of one node, a partition leader, a minority, or all nodes at once: kill -9, then every write not fsynced is dropped (faults/lazyfs.py); the bytes dropped per node are recorded | restart every cut node |
| disk | fill a random node's data disk (a small tmpfs, faults/disk.py) to the last byte | free it; restart the node if it stopped |
| io | reads, writes or fsyncs of a random node's segments, indexes, checkpoints or all files fail with EIO (faults/lazyfs.py) | heal; restart the node if it stopped |
| clock | move a random node's wall clock by seconds to hours, forwards or backwards (libfaketime, faults/clock.py) | set it right (another jump) |
| malformed | a burst of malformed and truncated frames to every node that runs and is not paused (faults/malformed.py); what each node answered, and whether it still runs | nothing to heal |

A grudge maps a node to the set of nodes whose packets it drops (faults/net.py).
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from faults.clock import NodeClock
from faults.disk import NodeDisk
from faults.malformed import send_bursts
from faults.net import HOST
from faults.recorder import Recorder
from faults.targets import Target, proxy_name
from spec.history import NEMESIS_PROCESS, topic_partition

PACKAGES = ("partition", "kill", "pause", "link", "power", "disk", "io", "clock", "malformed")
STORAGE_PACKAGES = ("power", "disk", "io")  # need the node's data dir on faults/disk.py's stack
PARTITION_VARIANTS = ("one", "leader", "halves", "majorities-ring", "bridge")
KILL_VARIANTS = ("random", "leader", "controller")
PAUSE_VARIANTS = ("random", "leader")
POWER_VARIANTS = ("one", "leader", "minority", "all")
IO_FILES = {"segments": "*.log", "indexes": "*index", "checkpoints": "*checkpoint*", "all": "*"}
IO_CALLS = (("read",), ("write",), ("fsync",), ("read", "write", "fsync"))
VARIANTS = {"kill": KILL_VARIANTS, "pause": PAUSE_VARIANTS, "power": POWER_VARIANTS}  # `--nemesis power:all` picks one
CLOCK_OFFSETS_S = (5, 30, 90, 600, 3600, 3 * 3600)  # seconds to hours, each either way
LINK_TOXICS = {
    "latency": {"latency": 200},
    "jitter": {"latency": 50, "jitter": 50},
    "bandwidth": {"rate": 64},
    "timeout": {"timeout": 2000},
    "reset_peer": {"timeout": 500},
    "slicer": {"average_size": 64, "size_variation": 32, "delay": 200},
}
INTERVAL_S_DEFAULT = 10.0
LEADER_KEY = 0  # "the leader of a key's partition": the partition of key 0


# Grudges (pure functions of the node list and a random generator).

def complete_grudge(components: list[list[int]]) -> dict[int, set[int]]:
    """Every node drops packets from every node outside its component."""
    everyone = {n for component in components for n in component}
    return {n: everyone - set(component) for component in components for n in component}


def isolate(node: int, nodes: list[int]) -> dict[int, set[int]]:
    return complete_grudge([[node], [n for n in nodes if n != node]])


def halves(nodes: list[int], rng: random.Random) -> dict[int, set[int]]:
    """A random minority and majority that cannot talk to each other."""
    shuffled = rng.sample(nodes, len(nodes))
    return complete_grudge([shuffled[: len(nodes) // 2], shuffled[len(nodes) // 2:]])


def majorities_ring(nodes: list[int], rng: random.Random) -> dict[int, set[int]]:
    """Each node sees a majority (itself and its nearest ring neighbours), no two the same one.

    Needs at least 5 nodes: with 3 or 4 every majority view is all but one link, so it is
    `halves` or an isolated node, and those variants cover it."""
    assert len(nodes) >= 5, "majorities-ring needs 5 or more nodes"
    ring = rng.sample(nodes, len(nodes))
    reach = -(-(len(nodes) // 2) // 2)  # ring distance each side that gives a node a majority view
    grudge = {}
    for position, node in enumerate(ring):
        seen = {ring[(position + d) % len(ring)] for d in range(-reach, reach + 1)}
        grudge[node] = set(nodes) - seen
    return grudge


def bridge(nodes: list[int], rng: random.Random) -> dict[int, set[int]]:
    """Two halves that cannot talk, and one node in the middle that talks to both."""
    assert len(nodes) >= 3, "a bridge needs 3 or more nodes"
    shuffled = rng.sample(nodes, len(nodes))
    middle, rest = shuffled[0], shuffled[1:]
    left, right = rest[: len(rest) // 2], rest[len(rest) // 2:]
    grudge = {middle: set()}
    grudge.update({n: set(right) for n in left})
    grudge.update({n: set(left) for n in right})
    return grudge


def partition_variants(node_count: int) -> tuple[str, ...]:
    """The partition variants that mean something with this many nodes."""
    if node_count == 1:
        return ("clients",)  # a lone node has no peers: it is cut from the host, where its clients are
    variants = ["one", "leader", "halves"]
    if node_count >= 3:
        variants.append("bridge")
    if node_count >= 5:
        variants.append("majorities-ring")
    return tuple(variants)


# The schedule.

@dataclass
class Schedule:
    """Jepsen's flip-flop per package, staggered: see the module docstring."""
    packages: tuple[str, ...]
    interval_s: float
    rng: random.Random
    now_s: float = 0.0
    active: set[str] = field(default_factory=set)
    next_flip_s: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.interval_s > 0 and set(self.packages) <= set(PACKAGES), self.packages
        self.next_flip_s = {p: self.now_s + self._stagger() for p in self.packages}

    def _stagger(self) -> float:
        return self.rng.uniform(0, 2 * self.interval_s)

    def due(self, now_s: float) -> list[tuple[str, str]]:
        """The flips due by now_s, in time order: ("start" | "stop", package)."""
        assert now_s >= self.now_s, "time goes forward"
        self.now_s = now_s
        flips = []
        for package, at_s in sorted(self.next_flip_s.items(), key=lambda item: item[1]):
            if at_s <= now_s:
                action = "stop" if package in self.active else "start"
                (self.active.discard if action == "stop" else self.active.add)(package)
                flips.append((action, package))
                self.next_flip_s[package] = now_s + self._stagger()
        return flips

    def heal_all(self) -> list[tuple[str, str]]:
        """Stop every active package: the final heal."""
        flips = [("stop", p) for p in sorted(self.active)]
        self.active.clear()
        return flips


# What each flip does.

class Nemesis:
    """Carries out flips on a target (from one thread); records each in the history and the timeline."""

    def __init__(self, target: Target, recorder: Recorder, timeline_path: Path, rng: random.Random,
                 disks: list[NodeDisk] | None = None, clocks: list[NodeClock] | None = None,
                 variants: dict[str, str] | None = None) -> None:
        self.target = target
        self.variants = dict(variants or {})  # package -> the one variant its starts use
        self.disks = disks
        self.clocks = clocks
        self.recorder = recorder
        self.timeline = open(timeline_path, "a", buffering=1)  # one JSON line per flip, flushed
        self.rng = rng
        self.nodes = list(range(len(target.nodes)))
        self.killed: set[int] = set()
        self.paused: set[int] = set()
        self.cut: set[int] = set()  # power off: only the power package brings them back
        self.disk_node: int | None = None  # the node whose disk is full
        self.io_node: int | None = None    # the node whose chosen files fail
        self.active: dict[str, dict] = {}  # package -> what its start did (for the progress line)
        self.run_partitions: list[tuple[str, int]] = []  # where malformed Produces go (the run sets them)

    def apply(self, action: str, package: str) -> dict:
        assert action in ("start", "stop") and package in PACKAGES
        invocation = self.recorder.invoke(NEMESIS_PROCESS, f"{action}-{package}")
        try:
            value = getattr(self, f"_{action}_{package}")()
        except Exception as e:  # a fault that could not be applied is recorded, not fatal
            value = {"error": f"{type(e).__name__}: {e}"}
        self.recorder.complete(invocation, "info", extra={"value": value})
        if action == "start":
            self.active[package] = value
        else:
            self.active.pop(package, None)
        self.timeline.write(json.dumps({"time_ns": self.recorder.now_ns(), "action": action,
                                        "package": package, "value": value}) + "\n")
        return value

    def close(self) -> None:
        self.timeline.close()

    def _variant(self, package: str) -> str:
        return self.variants.get(package) or self.rng.choice(VARIANTS[package])

    def _victim(self, variant: str) -> int:
        candidates = [n for n in self.nodes if n not in self.killed | self.paused | self.cut]
        chosen = None
        if variant == "leader":
            chosen = self.target.leader_of(*topic_partition(LEADER_KEY))
        elif variant == "controller":
            chosen = self.target.controller()
        if chosen is None or chosen not in candidates:
            chosen = self.rng.choice(candidates or self.nodes)
        return chosen

    def _start_partition(self) -> dict:
        if self.target.mode == "proxy":  # no links between nodes to cut: one node loses its clients
            variant = self.rng.choice(("one", "leader"))
            node = self._victim("leader" if variant == "leader" else "random")
            self.target.cut_client_links([node])
            return {"variant": variant, "mode": "proxy", "client_links_cut": [node]}
        variant = self.rng.choice(partition_variants(len(self.nodes)))
        if variant == "clients":
            grudge = {0: {HOST}}
        elif variant in ("one", "leader"):
            grudge = isolate(self._victim("leader" if variant == "leader" else "random"), self.nodes)
        elif variant == "halves":
            grudge = halves(self.nodes, self.rng)
        elif variant == "bridge":
            grudge = bridge(self.nodes, self.rng)
        else:
            grudge = majorities_ring(self.nodes, self.rng)
        self.target.partition(grudge)
        return {"variant": variant, "mode": self.target.mode,
                "grudge": {str(n): sorted(peers) for n, peers in sorted(grudge.items())}}

    def _stop_partition(self) -> dict:
        self.target.heal()
        return {"healed": True}

    def _start_kill(self) -> dict:
        variant = self._variant("kill")
        node = self._victim(variant)
        self.target.kill(node)
        self.killed.add(node)
        return {"variant": variant, "node": node}

    def _stop_kill(self) -> dict:
        restarted = sorted(self.killed - self.cut)
        for node in restarted:
            self.target.restart(node)
        self.killed.clear()
        return {"restarted": restarted}

    def _start_pause(self) -> dict:
        variant = self._variant("pause")
        node = self._victim(variant)
        self.target.pause(node)
        self.paused.add(node)
        return {"variant": variant, "node": node}

    def _stop_pause(self) -> dict:
        resumed = sorted(self.paused)
        for node in resumed:
            self.target.resume(node)
        self.paused.clear()
        return {"resumed": resumed}

    def _start_link(self) -> dict:
        assert self.target.toxiproxy is not None, "link faults need the proxy layer (--network proxy)"
        kind = self.rng.choice(sorted(LINK_TOXICS))
        node = self.rng.choice(self.nodes)
        toxic_type = "latency" if kind == "jitter" else kind
        stream = self.rng.choice(("upstream", "downstream"))
        self.target.toxiproxy.add_toxic(proxy_name(node), toxic_type, stream=stream, name=f"kspec_link_{kind}",
                                        attributes=LINK_TOXICS[kind])
        return {"toxic": kind, "node": node, "stream": stream, "attributes": LINK_TOXICS[kind]}

    def _stop_link(self) -> dict:
        removed = []
        for node in self.nodes:
            for toxic in self.target.toxiproxy.toxics(proxy_name(node)):
                if toxic["name"].startswith("kspec_link_"):
                    self.target.toxiproxy.remove_toxic(proxy_name(node), toxic["name"])
                    removed.append({"node": node, "toxic": toxic["name"]})
        return {"removed": removed}

    def _start_power(self) -> dict:
        variant = self._variant("power")
        live = [n for n in self.nodes if n not in self.cut]
        if variant == "all":
            victims = live
        elif variant == "minority":
            victims = self.rng.sample(live, min(len(live), max(1, (len(self.nodes) - 1) // 2)))
        else:
            victims = [self._victim("leader" if variant == "leader" else "random")]
        for node in victims:  # every victim dies before any page is dropped: one cut for all
            self.target.kill(node)
        self.cut |= set(victims)
        cuts = {str(node): self.disks[node].command(op="cut") for node in victims}
        return {"variant": variant, "nodes": sorted(victims),
                "dropped_bytes": {node: cut["dropped_bytes"] for node, cut in cuts.items()},
                "dropped_files": {node: cut["files"] for node, cut in cuts.items()}}

    def _stop_power(self) -> dict:
        restarted = sorted(self.cut)
        self.cut.clear()
        for node in restarted:
            if node not in self.killed:
                self.target.restart(node)
        return {"restarted": restarted}

    def _start_disk(self) -> dict:
        self.disk_node = self._victim("random")
        return {"node": self.disk_node, **self.disks[self.disk_node].fill()}

    def _stop_disk(self) -> dict:
        node, self.disk_node = self.disk_node, None
        return {"node": node, **self.disks[node].free(), **self._restart_if_stopped(node)}

    def _start_io(self) -> dict:
        self.io_node = self._victim("random")
        files = self.rng.choice(sorted(IO_FILES))
        calls = list(self.rng.choice(IO_CALLS))
        self.disks[self.io_node].command(op="fail", glob=IO_FILES[files], calls=calls)
        return {"node": self.io_node, "files": files, "calls": calls}

    def _stop_io(self) -> dict:
        node, self.io_node = self.io_node, None
        return {"node": node, **self.disks[node].command(op="heal"), **self._restart_if_stopped(node)}

    def _restart_if_stopped(self, node: int) -> dict:
        """A node that stopped by itself under a disk fault (not killed or cut) is started again,
        as an operator would once the disk is mended; its exit code is recorded."""
        exit_code = self.target.nodes[node].exit_code
        if exit_code is None or node in self.killed | self.cut:
            return {}
        self.target.restart(node)
        return {"stopped_with": exit_code, "restarted": True}

    def _start_clock(self) -> dict:
        node = self.rng.choice(self.nodes)
        offset_s = self.rng.choice(CLOCK_OFFSETS_S) * self.rng.choice((-1, 1))
        self.clocks[node].set_offset(offset_s)
        return {"node": node, "offset_s": offset_s}

    def _stop_clock(self) -> dict:
        reset = [node for node, clock in enumerate(self.clocks) if clock.offset_s]
        for node in reset:
            self.clocks[node].set_offset(0)
        return {"reset": reset}

    def _start_malformed(self) -> dict:
        up = [n for n in self.nodes if n not in self.killed | self.paused | self.cut and self.target.nodes[n].running]
        addresses = {}
        for n in up:
            host, port = self.target.nodes[n].bootstrap.rsplit(":", 1)
            addresses[n] = (host, int(port))
        sent = send_bursts(addresses, self.rng, self.run_partitions)
        for n in up:  # a node the frames killed no longer runs: PRO-1's evidence
            sent[str(n)]["running"] = self.target.nodes[n].running
        return {"nodes": sent}

    def _stop_malformed(self) -> dict:
        return {"healed": True}
