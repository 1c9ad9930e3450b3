"""A FUSE filesystem that forgets what was never fsynced, in the spirit of LazyFS.

    python -m faults.lazyfs BACKING MOUNTPOINT      # serves until unmounted; commands on stdin

What a power cut keeps and what it loses is the whole point, so the rules are few:

- metadata (create, mkdir, rename, unlink, rmdir, chmod, and truncating a file shorter) goes
  to BACKING at once, as a journaling filesystem commits it within seconds;
- file data (write, and growing a file by truncate) stays in this process's memory, page by
  page, until the file is fsynced: then its pages are written to BACKING and fsynced there;
- reads see the cached pages over the backing file, so a running broker reads what it wrote;
- `cut` drops every cached page: what is left in BACKING is what survived the power loss.
  Like LazyFS it is the worst case: nothing is written back behind the writer's back.

The kernel's page cache is bypassed (direct_io) and attributes are not cached, so after a
cut no kernel cache serves bytes that are gone.

Commands, one JSON object a line on stdin, each answered by one JSON line on stdout:

    {"op": "cut"}                                       -> {"dropped_bytes": N, "files": {path: bytes}}
    {"op": "fail", "glob": "*.log", "calls": ["write"]} -> {"failing": [...]}   matching calls fail with EIO
    {"op": "heal"}                                      -> {"failed_calls": N}  no more failures
    {"op": "stats"}                                     -> {"unsynced_bytes": N, "files": K}

When stdin closes (the harness is gone) the filesystem unmounts itself and the process ends.
mfusepy (libfuse 3 through ctypes) carries the calls; one writer makes tens of thousands of
small appends a second through it, far more than a fault run asks.
"""
from __future__ import annotations

import errno
import fnmatch
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field

import mfusepy

PAGE_BYTES = 4096
CALLS = ("read", "write", "fsync")
STAT_FIELDS = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size",
               "st_atime", "st_mtime", "st_ctime")


@dataclass
class DirtyFile:
    """A file's data written since its last fsync: whole pages, and the size writers see."""
    size_bytes: int
    pages: dict[int, bytearray] = field(default_factory=dict)

    def unsynced_bytes(self) -> int:
        return sum(min(PAGE_BYTES, self.size_bytes - n * PAGE_BYTES) for n in self.pages
                   if n * PAGE_BYTES < self.size_bytes)


class LazyOperations(mfusepy.Operations):
    """The filesystem calls over a backing directory; one lock serialises them (see the module docstring)."""

    use_ns = True  # utimens gets nanoseconds

    def __init__(self, backing: str) -> None:
        self.backing = os.path.realpath(backing)
        self._mutex = threading.Lock()
        self.dirty: dict[str, DirtyFile] = {}
        self.failing: list[tuple[str, frozenset[str]]] = []  # (glob over the path, calls that fail)
        self.failed_calls = 0

    # Control (from the command thread).

    def cut(self) -> dict:
        with self._mutex:
            files = {path: dirty.unsynced_bytes() for path, dirty in sorted(self.dirty.items())}
            self.dirty.clear()
        return {"dropped_bytes": sum(files.values()), "files": files}

    def fail(self, glob: str, calls: list[str]) -> dict:
        assert set(calls) <= set(CALLS), calls
        with self._mutex:
            self.failing.append((glob, frozenset(calls)))
            return {"failing": [[g, sorted(c)] for g, c in self.failing]}

    def heal(self) -> dict:
        with self._mutex:
            self.failing.clear()
            failed, self.failed_calls = self.failed_calls, 0
        return {"failed_calls": failed}

    def stats(self) -> dict:
        with self._mutex:
            return {"unsynced_bytes": sum(f.unsynced_bytes() for f in self.dirty.values()), "files": len(self.dirty)}

    # Helpers (called with the lock held).

    def _real(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    def _check(self, path: str, call: str) -> None:
        if any(call in calls and fnmatch.fnmatch(path, glob) for glob, calls in self.failing):
            self.failed_calls += 1
            raise mfusepy.FuseOSError(errno.EIO)

    def _page(self, dirty: DirtyFile, fd: int, number: int) -> bytearray:
        """Page `number` as writers see it: cached, else read from the backing file (zeros past the size)."""
        page = dirty.pages.get(number)
        if page is None:
            page = bytearray(os.pread(fd, PAGE_BYTES, number * PAGE_BYTES)).ljust(PAGE_BYTES, b"\0")
            valid = max(0, dirty.size_bytes - number * PAGE_BYTES)
            page[valid:] = bytes(PAGE_BYTES - min(valid, PAGE_BYTES))
            dirty.pages[number] = page
        return page

    def _dirty(self, path: str) -> DirtyFile:
        if path not in self.dirty:
            self.dirty[path] = DirtyFile(os.lstat(self._real(path)).st_size)
        return self.dirty[path]

    # Metadata: straight to the backing directory.

    def getattr(self, path: str, fh: int | None = None) -> dict:
        with self._mutex:
            st = os.lstat(self._real(path))
            attributes = {key: getattr(st, key) for key in STAT_FIELDS}
            if path in self.dirty:
                attributes["st_size"] = self.dirty[path].size_bytes
            return attributes

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._real(path))]

    def statfs(self, path: str) -> dict:
        st = os.statvfs(self._real(path))
        return {key: getattr(st, key) for key in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                                  "f_files", "f_ffree", "f_favail", "f_flag", "f_namemax")}

    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._real(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        os.rmdir(self._real(path))
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._real(path), mode)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        os.utime(self._real(path), ns=times)
        return 0

    def unlink(self, path: str) -> int:
        with self._mutex:
            os.unlink(self._real(path))
            self.dirty.pop(path, None)
        return 0

    def rename(self, old: str, new: str) -> int:
        with self._mutex:
            os.rename(self._real(old), self._real(new))
            self.dirty.pop(new, None)
            if old in self.dirty:
                self.dirty[new] = self.dirty.pop(old)
            prefix = old.rstrip("/") + "/"  # a renamed directory takes its files' cached pages along
            for path in [p for p in self.dirty if p.startswith(prefix)]:
                self.dirty[new.rstrip("/") + "/" + path[len(prefix):]] = self.dirty.pop(path)
        return 0

    def create(self, path: str, mode: int, fi=None) -> int:
        return os.open(self._real(path), os.O_RDWR | os.O_CREAT, mode)

    def open(self, path: str, flags: int) -> int:
        # Always read-write and never O_APPEND: the kernel gives every write its offset.
        return os.open(self._real(path), os.O_RDWR)

    def release(self, path: str, fh: int) -> int:
        os.close(fh)  # closing is not fsyncing: the cached pages stay
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    # Data: cached until fsync.

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        with self._mutex:
            self._check(path, "read")
            dirty = self.dirty.get(path)
            if dirty is None:
                return os.pread(fh, size, offset)
            end = min(offset + size, dirty.size_bytes)
            if end <= offset:
                return b""
            data = bytearray(os.pread(fh, end - offset, offset)).ljust(end - offset, b"\0")
            for number in range(offset // PAGE_BYTES, (end - 1) // PAGE_BYTES + 1):
                page = dirty.pages.get(number)
                if page is not None:
                    start, stop = max(offset, number * PAGE_BYTES), min(end, (number + 1) * PAGE_BYTES)
                    data[start - offset:stop - offset] = page[start - number * PAGE_BYTES:stop - number * PAGE_BYTES]
            return bytes(data)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._mutex:
            self._check(path, "write")
            dirty = self._dirty(path)
            position, end = offset, offset + len(data)
            while position < end:
                number = position // PAGE_BYTES
                page = self._page(dirty, fh, number)
                start = position - number * PAGE_BYTES
                stop = min(PAGE_BYTES, end - number * PAGE_BYTES)
                page[start:stop] = data[position - offset:position - offset + stop - start]
                position += stop - start
            dirty.size_bytes = max(dirty.size_bytes, end)
            return len(data)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self._mutex:
            real = self._real(path)
            dirty = self._dirty(path)
            if length < dirty.size_bytes:  # shrinking is metadata: on disk at once
                if os.lstat(real).st_size > length:
                    os.truncate(real, length)
                for number in [n for n in dirty.pages if n * PAGE_BYTES >= length]:
                    del dirty.pages[number]
                boundary = dirty.pages.get(length // PAGE_BYTES)
                if boundary is not None:
                    boundary[length % PAGE_BYTES:] = bytes(PAGE_BYTES - length % PAGE_BYTES)
            dirty.size_bytes = length
            return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self._mutex:
            self._check(path, "fsync")
            dirty = self.dirty.get(path)
            if dirty is not None:
                for number, page in sorted(dirty.pages.items()):
                    valid = min(PAGE_BYTES, dirty.size_bytes - number * PAGE_BYTES)
                    if valid > 0:
                        os.pwrite(fh, page[:valid], number * PAGE_BYTES)
                os.ftruncate(fh, dirty.size_bytes)
                del self.dirty[path]
            os.fsync(fh)
            return 0


def serve_commands(operations: LazyOperations, mountpoint: str) -> None:
    """Answer the harness's commands; when it goes away, unmount (which ends the FUSE loop)."""
    handlers = {"cut": operations.cut, "fail": operations.fail, "heal": operations.heal, "stats": operations.stats}
    for line in sys.stdin:
        request = json.loads(line)
        op = request.pop("op")
        try:
            reply = handlers[op](**request)
        except Exception as e:  # a bad command is answered, never fatal to the filesystem
            reply = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    subprocess.run(["fusermount3", "-u", "-z", mountpoint], capture_output=True)


def main() -> None:
    backing, mountpoint = sys.argv[1:3]
    operations = LazyOperations(backing)
    threading.Thread(target=serve_commands, args=(operations, mountpoint), daemon=True).start()
    mfusepy.FUSE(operations, mountpoint, foreground=True, direct_io=True, attr_timeout=0, entry_timeout=0,
                 negative_timeout=0, fsname="kspec-lazyfs")


if __name__ == "__main__":
    main()
