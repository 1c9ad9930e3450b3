"""Replicated cluster: throughput, latency and failover of 3 `kspec broker` nodes on one machine.

In one run, with confluent-kafka and 1 KiB records over PARTITIONS partitions:

- single-node throughput: one node, RF=1, acks=1 (the baseline);
- cluster throughput: three nodes in combined mode, RF=3, min.insync.replicas=2, acks=all,
  the partitions' leaders spread over the nodes; reported as MB/s and as a ratio to the
  baseline (issue 4's target: at least 0.5);
- produce latency at half the cluster's throughput: records paced at that rate for
  --latency-s seconds, each timed from produce() to its delivery report (p50, p99, max),
  with one request in flight per connection (LATENCY_PRODUCER): a broker handles one
  request per connection at a time, as Kafka mutes a channel, so requests sent behind an
  acks=all produce only queue there, each a replication round of its own; with one in
  flight the records that arrive meanwhile leave together in the next request;
- failover: the leader of a one-partition RF=3 topic is killed with SIGKILL while a
  producer keeps sending; the time from the kill to the first delivery report of a record
  produced after it (so acked by the new leader) is measured --kills times, the node
  restarted and back in the ISR between kills (target: under 3 s). Each kill says whether
  the victim was also the active controller, which adds a controller election.

Failover depends on these timeouts, tuned as the fault runs tune them (FAILOVER_TIMEOUTS):
a node heartbeats every 250 ms and is fenced after 1.5 s without one, which moves its
leaderships to another ISR member; a controller quorum leader is replaced after 0.5-1 s
(the killed node may be the active controller). The producer's own retry.backoff.ms and
topic.metadata.refresh.fast.interval.ms are librdkafka's defaults (100 ms each).

    python benchmarks/bench_cluster.py [--mb 64] [--latency-s 10] [--kills 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from reference.process import BrokerProcess, ClusterProcess

PARTITIONS = 3
RECORD_BYTES = 1024
NODES = 3
FAILOVER_TIMEOUTS = {
    "broker.heartbeat.interval.ms": "250",
    "broker.session.timeout.ms": "1500",
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "100",
}
WAIT_S = 60.0  # bound on every wait for the cluster (leaders, ISR, flushes)
SEND_TIMEOUT_MS = 30_000
FAILOVER_TARGET_S = 3.0
LATENCY_PRODUCER = {"max.in.flight.requests.per.connection": 1}


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the futures
    admin.create_topics([NewTopic(topic, partitions, replication_factor, config=configs)])[topic].result(WAIT_S)


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {WAIT_S} s: {what}")
        time.sleep(0.05)


def producer(bootstrap: str, acks: str, **config) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.size": 1_000_000,
                     "queue.buffering.max.kbytes": 1_048_576, "message.timeout.ms": SEND_TIMEOUT_MS,
                     "log_level": 0, **config})


def produce(client: Producer, topic: str, value: bytes, partition: int, on_delivery) -> None:
    """produce(), serving delivery reports while librdkafka's queue is full (BufferError)."""
    while True:
        try:
            client.produce(topic, value, partition=partition, on_delivery=on_delivery)
            return
        except BufferError:
            client.poll(0.01)


def throughput_mb_s(bootstrap: str, topic: str, acks: str, total_bytes: int) -> float:
    """MB/s for sending total_bytes of 1 KiB records over every partition, until all are acked."""
    client = producer(bootstrap, acks)
    value = os.urandom(RECORD_BYTES)
    failed = []
    started = time.perf_counter()
    for i in range(total_bytes // RECORD_BYTES):
        produce(client, topic, value, i % PARTITIONS, lambda error, _: error is not None and failed.append(error))
    if client.flush(WAIT_S * 5) or failed:
        raise RuntimeError(f"{topic}: not every record was acked ({failed[:1]})")
    return total_bytes / (time.perf_counter() - started) / 1e6


def latencies_ms(bootstrap: str, topic: str, records_per_s: float, seconds: float) -> list[float]:
    """Produce-to-ack latency of records paced at records_per_s (acks=all)."""
    client = producer(bootstrap, "all", **LATENCY_PRODUCER)
    value = os.urandom(RECORD_BYTES)
    measured: list[float] = []
    failed = []

    def timed(sent_s: float):
        def on_delivery(error, _) -> None:
            if error is None:
                measured.append((time.perf_counter() - sent_s) * 1000)
            else:
                failed.append(error)
        return on_delivery

    count = int(records_per_s * seconds)
    started = time.perf_counter()
    for i in range(count):
        due_s = started + i / records_per_s
        while (left_s := due_s - time.perf_counter()) > 0:
            client.poll(min(left_s, 0.001))
        produce(client, topic, value, i % PARTITIONS, timed(time.perf_counter()))
        client.poll(0)
    client.flush(WAIT_S)
    if failed or len(measured) != count:
        raise RuntimeError(f"{topic}: {len(measured)} of {count} acked ({failed[:1]})")
    return measured


def leader_of(cluster: ClusterProcess, topic: str) -> int:
    return cluster.leader_of(topic, 0)


def isr_of(cluster: ClusterProcess, topic: str) -> list[int]:
    metadata = cluster.metadata(topic)
    if metadata is None or topic not in metadata.topics or 0 not in metadata.topics[topic].partitions:
        return []
    return sorted(metadata.topics[topic].partitions[0].isrs)


def failover_s(cluster: ClusterProcess, topic: str) -> tuple[float, bool]:
    """Seconds from SIGKILL of the partition's leader to the first ack of a record sent after
    it, and whether the victim was the active controller too."""
    victim = leader_of(cluster, topic)
    was_controller = cluster.controller_id() == victim
    client = producer(cluster.bootstrap, "all", **{"linger.ms": 0, "retry.backoff.ms": 100})
    acked_after_kill: list[float] = []
    killed_s = None

    def sent_at(sent_s: float):
        def callback(error, _) -> None:
            if error is None and killed_s is not None and sent_s >= killed_s:
                acked_after_kill.append(time.perf_counter())
        return callback

    deadline = time.monotonic() + WAIT_S
    for i in range(20):  # warm: the producer knows the leader and has a connection to it
        client.produce(topic, b"warm-%d" % i, partition=0)
    client.flush(WAIT_S)
    killed_s = time.perf_counter()
    cluster.kill(victim)
    while not acked_after_kill and time.monotonic() < deadline:
        client.produce(topic, os.urandom(RECORD_BYTES), partition=0, on_delivery=sent_at(time.perf_counter()))
        client.poll(0.01)
    client.flush(WAIT_S)
    if not acked_after_kill:
        raise RuntimeError(f"{topic}: nothing acked within {WAIT_S} s of killing node {victim}")
    elapsed_s = acked_after_kill[0] - killed_s
    cluster.start_node(victim)
    wait_until(lambda: isr_of(cluster, topic) == sorted(cluster.nodes), f"node {victim} back in the ISR")
    return elapsed_s, was_controller


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=64, help="MB produced for each throughput figure")
    parser.add_argument("--latency-s", type=float, default=10.0, help="seconds of paced produce for latency")
    parser.add_argument("--kills", type=int, default=3, help="leader kills for the failover figure")
    args = parser.parse_args()
    total_bytes = args.mb * 1_000_000
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as root:
        with BrokerProcess(os.path.join(root, "single")) as single:
            create_topic(single.bootstrap, "single", PARTITIONS, 1)
            single_mb_s = throughput_mb_s(single.bootstrap, "single", "1", total_bytes)
        print(f"single node, RF=1, acks=1:   {single_mb_s:7.1f} MB/s", flush=True)
        with ClusterProcess(os.path.join(root, "cluster"), NODES, overrides=FAILOVER_TIMEOUTS) as cluster:
            create_topic(cluster.bootstrap, "replicated", PARTITIONS, NODES, **{"min.insync.replicas": "2"})
            wait_until(lambda: len({cluster.leader_of("replicated", p) for p in range(PARTITIONS)} - {-1}) == NODES,
                       "one leader per node")
            cluster_mb_s = throughput_mb_s(cluster.bootstrap, "replicated", "all", total_bytes)
            print(f"3 nodes, RF=3, acks=all:     {cluster_mb_s:7.1f} MB/s  "
                  f"({cluster_mb_s / single_mb_s:.2f} of single-node acks=1; target >= 0.5)", flush=True)
            rate = cluster_mb_s * 1e6 / RECORD_BYTES / 2
            measured = sorted(latencies_ms(cluster.bootstrap, "replicated", rate, args.latency_s))
            p50, p99 = statistics.median(measured), measured[int(len(measured) * 0.99) - 1]
            print(f"latency at {rate:,.0f} records/s (half load), acks=all: p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
                  f"max {measured[-1]:.1f} ms ({len(measured)} records)", flush=True)
            create_topic(cluster.bootstrap, "failover", 1, NODES, **{"min.insync.replicas": "2"})
            wait_until(lambda: isr_of(cluster, "failover") == sorted(cluster.nodes), "a full ISR")
            kills = [failover_s(cluster, "failover") for _ in range(args.kills)]
            each = ", ".join(f"{s:.2f}{' (controller too)' if controller else ''}" for s, controller in kills)
            print(f"leader kill -9 -> first ack on the new leader: median {statistics.median(s for s, _ in kills):.2f} s, "
                  f"each {each} s (target < {FAILOVER_TARGET_S:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
