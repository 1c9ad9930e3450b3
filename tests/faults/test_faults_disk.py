"""Full and failing disks under a real broker: sends fail while the fault lasts, the broker stops
with one line (its one log dir failed), nothing acked is lost, no torn batch is ever served, and
the broker serves again once the disk is mended and it is restarted."""
from __future__ import annotations

import os
import shutil

import pytest

from broker_helpers import broker_on, produce, read_all
from faults.disk import NodeDisk
from reference.process import BrokerNotReady

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="tmpfs and FUSE mounts need root")
VALUE_BYTES = 2000  # whole pages per few records: a full tmpfs refuses them (a partial page would take small ones)


def sends_through_a_fault(node_disk: NodeDisk, tmp_path, start, stop) -> None:
    """50 sends before the fault, 50 during, 50 after it is healed; everything acked is read back whole.

    The node's one log dir fails with the fault, so the broker stops with one line, as Kafka's
    LogDirFailureChannel stops a broker whose every log dir has failed; the heal restarts it."""
    broker = broker_on(node_disk, tmp_path)
    broker.start()
    try:
        before, _ = produce(broker.bootstrap, range(0, 50), VALUE_BYTES)
        start()
        during, failed = produce(broker.bootstrap, range(50, 100), VALUE_BYTES)
        broker.process.wait(timeout=30)  # fail-stop: the broker ends once its log dir has failed
        stop()
        assert broker.process.returncode != 0
        broker.start()
        after, _ = produce(broker.bootstrap, range(100, 150), VALUE_BYTES)
        values, errors = read_all(broker.bootstrap)
    finally:
        broker.kill()
    assert len(before) == 50 and failed and len(after) == 50, "sends fail during the fault, and only then"
    assert not errors, f"a torn or corrupt batch was served: {errors[:1]}"
    assert set(before + during + after) <= set(values) and len(values) == len(set(values))
    log = (tmp_path / "broker.log").read_text()
    assert log.count("stopping the node: every log dir has failed") == 1, "one line says why the broker stopped"


@pytest.mark.timeout(90)
def test_a_full_disk_fails_sends_and_after_it_is_freed_the_broker_serves_every_acked_record(tmp_path):
    node_disk = NodeDisk(tmp_path, 0, lazy=False, tmpfs_bytes=16 << 20, state_path=tmp_path / "disks.json")
    node_disk.mount()
    try:
        sends_through_a_fault(node_disk, tmp_path, node_disk.fill, node_disk.free)
        assert "[Errno 28]" in (tmp_path / "broker.log").read_text()  # ENOSPC
    finally:
        node_disk.unmount()


@pytest.mark.timeout(90)
@pytest.mark.skipif(shutil.which("fusermount3") is None, reason="the FUSE layer needs fusermount3 (Debian: fuse3)")
def test_segment_writes_failing_with_eio_fail_sends_and_after_heal_the_broker_serves_every_acked_record(tmp_path):
    node_disk = NodeDisk(tmp_path, 0, lazy=True, tmpfs_bytes=None, state_path=tmp_path / "disks.json")
    node_disk.mount()
    try:
        sends_through_a_fault(node_disk, tmp_path,
                              lambda: node_disk.command(op="fail", glob="*.log", calls=["write"]),
                              lambda: node_disk.command(op="heal"))
        assert "Input/output error" in (tmp_path / "broker.log").read_text()
    finally:
        node_disk.unmount()


@pytest.mark.timeout(90)
@pytest.mark.skipif(shutil.which("fusermount3") is None, reason="the FUSE layer needs fusermount3 (Debian: fuse3)")
def test_a_broker_restarted_on_failing_index_files_stops_with_one_clear_line_and_serves_after_heal(tmp_path):
    node_disk = NodeDisk(tmp_path, 0, lazy=True, tmpfs_bytes=None, state_path=tmp_path / "disks.json")
    node_disk.mount()
    broker = broker_on(node_disk, tmp_path)
    try:
        broker.start()
        acked, _ = produce(broker.bootstrap, range(0, 50))
        broker.kill()  # no clean shutdown: the restart rebuilds the indexes
        node_disk.command(op="fail", glob="*index", calls=["read", "write", "fsync"])
        with pytest.raises(BrokerNotReady):
            broker.start()
        assert broker.process.returncode == 1
        assert "ERROR kspec.broker: Shutdown broker because all log dirs in" in (tmp_path / "broker.log").read_text()
        node_disk.command(op="heal")
        broker.start()
        values, errors = read_all(broker.bootstrap)
    finally:
        if broker.process is not None:
            broker.kill()
        node_disk.unmount()
    assert not errors and values == sorted(acked) and len(acked) == 50
