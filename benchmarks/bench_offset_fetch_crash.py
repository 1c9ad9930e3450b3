"""librdkafka issue 5040 against the reference, and kspec's way around it.

A 3-node reference cluster (FAST_FAILOVER, leader balance checked every second) holds a group's
committed offsets. Two processes read them in a loop, each restarted whenever it dies: one with
AdminClient.list_consumer_group_offsets (ListConsumerGroupOffsets), one with
kspec/ops/rdkafka.py committed_offsets (a consumer's OffsetFetch, used by `kspec groups`, the
mirror and the fault harness). Meanwhile the group's coordinator is killed -9 and restarted,
`--rounds` times, so that the readers meet NOT_COORDINATOR while the coordinator moves and
moves back. Printed: each reader's calls answered, errors by name, and deaths by signal
(SIGSEGV -11, SIGABRT -6). The admin reader dying and the consumer reader never dying is the
bug and its workaround.

    .venv/bin/python benchmarks/bench_offset_fetch_crash.py [--rounds 8]
"""
from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import threading
import time

READERS = ("admin", "consumer")
TOPIC, GROUP, PARTITIONS, COMMITTED = "t", "g", 3, 5
CALL_TIMEOUT_S = 5.0
DOWN_S, UP_S = 4.0, 6.0  # a round: the coordinator down this long, then up this long


def read_forever(how: str, bootstrap: str) -> None:
    """One reader: a line per call, until killed."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
    from confluent_kafka.admin import AdminClient

    from kspec.ops.rdkafka import committed_offsets
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    while True:
        try:
            if how == "admin":
                admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)],
                                                  request_timeout=CALL_TIMEOUT_S)[GROUP].result(2 * CALL_TIMEOUT_S)
            else:
                committed_offsets({"bootstrap.servers": bootstrap, "group.id": GROUP, "log_level": 0},
                                  [(TOPIC, p) for p in range(PARTITIONS)], CALL_TIMEOUT_S)
            print("ok", flush=True)
        except KafkaException as e:
            print(e.args[0].name(), flush=True)
        time.sleep(0.05)


def main(rounds: int) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from reference.process import FAST_FAILOVER, ClusterProcess
    cluster = ClusterProcess(tempfile.mkdtemp(prefix="bench-offset-fetch-"), 3,
                             overrides={**FAST_FAILOVER, "leader.imbalance.check.interval.seconds": "1"})
    cluster.start()
    deaths, answers = collections.Counter(), collections.Counter()
    readers: dict[str, subprocess.Popen] = {}
    stopping = threading.Event()

    def supervise(how: str) -> None:
        while not stopping.is_set():
            reader = subprocess.Popen([sys.executable, __file__, "--read", how, cluster.bootstrap],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                      env={**os.environ, "PYTHONPATH": os.getcwd()})
            readers[how] = reader
            for line in reader.stdout:
                answers[(how, line.strip())] += 1
            if reader.wait() != 0 and not stopping.is_set():
                deaths[(how, reader.returncode)] += 1

    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(60)
        committer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
        committer.commit(offsets=[TopicPartition(TOPIC, p, COMMITTED) for p in range(PARTITIONS)], asynchronous=False)
        committer.close()
        for how in READERS:
            threading.Thread(target=supervise, args=(how,), daemon=True).start()
        for round_number in range(rounds):
            coordinator = admin.describe_consumer_groups([GROUP])[GROUP].result(30).coordinator.id
            cluster.kill(coordinator)
            time.sleep(DOWN_S)
            cluster.start_node(coordinator)
            time.sleep(UP_S)
            print(f"round {round_number + 1}/{rounds}: coordinator {coordinator} killed and restarted", flush=True)
    finally:
        stopping.set()
        for reader in readers.values():
            reader.kill()
        cluster.stop()
    for how in READERS:
        calls = {answer: n for (who, answer), n in sorted(answers.items()) if who == how}
        died = {signal: n for (who, signal), n in sorted(deaths.items()) if who == how}
        print(f"{how:8s} answers {calls}  deaths by exit status {died or 'none'}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--read", nargs=2, metavar=("HOW", "BOOTSTRAP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.read:
        read_forever(*args.read)
    else:
        main(args.rounds)
