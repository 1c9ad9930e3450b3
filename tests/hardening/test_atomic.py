"""replace_file: the new contents replace the old whole, no temporary file is left behind, and
every rename is followed by an fsync of the file's own directory (the real fsync_directory
runs; the test only records which directory it was called on)."""
from __future__ import annotations

import os

from reference.storage import atomic


def test_replace_file_swaps_contents_whole_and_syncs_the_directory(tmp_path, monkeypatch):
    synced: list[str] = []
    real_fsync_directory = atomic.fsync_directory
    monkeypatch.setattr(atomic, "fsync_directory", lambda path: synced.append(path) or real_fsync_directory(path))
    path = str(tmp_path / "checkpoint")
    atomic.replace_file(path, b"first")
    atomic.replace_file(path, b"second")
    assert open(path, "rb").read() == b"second"
    assert os.listdir(tmp_path) == ["checkpoint"]
    assert synced == [str(tmp_path), str(tmp_path)]
