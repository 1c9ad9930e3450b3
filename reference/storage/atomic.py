"""Atomic file replacement: a file's new contents are either all on disk or not there at all.

`replace_file(path, data)` writes `path.tmp`, fsyncs it, renames it over `path` and then
fsyncs the directory, since a rename lives in the directory and is not durable until the
directory is synced (the contents' fsync does not cover it). Every checkpoint, snapshot,
quorum state and meta.properties file is written this way.
"""
from __future__ import annotations

import os

TEMPORARY_SUFFIX = ".tmp"


def replace_file(path: str, data: bytes) -> None:
    temporary = path + TEMPORARY_SUFFIX
    with open(temporary, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    fsync_directory(os.path.dirname(path) or ".")


def fsync_directory(dir_path: str) -> None:
    """Make the directory's entries (files created, renamed or deleted in it) durable."""
    fd = os.open(dir_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
