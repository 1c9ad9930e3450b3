"""Clock skew: a node's wall clock moved forwards or backwards, through libfaketime.

Debian's libfaketime is preloaded into the node's process (LD_PRELOAD) and reads its offset
from a file of its own (FAKETIME_TIMESTAMP_FILE, "+3600" or "-30": seconds), re-read at
most once a second (FAKETIME_CACHE_DURATION), so the nemesis moves a running node's clock
by rewriting one file. Only the wall clock moves (FAKETIME_DONT_FAKE_MONOTONIC): a real
clock step changes CLOCK_REALTIME and leaves CLOCK_MONOTONIC alone, and the broker's timers
(asyncio's loop) run on the monotonic clock. What a skewed wall clock reaches in a broker:
LogAppendTime and CreateTime checks, ListOffsets by time, time-based retention and segment
rolling, and any timeout reckoned in wall-clock milliseconds (sessions, transactions).

The checker never reads the nodes' clocks: the history's times are the harness's
monotonic clock (faults/recorder.py).

libfaketime 0.9.10 (Debian 12) fails clock_nanosleep with EINVAL when the monotonic clock is
not faked, so time.sleep() raises inside a skewed process; the reference broker never calls it
(asyncio waits in epoll, threads in condition variables, both unaffected).

The offset files live under STATE_DIR/faketime, are removed at teardown, and
`clean_all()` (`kspec faults clean`) removes what a crashed run left.

In containers (faults/docker_target.py) the same library is in the reference image
(faults/image.py copies the host's) and the offset files are in the run folder's faketime/,
bind-mounted into every container at CONTAINER_DIR: the host rewrites a node's file and the
container reads it, as in netns mode. The folder is mounted, not each file: set_offset
replaces the file (a rename), and a bind mount of one file keeps seeing the inode it mounted.
"""
from __future__ import annotations

import glob
from pathlib import Path

from faults import net

STATE_SUBDIR = "faketime"
CONTAINER_DIR = "/run/kspec-faketime"   # the run folder's faketime/ inside each container (read-only)
LIBFAKETIME_GLOB = "/usr/lib/*/faketime/libfaketime.so.1"
REREAD_S = 1


class ClockUnavailable(RuntimeError):
    pass


def libfaketime() -> str:
    found = sorted(glob.glob(LIBFAKETIME_GLOB))
    if not found:
        raise ClockUnavailable("clock faults need libfaketime (Debian: apt-get install faketime)")
    return found[0]


class NodeClock:
    """One node's clock offset: a file libfaketime reads, and the environment that makes it read it."""

    def __init__(self, run_name: str, index: int, state_dir: Path = net.STATE_DIR,
                 image_library: str | None = None) -> None:
        """image_library: the node runs in a container, whose image has the library at that path
        and which sees state_dir/faketime/ at CONTAINER_DIR."""
        self.path = state_dir / STATE_SUBDIR / f"{run_name}-node{index}"
        self.library = image_library or libfaketime()
        self.seen_as = Path(CONTAINER_DIR, self.path.name) if image_library else self.path
        self.offset_s = 0

    def create(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.set_offset(0)

    def environment(self) -> dict[str, str]:
        """The environment that puts the node's process on this clock."""
        return {"LD_PRELOAD": self.library, "FAKETIME_TIMESTAMP_FILE": str(self.seen_as),
                "FAKETIME_CACHE_DURATION": str(REREAD_S), "FAKETIME_DONT_FAKE_MONOTONIC": "1"}

    def set_offset(self, offset_s: int) -> None:
        """Move the wall clock to real time + offset_s (seen by the node within REREAD_S)."""
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(f"{offset_s:+d}\n")
        temporary.rename(self.path)
        self.offset_s = offset_s

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def wrap(clock: NodeClock, command: list[str]) -> list[str]:
    """The command run with the node's clock (env execs it: the pid stays the node's)."""
    return ["env", *(f"{name}={value}" for name, value in clock.environment().items()), *command]


def clean_all(state_dir: Path = net.STATE_DIR) -> list[str]:
    """Remove the offset files crashed runs left."""
    removed = []
    for path in sorted((state_dir / STATE_SUBDIR).glob("*")):
        path.unlink()
        removed.append(f"faketime file {path}")
    return removed
