"""Power loss: the FUSE layer keeps what was fsynced and drops the rest on a cut; a broker with
Kafka's default flush settings loses acked records to a cut of its only replica, and with
log.flush.interval.messages=1 it loses none; `kspec faults clean` unmounts what a crashed run left."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from broker_helpers import broker_on, produce, read_all
from faults import clock, disk, net
from faults.disk import NodeDisk

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("fusermount3") is None
                                or not os.path.exists("/dev/fuse"),
                                reason="the FUSE layer needs root, /dev/fuse and fusermount3 (Debian: fuse3)")


@pytest.fixture
def lazy_disk(tmp_path):
    node_disk = NodeDisk(tmp_path, 0, lazy=True, tmpfs_bytes=None, state_path=tmp_path / "disks.json")
    node_disk.mount()
    try:
        yield node_disk
    finally:
        node_disk.unmount()
        assert not os.path.ismount(node_disk.data_dir)


def test_a_cut_keeps_fsynced_bytes_and_metadata_and_drops_unsynced_bytes(lazy_disk):
    path = lazy_disk.data_dir / "d" / "00.log"
    path.parent.mkdir()
    with open(path, "ab") as f:
        f.write(b"s" * 5000)
        f.flush()
        os.fsync(f.fileno())
        f.write(b"u" * 3000)
        f.flush()
    assert path.read_bytes() == b"s" * 5000 + b"u" * 3000  # a running writer reads what it wrote
    (lazy_disk.data_dir / "d" / "cp.tmp").write_bytes(b"never fsynced")
    os.replace(lazy_disk.data_dir / "d" / "cp.tmp", lazy_disk.data_dir / "d" / "cp")

    cut = lazy_disk.command(op="cut")

    assert path.read_bytes() == b"s" * 5000
    assert (lazy_disk.data_dir / "d" / "cp").read_bytes() == b""  # the rename survived, its data did not
    # counted in whole dirty pages up to the size: bytes 4096..8000 of 00.log, all of cp
    assert cut["files"] == {"/d/00.log": 8000 - 4096, "/d/cp": len(b"never fsynced")}
    assert cut["dropped_bytes"] == sum(cut["files"].values())


def test_failing_calls_return_eio_until_healed(lazy_disk):
    path = lazy_disk.data_dir / "00.log"
    path.write_bytes(b"x")
    lazy_disk.command(op="fail", glob="*.log", calls=["read"])
    with pytest.raises(OSError) as failed:
        path.read_bytes()
    assert failed.value.errno == 5
    (lazy_disk.data_dir / "00.index").write_bytes(b"other files work")
    assert lazy_disk.command(op="heal") == {"failed_calls": 1}
    assert path.read_bytes() == b"x"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("flush_messages, lost", [(None, "some"), ("1", "none")])
def test_a_power_cut_loses_acked_records_unless_each_is_fsynced(lazy_disk, tmp_path, flush_messages, lost):
    overrides = {"log.flush.interval.messages": flush_messages} if flush_messages else {}
    broker = broker_on(lazy_disk, tmp_path, overrides)
    broker.start()
    try:
        acked, failed = produce(broker.bootstrap, range(200))
        assert len(acked) == 200 and not failed
        broker.kill()
        dropped_bytes = lazy_disk.command(op="cut")["dropped_bytes"]
        broker.start()
        values, errors = read_all(broker.bootstrap)
    finally:
        broker.kill()
    assert not errors
    missing = set(acked) - set(values)
    if lost == "some":  # acks=all with one replica: the ack promised replication, not fsync (DUR-1's "holds when")
        assert dropped_bytes > 0 and missing
    else:
        assert not missing and values == sorted(acked)


def test_clean_unmounts_what_a_crashed_run_left(tmp_path):
    state_dir = tmp_path / "state"
    node_disk = NodeDisk(tmp_path, 0, lazy=True, tmpfs_bytes=4 << 20, state_path=disk.state_path("crashed", state_dir))
    node_disk.mount()
    node_clock = clock.NodeClock("crashed", 0, state_dir)
    node_clock.create()
    assert disk.clean_all(state_dir) == [], "the mounts of a live run (this test's process) are left alone"
    harness = subprocess.Popen(["sleep", "60"])  # stands for the harness that wrote the state file
    state_file = disk.state_path("crashed", state_dir)
    state_file.write_text(json.dumps({**json.loads(state_file.read_text()),
                                      "owner": [harness.pid, net.start_ticks(harness.pid)]}))
    harness.kill()  # the harness and its FUSE process die with the mounts in place
    harness.wait()
    node_disk.lazyfs.kill()
    node_disk.lazyfs.wait()

    removed = disk.clean_all(state_dir) + clock.clean_all(state_dir)

    assert removed == [f"mount {node_disk.data_dir}", f"mount {node_disk.backing_dir}",
                       f"faketime file {node_clock.path}"]
    assert not os.path.ismount(node_disk.data_dir) and not os.path.ismount(node_disk.backing_dir)
    assert not node_clock.path.exists() and not list((state_dir / disk.STATE_SUBDIR).iterdir())
