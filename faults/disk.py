"""Each node's data directory as the power, io and disk nemeses need it, and its cleanup.

For node i of a run folder the broker's --data-dir is always `node-i/`; under it, per run:

    power or io   faults/lazyfs.py mounted on node-i/, its backing directory node-i.disk/
    disk          a small tmpfs (tmpfs_bytes) under the data: on node-i.disk/ when the FUSE
                  layer is there, else on node-i/ itself; a full disk is a filler file
                  that takes every free byte (fallocate), freed again on heal

At teardown the FUSE layer is unmounted, the tmpfs contents are copied out and it is
unmounted, and what the node wrote is left in a plain node-i/ folder, as in any other run.

Crash safety: every mount is written to a state file under STATE_DIR/disks before it is
made; `clean_all()` (`kspec faults clean`) unmounts (lazily) what those files name. A
lazyfs process whose harness died sees its stdin close and unmounts itself.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from faults import net

STATE_SUBDIR = "disks"
TMPFS_BYTES_DEFAULT = 64 * 1024 * 1024  # a 60 s run writes under 1 MiB per node; a fill takes this much RAM
FILLER_FILE = "kspec-filler"
FILL_CHUNK_BYTES = 1 << 20
PAGE_BYTES = 4096
MOUNT_TIMEOUT_S = 10.0
COMMAND_TIMEOUT_S = 20.0


class DiskError(RuntimeError):
    pass


class NodeDisk:
    """The storage under one node's data directory: optionally the FUSE layer, optionally a tmpfs."""

    def __init__(self, run_dir: Path, index: int, *, lazy: bool, tmpfs_bytes: int | None, state_path: Path) -> None:
        self.data_dir = Path(run_dir) / f"node-{index}"
        self.backing_dir = Path(run_dir) / f"node-{index}.disk"
        self.lazy = lazy
        self.tmpfs_bytes = tmpfs_bytes
        self.tmpfs_dir = self.backing_dir if lazy else self.data_dir
        self.state_path = state_path
        self.log_path = Path(run_dir) / f"node-{index}.lazyfs.log"
        self.lazyfs: subprocess.Popen | None = None

    def mount(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.tmpfs_bytes is not None:
            self.tmpfs_dir.mkdir(parents=True, exist_ok=True)
            _record_mount(self.state_path, self.tmpfs_dir)
            _run(["mount", "-t", "tmpfs", "-o", f"size={self.tmpfs_bytes}", "kspec-disk", str(self.tmpfs_dir)])
        if self.lazy:
            self.backing_dir.mkdir(parents=True, exist_ok=True)
            _record_mount(self.state_path, self.data_dir)
            with open(self.log_path, "ab") as log:
                self.lazyfs = subprocess.Popen([sys.executable, "-m", "faults.lazyfs", str(self.backing_dir),
                                                str(self.data_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                               stderr=log, text=True)
            deadline = time.monotonic() + MOUNT_TIMEOUT_S
            while not os.path.ismount(self.data_dir):
                if self.lazyfs.poll() is not None or time.monotonic() > deadline:
                    raise DiskError(f"the FUSE layer did not mount on {self.data_dir}; see {self.log_path}")
                time.sleep(0.05)

    def command(self, **request) -> dict:
        """One command to the FUSE layer (see faults/lazyfs.py), its answer."""
        assert self.lazyfs is not None, "power and io faults need the FUSE layer"
        self.lazyfs.stdin.write(json.dumps(request) + "\n")
        self.lazyfs.stdin.flush()
        return json.loads(self.lazyfs.stdout.readline())

    def fill(self) -> dict:
        """Take every free byte of the tmpfs with a filler file: in chunks, halved at each ENOSPC
        down to a page, since the free space statvfs tells can be gone by the time it is taken
        (the broker and the FUSE layer write meanwhile: one fallocate of it all failed so)."""
        assert self.tmpfs_bytes is not None, "a full disk needs the tmpfs"
        filled_bytes, chunk_bytes = 0, FILL_CHUNK_BYTES
        fd = os.open(self.tmpfs_dir / FILLER_FILE, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while chunk_bytes >= PAGE_BYTES:
                try:
                    os.posix_fallocate(fd, filled_bytes, chunk_bytes)
                    filled_bytes += chunk_bytes
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    chunk_bytes //= 2
        finally:
            os.close(fd)
        return {"filled_bytes": filled_bytes}

    def free(self) -> dict:
        filler = self.tmpfs_dir / FILLER_FILE
        size = filler.stat().st_size if filler.exists() else 0
        filler.unlink(missing_ok=True)
        return {"freed_bytes": size}

    def unmount(self) -> None:
        """Unmount everything and leave the node's data in a plain node-i/ folder."""
        if self.lazy:
            if os.path.ismount(self.data_dir):
                done = _run(["fusermount3", "-u", str(self.data_dir)], check=False)
                if done.returncode != 0:  # busy: detached now, gone once the last open file is closed
                    with open(self.log_path, "a") as log:
                        log.write(f"fusermount3 -u: {done.stderr.strip()}; unmounting lazily\n")
                    _run(["fusermount3", "-u", "-z", str(self.data_dir)], check=False)
            if self.lazyfs is not None:
                self.lazyfs.stdin.close()
                try:
                    self.lazyfs.wait(COMMAND_TIMEOUT_S)
                except subprocess.TimeoutExpired:  # still serving a file someone holds open: the run is over
                    self.lazyfs.kill()
                    self.lazyfs.wait()
                self.lazyfs.stdout.close()
        if self.tmpfs_bytes is not None and os.path.ismount(self.tmpfs_dir):
            (self.tmpfs_dir / FILLER_FILE).unlink(missing_ok=True)
            saved = self.tmpfs_dir.with_name(self.tmpfs_dir.name + ".saved")
            shutil.copytree(self.tmpfs_dir, saved, symlinks=True)
            _run(["umount", str(self.tmpfs_dir)])
            self.tmpfs_dir.rmdir()
            saved.rename(self.tmpfs_dir)
        if self.lazy and self.backing_dir.exists():
            self.data_dir.rmdir()
            self.backing_dir.rename(self.data_dir)


def state_path(name: str, state_dir: Path = net.STATE_DIR) -> Path:
    return state_dir / STATE_SUBDIR / f"{name}.json"


def _record_mount(path: Path, mountpoint: Path) -> None:
    state = json.loads(path.read_text()) if path.exists() else {"owner": net.owner(), "mounts": []}
    state["mounts"].append(str(mountpoint))
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(state))
    temporary.rename(path)


def clean_all(state_dir: Path = net.STATE_DIR) -> list[str]:
    """Unmount what crashed runs left mounted (newest first: FUSE before the tmpfs under it);
    a live run's mounts are left alone."""
    removed = []
    for path in sorted((state_dir / STATE_SUBDIR).glob("*.json")):
        state = json.loads(path.read_text())
        if net.owner_alive(state):  # a live run's mounts (faults/net.py clean_all)
            continue
        for mountpoint in reversed(state["mounts"]):
            if os.path.ismount(mountpoint) or _is_dead_fuse(mountpoint):
                _run(["umount", "-l", mountpoint], check=False)
                removed.append(f"mount {mountpoint}")
        path.unlink()
    return removed


def _is_dead_fuse(mountpoint: str) -> bool:
    """A FUSE mount whose process is gone: stat fails with ENOTCONN, so ismount says False."""
    try:
        os.stat(mountpoint)
    except OSError as e:
        return e.errno == errno.ENOTCONN
    return False


def _run(command: list[str], check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if check and done.returncode != 0:
        raise DiskError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return done
