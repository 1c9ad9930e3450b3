"""A data directory that fills up mid-produce (a small tmpfs): the client gets
KAFKA_STORAGE_ERROR or its connection closes, the node stops with one line saying why and a
non-zero exit, and after space is freed and the broker restarts every acknowledged record is
there and no torn batch is served."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from reference.process import BrokerProcess
from reference.protocol.errors import ErrorCode
from reference.protocol.records import Record, RecordBatch, build_batch, iter_batches
from tests.broker.conftest import RawClient
from tests.broker.helpers import create_topic, fetch, produce

DISK_BYTES = 3 << 20
VALUE_BYTES = 60_000
WAIT_S = 30.0


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=True)


def test_a_full_disk_stops_the_node_and_loses_no_acknowledged_record(small_disk):
    broker = BrokerProcess(str(small_disk / "data"), overrides={"log.segment.bytes": str(1 << 20)},
                           stderr_path=str(small_disk.parent / "broker.stderr.log"))
    broker.start()
    client = RawClient(broker.bootstrap)
    assert create_topic(client, "filling").error_code == 0
    acked: list[bytes] = []
    refusal = None
    for number in range(10 * DISK_BYTES // VALUE_BYTES):
        value = b"%08d" % number + os.urandom(VALUE_BYTES)
        try:
            answer = produce(client, "filling", build_batch([Record(timestamp=int(time.time() * 1000), value=value)]))
        except ConnectionError as closed:
            refusal = closed
            break
        if answer.error_code != ErrorCode.NONE:
            refusal = ErrorCode(answer.error_code)
            break
        acked.append(value)
    client.close()
    assert refusal in (ErrorCode.KAFKA_STORAGE_ERROR,) or isinstance(refusal, ConnectionError), refusal
    assert acked, "some records fit before the disk filled"
    broker.process.wait(WAIT_S)
    assert broker.process.returncode != 0
    with open(broker.stderr_path) as log:
        stopped = [line for line in log if line.startswith("kspec broker 0 stopped:")]
    assert len(stopped) == 1 and "log dir" in stopped[0], stopped
    broker.process.stdout.close()

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    broker.start()
    client = RawClient(broker.bootstrap)
    try:
        stored: list[bytes] = []
        offset = 0
        while offset < len(acked) + 1:
            answer = fetch(client, "filling", offset, max_bytes=4 << 20)
            assert answer.error_code == ErrorCode.NONE
            batches = list(iter_batches(answer.records or b""))
            if not batches:
                break
            for batch in batches:
                assert isinstance(batch, RecordBatch) and batch.crc_is_valid(), "no torn batch is served"
                stored += [record.value for record in batch.records()]
                offset = batch.next_offset
        assert stored[:len(acked)] == acked, "every acknowledged record, in order"
        assert len(stored) <= len(acked) + 1, "at most the one unanswered record besides"
    finally:
        client.close()
        broker.stop()
