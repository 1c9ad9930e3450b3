"""`kspec produce` and `kspec consume`: lines in, records out, with keys, headers and offsets."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections import defaultdict

from kafka.protocol.api_key import ApiKey

from .helpers import KSPEC, kspec

ROUND_TRIP_LINES = 10_000
SIGINT_WAIT_S = 20.0


def lines_with_headers_and_keys(count: int) -> list[str]:
    return [f"seq:{i},source:cli\tkey-{i % 101}\tvalue-{i}" for i in range(count)]


def test_produce_then_consume_round_trips_10k_lines_with_keys_and_headers(target, topic):
    lines = lines_with_headers_and_keys(ROUND_TRIP_LINES)
    produced = kspec("produce", topic, "-b", target.bootstrap, "--key-separator", "\\t", "--parse-headers",
                     stdin="\n".join(lines) + "\n")
    assert produced.returncode == 0, produced.stderr
    assert produced.stderr.strip() == f"Produced {ROUND_TRIP_LINES} records to {topic}."

    consumed = kspec("consume", topic, "-b", target.bootstrap, "--from-beginning",
                     "--max-messages", str(ROUND_TRIP_LINES), "--print", "partition,offset,headers,key,value")
    assert consumed.returncode == 0, consumed.stderr
    assert f"Processed a total of {ROUND_TRIP_LINES} messages." in consumed.stderr
    printed = [line.split("\t", 2) for line in consumed.stdout.splitlines()]
    assert sorted(rest for _, _, rest in printed) == sorted(lines)
    # per partition: contiguous offsets from 0, and one key's records in the order they were sent (ORD-1, ORD-2)
    by_partition = defaultdict(list)
    for partition, offset, rest in printed:
        by_partition[int(partition)].append((int(offset), rest))
    for records in by_partition.values():
        assert [offset for offset, _ in records] == list(range(len(records)))
        sequence = [int(rest.split(",", 1)[0].removeprefix("seq:")) for _, rest in records]
        assert sequence == sorted(sequence)

    # an independent client reads the same keys and headers
    independent = target.read_all(topic, [0, 1, 2], ROUND_TRIP_LINES)
    assert len(independent) == ROUND_TRIP_LINES
    sample = {r.value.decode(): (r.key.decode(), dict((k, v.decode()) for k, v in r.headers)) for r in independent}
    assert sample["value-1234"] == ("key-{}".format(1234 % 101), {"seq": "1234", "source": "cli"})


def test_produce_options_reach_the_broker(target, topic):
    run = kspec("produce", topic, "-b", target.bootstrap, "--partition", "2", "--acks", "1",
                "--compression", "gzip", stdin="one\ntwo\nthree\n")
    assert run.returncode == 0, run.stderr
    records = target.read_all(topic, [2], 3)
    assert [(r.partition, r.offset, r.key, r.value) for r in records] == [
        (2, 0, None, b"one"), (2, 1, None, b"two"), (2, 2, None, b"three")]


def test_consume_from_a_partition_and_offset_as_json_lines(target, topic):
    target.produce(topic, [(f"k{i}".encode(), f"v{i}".encode(), [("h", b"x")]) for i in range(6)], partition=1)
    run = kspec("consume", topic, "-b", target.bootstrap, "--partition", "1", "--offset", "4", "--timeout-ms", "1500",
                "--format", "json", "--print", "partition,offset,timestamp,headers,key,value")
    assert run.returncode == 0, run.stderr
    printed = [json.loads(line) for line in run.stdout.splitlines()]
    assert [(p["partition"], p["offset"], p["key"], p["value"], p["headers"]) for p in printed] == [
        (1, 4, "k4", "v4", [["h", "x"]]), (1, 5, "k5", "v5", [["h", "x"]])]
    assert all(p["timestamp"] > 1_600_000_000_000 for p in printed)


def test_consume_read_committed_reads_plain_records(target, topic):
    target.produce(topic, [(None, b"plain", [])], partition=0)
    run = kspec("consume", topic, "-b", target.bootstrap, "--isolation", "read_committed", "--from-beginning",
                "--max-messages", "1")
    assert (run.returncode, run.stdout) == (0, "plain\n")


def test_transactional_produce_commits_or_says_the_broker_lacks_transactions(target, topic):
    run = kspec("produce", topic, "-b", target.bootstrap, "--transactional-id", f"tx-{topic}", stdin="t1\nt2\n")
    if not target.offers(ApiKey.AddPartitionsToTxn):
        assert run.returncode == 1
        assert "does not offer transactions" in run.error_line()
        return
    assert run.returncode == 0, run.stderr  # TXN-1: committed, so read_committed sees both
    consumed = kspec("consume", topic, "-b", target.bootstrap, "--isolation", "read_committed",
                     "--from-beginning", "--max-messages", "2")
    assert sorted(consumed.stdout.split()) == ["t1", "t2"]


def test_ctrl_c_stops_the_consumer_cleanly_and_reports_the_count(target, topic):
    process = subprocess.Popen([*KSPEC, "consume", topic, "-b", target.bootstrap,
                                "--partition", "0", "--offset", "earliest"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        target.produce(topic, [(None, b"first", []), (None, b"second", [])], partition=0)
        seen, deadline = b"", time.monotonic() + SIGINT_WAIT_S
        while seen.count(b"\n") < 2 and time.monotonic() < deadline:
            if select.select([process.stdout], [], [], 0.1)[0]:
                seen += os.read(process.stdout.fileno(), 4096)
        assert seen == b"first\nsecond\n"  # printed while still running
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=SIGINT_WAIT_S)
        stderr = stderr.decode()
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    assert "Traceback" not in stderr
    assert stderr.strip() == "Processed a total of 2 messages."
