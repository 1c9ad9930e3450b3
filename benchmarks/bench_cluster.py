"""Replicated cluster: throughput, latency and failover of 3 `kspec broker` nodes on one machine.

In one run, with confluent-kafka and 1 KiB records over PARTITIONS partitions:

- single-node throughput: one node, RF=1, acks=1 (the baseline);
- cluster throughput: three nodes in combined mode, RF=3, min.insync.replicas=2, acks=all,
  the partitions' leaders spread over the nodes; reported as MB/s and as a ratio to the
  baseline (issue 4's target: at least 0.5). Both also as the brokers' CPU seconds per GB
  produced (user + system, all three nodes for the cluster): on a machine others share,
  the rates swing with their load, the CPU per GB much less. The single node and the
  cluster run side by side (idle, each costs the other a few hundredths of a core) and
  are measured in --pairs alternating turns, single node first; each turn's ratio is its
  cluster figure over the single-node figure just before it, and the median of those
  ratios is the result, so a burst of load elsewhere moves one pair, not the verdict;
- produce latency at half the cluster's throughput: records paced at that rate for
  --latency-s seconds, each timed from produce() to its delivery report (p50, p99, max),
  with one request in flight per connection (LATENCY_PRODUCER): a broker handles one
  request per connection at a time, as Kafka mutes a channel, so requests sent behind an
  acks=all produce only queue there, each a replication round of its own; with one in
  flight the records that arrive meanwhile leave together in the next request;
- failover: the leader of a one-partition RF=3 topic is killed with SIGKILL while a
  producer keeps sending; the time from the kill to the first delivery report of a record
  produced after it (so acked by the new leader) is measured --kills times, the node
  restarted and back in the ISR between kills (target: under 3 s), once with a producer that
  refreshes metadata every 250 ms (FAILOVER_PRODUCER) and once with librdkafka's own leader
  lookup (DEFAULT_LOOKUP_PRODUCER). Beside it, the time from the kill until a surviving
  node's Metadata names the new leader: the cluster's share. Each kill says whether the
  victim was also the active controller, which adds a controller election.

Each measured phase starts from a written-back, dropped page cache (os.sync, then
/proc/sys/vm/drop_caches when the script may write it; it says so when not). On this VM a
page cache that grows into guest memory never touched before makes every write dearer, so
without it the figures fell from phase to phase (five 5 s latency runs at 115,000 records/s
in a row: p50 6.1, 8.3, 66.8, 58.4, 47.8 ms; with the cache dropped before each: 6.1-6.4 ms
every time, the nodes' CPU flat at 5.6 s instead of rising to 7.0 s).

Failover depends on these timeouts, tuned as the fault runs tune them (FAILOVER_TIMEOUTS):
a node heartbeats every 250 ms and is fenced after 1.5 s without one, which moves its
leaderships to another ISR member and takes it out of every ISR in the same metadata
records; a controller quorum leader is replaced after 0.5-1 s (the killed node may be the
active controller, and a new controller starts every broker's session afresh).

And on the client's lookup of the new leader. With its defaults, librdkafka asks for the
metadata of a partition whose leader's connection is down once a second; the answer that
names the new leader also leaves out the fenced broker (Metadata lists unfenced brokers
only, as Kafka's KRaft brokers do), librdkafka decommissions that broker while the partition
is still delegated to it, forgets the new leader again (its debug log: "Reverting from
preferred replica 1 to leader -1") and sends only after the next lookup, a second later: 3.0 s
after a kill whose new leader was ready at 1.5 s. FAILOVER_PRODUCER refreshes metadata every
250 ms instead (topic.metadata.refresh.interval.ms), which bounds both waits.

    python benchmarks/bench_cluster.py [--mb 64] [--pairs 3] [--latency-s 10] [--kills 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from confluent_kafka import KafkaException, Producer
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
DROP_CACHES = "/proc/sys/vm/drop_caches"
PACING_S = 0.001  # the latency phase sends what is due, then serves delivery reports for up to this long
FAILOVER_PRODUCER = {"linger.ms": 0, "topic.metadata.refresh.interval.ms": 250}  # see the docstring
DEFAULT_LOOKUP_PRODUCER = {"linger.ms": 0}  # librdkafka's own leader lookup


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the futures
    admin.create_topics([NewTopic(topic, partitions, replication_factor, config=configs)])[topic].result(WAIT_S)


def wait_until(condition, what: str):
    """The condition's first true value, polled for at most WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {WAIT_S} s: {what}")
        time.sleep(0.05)
    return value


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


def cpu_s(nodes: list[BrokerProcess]) -> float:
    """User plus system CPU seconds the nodes' processes have used so far (Linux /proc)."""
    total_ticks = 0
    for node in nodes:
        with open(f"/proc/{node.process.pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total_ticks += int(fields[11]) + int(fields[12])  # utime, stime (proc(5) fields 14 and 15)
    return total_ticks / os.sysconf("SC_CLK_TCK")


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


def settle_page_cache() -> None:
    """Write dirty pages back and drop the page cache, so a phase does not pay for an earlier one's."""
    os.sync()
    try:
        with open(DROP_CACHES, "w", encoding="ascii") as f:
            f.write("3\n")
    except OSError as e:
        print(f"page cache kept ({DROP_CACHES}: {e.strerror}); later phases may run slower", flush=True)


def measured_throughput(bootstrap: str, topic: str, acks: str, total_bytes: int,
                        nodes: list[BrokerProcess]) -> tuple[float, float]:
    """(MB/s, the nodes' CPU seconds per GB) of one throughput_mb_s run."""
    settle_page_cache()
    started_cpu_s = cpu_s(nodes)
    mb_s = throughput_mb_s(bootstrap, topic, acks, total_bytes)
    return mb_s, (cpu_s(nodes) - started_cpu_s) / (total_bytes / 1e9)


def latencies_ms(bootstrap: str, topic: str, records_per_s: float, seconds: float) -> list[float]:
    """Produce-to-ack latency of records paced at records_per_s (acks=all), as librdkafka
    measures it for each message (Message.latency(): from produce() to its delivery report).
    Pacing sends what is due each millisecond, so the client costs about what it does in the
    throughput runs and half the throughput is about half the machine's load."""
    client = producer(bootstrap, "all", **LATENCY_PRODUCER)
    value = os.urandom(RECORD_BYTES)
    measured: list[float] = []
    failed = []

    def on_delivery(error, message) -> None:
        if error is None:
            measured.append(message.latency() * 1000)
        else:
            failed.append(error)

    count = int(records_per_s * seconds)
    sent = 0
    started = time.perf_counter()
    while sent < count:
        due = min(count, int((time.perf_counter() - started) * records_per_s) + 1)
        for i in range(sent, due):
            produce(client, topic, value, i % PARTITIONS, on_delivery)
        sent = due
        client.poll(PACING_S)
    client.flush(WAIT_S)
    if failed or len(measured) != count:
        raise RuntimeError(f"{topic}: {len(measured)} of {count} acked ({failed[:1]})")
    return measured


def leader_of(cluster: ClusterProcess, topic: str) -> int:
    """Partition 0's leader, once a node's Metadata names one (node ids start at 1)."""
    return wait_until(lambda: max(cluster.leader_of(topic, 0), 0), f"a leader of {topic}")


def leader_seen_by(admin: AdminClient, topic: str) -> int:
    """Partition 0's leader in the Metadata of the nodes `admin` asks (-1: none, or no answer)."""
    try:
        return admin.list_topics(topic, timeout=1).topics[topic].partitions[0].leader
    except KafkaException:
        return -1


def isr_of(cluster: ClusterProcess, topic: str) -> list[int]:
    metadata = cluster.metadata(topic)
    if metadata is None or topic not in metadata.topics or 0 not in metadata.topics[topic].partitions:
        return []
    return sorted(metadata.topics[topic].partitions[0].isrs)


def failover_s(cluster: ClusterProcess, topic: str, client_config: dict) -> tuple[float, float, bool]:
    """Seconds from SIGKILL of the partition's leader to a surviving node's Metadata naming
    another leader, and to the first ack of a record sent after the kill; and whether the
    victim was the active controller too."""
    victim = leader_of(cluster, topic)
    was_controller = cluster.controller_id() == victim
    client = producer(cluster.bootstrap, "all", **client_config)
    survivors = AdminClient({"bootstrap.servers": ",".join(address for node_id, address in cluster.addresses.items()
                                                           if node_id != victim), "log_level": 0})
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
    elected_s = None
    while not acked_after_kill and time.monotonic() < deadline:
        client.produce(topic, os.urandom(RECORD_BYTES), partition=0, on_delivery=sent_at(time.perf_counter()))
        client.poll(0.01)
        if elected_s is None and leader_seen_by(survivors, topic) not in (victim, -1):
            elected_s = time.perf_counter()
    client.flush(WAIT_S)
    if not acked_after_kill:
        raise RuntimeError(f"{topic}: nothing acked within {WAIT_S} s of killing node {victim}")
    elected_s = elected_s or acked_after_kill[0]  # the ack came first: Metadata was asked too late to tell
    cluster.start_node(victim)
    wait_until(lambda: isr_of(cluster, topic) == sorted(cluster.nodes), f"node {victim} back in the ISR")
    return elected_s - killed_s, acked_after_kill[0] - killed_s, was_controller


def print_failover(name: str, kills: list[tuple[float, float, bool]]) -> None:
    each = ", ".join(f"{acked:.2f}{' (controller too)' if controller else ''}" for _, acked, controller in kills)
    print(f"leader kill -9, {name}: new leader in Metadata after median "
          f"{statistics.median(elected for elected, _, _ in kills):.2f} s; first ack on it after median "
          f"{statistics.median(acked for _, acked, _ in kills):.2f} s, each {each} s "
          f"(target < {FAILOVER_TARGET_S:.0f} s)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=64, help="MB produced for each throughput figure")
    parser.add_argument("--pairs", type=int, default=3, help="alternating single-node / cluster throughput turns")
    parser.add_argument("--latency-s", type=float, default=10.0, help="seconds of paced produce for latency")
    parser.add_argument("--kills", type=int, default=3, help="leader kills for the failover figure")
    args = parser.parse_args()
    total_bytes = args.mb * 1_000_000
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as root:
        with (BrokerProcess(os.path.join(root, "single")) as single,
              ClusterProcess(os.path.join(root, "cluster"), NODES, overrides=FAILOVER_TIMEOUTS) as cluster):
            create_topic(single.bootstrap, "single", PARTITIONS, 1)
            create_topic(cluster.bootstrap, "replicated", PARTITIONS, NODES, **{"min.insync.replicas": "2"})
            wait_until(lambda: len({cluster.leader_of("replicated", p) for p in range(PARTITIONS)} - {-1}) == NODES,
                       "one leader per node")
            pairs = []
            for turn in range(1, args.pairs + 1):
                single_mb_s, single_cpu_s_per_gb = measured_throughput(single.bootstrap, "single", "1", total_bytes,
                                                                       [single])
                cluster_mb_s, cluster_cpu_s_per_gb = measured_throughput(cluster.bootstrap, "replicated", "all",
                                                                         total_bytes, list(cluster.nodes.values()))
                pairs.append((single_mb_s, cluster_mb_s))
                print(f"turn {turn}: single node, RF=1, acks=1: {single_mb_s:6.1f} MB/s (broker CPU "
                      f"{single_cpu_s_per_gb:.1f} s/GB); 3 nodes, RF=3, acks=all: {cluster_mb_s:6.1f} MB/s (CPU of "
                      f"the three nodes {cluster_cpu_s_per_gb:.1f} s/GB); ratio {cluster_mb_s / single_mb_s:.2f}",
                      flush=True)
            cluster_mb_s = statistics.median(c for _, c in pairs)
            print(f"single node, RF=1, acks=1: median {statistics.median(s for s, _ in pairs):.1f} MB/s; "
                  f"3 nodes, RF=3, acks=all: median {cluster_mb_s:.1f} MB/s; ratio median "
                  f"{statistics.median(c / s for s, c in pairs):.2f} (target >= 0.5)", flush=True)
            rate = cluster_mb_s * 1e6 / RECORD_BYTES / 2
            settle_page_cache()
            measured = sorted(latencies_ms(cluster.bootstrap, "replicated", rate, args.latency_s))
            p50, p99 = statistics.median(measured), measured[int(len(measured) * 0.99) - 1]
            print(f"latency at {rate:,.0f} records/s (half load), acks=all: p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
                  f"max {measured[-1]:.1f} ms ({len(measured)} records)", flush=True)
            create_topic(cluster.bootstrap, "failover", 1, NODES, **{"min.insync.replicas": "2"})
            wait_until(lambda: isr_of(cluster, "failover") == sorted(cluster.nodes), "a full ISR")
            for name, client_config in (("metadata refresh 250 ms", FAILOVER_PRODUCER),
                                        ("librdkafka's default lookup", DEFAULT_LOOKUP_PRODUCER)):
                print_failover(name, [failover_s(cluster, "failover", client_config) for _ in range(args.kills)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
