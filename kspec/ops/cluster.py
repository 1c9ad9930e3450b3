"""`kspec cluster status`: the brokers, the controller quorum, and partitions that are
under-replicated or offline (as kafka-metadata-quorum.sh and kafka-topics.sh --describe
--under-replicated-partitions / --unavailable-partitions show them).

Brokers and partitions come from DescribeCluster and Metadata through confluent-kafka. The
quorum comes from DescribeQuorum (KIP-595), which confluent-kafka does not offer, so that one
request goes through kafka-python, and only when the broker advertises it in ApiVersions.
"""
from __future__ import annotations

import os
import secrets
import shlex
import signal
import tempfile
import threading
import time

import click
from confluent_kafka.admin import AdminClient
from kafka.errors import KafkaError as KafkaPythonError
from kafka.protocol.api_key import ApiKey

from kspec.ops.common import (EXIT_CODES_EPILOG, REQUEST_TIMEOUT_S, ApiVersionsProbe, BadUsage, ConnectionWatch, OpsError,
                              OpsGroup, await_metadata, bootstrap_option, client_config, node_list, print_table, result)

NO_LEADER = -1
NO_TIMESTAMP = -1


@click.group(cls=OpsGroup, invoke_without_command=True, epilog=EXIT_CODES_EPILOG)
@click.option("--nodes", type=click.IntRange(1), help="Start a local reference cluster of this many nodes.")
@click.option("--controllers", type=click.IntRange(1),
              help="Run this many controller-only nodes (ids 3001..) and make the --nodes brokers only.")
@click.option("--base-port", type=click.IntRange(1, 65535 - 64),
              help="Node i listens on base-port + i - 1, controllers after the brokers (default: free ports).")
@click.option("--data-dir", type=click.Path(file_okay=False), help="Nodes' data dirs go under it (default: a new temp dir).")
@click.option("--secure", is_flag=True, help="Give every broker a SASL_SSL listener (generated certificates, an admin "
                                              "user, StandardAuthorizer) and print the client properties.")
@click.pass_context
def cluster(ctx: click.Context, nodes: int | None, controllers: int | None, base_port: int | None,
            data_dir: str | None, secure: bool) -> None:
    """Start a local reference cluster, or inspect a cluster.

    With --nodes N: one `kspec broker` process per node on 127.0.0.1, each with its own port
    and data dir, in combined mode (every node a broker and a controller quorum voter,
    process.roles=broker,controller). With --controllers M as well, KRaft's separate layout:
    M controller-only nodes 3001..3000+M form the quorum and serve no clients, and the N nodes
    1..N are broker-only (process.roles=broker); the bootstrap list names the brokers. Once
    every partition has a leader it prints each node's pid and command line, which node is
    what, the commands that stop (kill -9), start, pause (SIGSTOP) and resume one node (by
    id, controllers too), and a line with bootstrap=HOST:PORT,...; Ctrl-C stops all. The node
    commands are what `kspec conformance` takes to kill leaders.

    \b
    Examples:
      kspec cluster --nodes 3 --base-port 9092 --data-dir /tmp/kspec-cluster
      kspec cluster --nodes 3 --controllers 3
      kspec cluster --nodes 3 --secure      # SASL_SSL everywhere; prints the admin's client properties
      kspec conformance --bootstrap-servers 127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094 \\
          --node-stop-command 'python -m conformance.nodes stop /tmp/kspec-cluster {node_id}' \\
          --node-start-command 'python -m conformance.nodes start /tmp/kspec-cluster {node_id}'
      kspec cluster status -b 127.0.0.1:9092
    """
    if ctx.invoked_subcommand is not None:
        return
    if nodes is None:
        if controllers is not None:
            raise BadUsage("--controllers needs --nodes: the brokers that go with the controllers "
                           "(see `kspec cluster --help`)")
        click.echo(ctx.get_help())
        return
    run_local_cluster(nodes, base_port, data_dir or tempfile.mkdtemp(prefix="kspec-cluster-"), controllers or 0,
                      secure)


def run_local_cluster(nodes: int, base_port: int | None, data_dir: str, controllers: int = 0,
                      secure: bool = False) -> None:
    from conformance.nodes import LocalCluster
    stopping = threading.Event()
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signal_number, lambda *_: stopping.set())
    local_cluster = LocalCluster(data_dir, nodes, controllers=controllers, base_port=base_port,
                                 overrides=secure_overrides(data_dir) if secure else None)
    bootstrap = secure_listeners(local_cluster, data_dir) if secure else local_cluster.bootstrap
    try:
        local_cluster.start()
    except RuntimeError as e:
        local_cluster.stop()
        raise OpsError(str(e)) from None
    for node_id in local_cluster.node_ids:
        click.echo(f"node {node_id} pid={local_cluster.pid(node_id)} {shlex.join(local_cluster.node_command(node_id))}")
    click.echo("node control: " + " ".join(f"--node-{verb}-command {shlex.quote(local_cluster.command(verb))}"
                                          for verb in ("stop", "start", "pause", "resume")))
    layout = local_cluster.layout
    if controllers:
        click.echo(f"brokers (process.roles=broker): {','.join(map(str, layout.broker_ids))}  "
                   f"controllers (process.roles=controller): {','.join(map(str, layout.controller_ids))}")
    else:
        click.echo(f"nodes (process.roles=broker,controller): {','.join(map(str, layout.broker_ids))}")
    if secure:
        properties = os.path.join(data_dir, CLIENT_PROPERTIES)
        click.echo(f"client properties ({properties}, for --command-config and --client-property):")
        with open(properties) as f:
            click.echo("".join(f"  {line}" for line in f))
    click.echo(f"kspec cluster ready nodes={nodes}{f' controllers={controllers}' if controllers else ''} "
               f"bootstrap={bootstrap} data-dir={data_dir}")
    while not stopping.wait(1.0):
        pass
    local_cluster.stop()
    click.echo("kspec cluster stopped")


CLIENT_PROPERTIES = "client.properties"
SECURE_ADMIN = "admin"


def secure_overrides(data_dir: str, ip_addresses: tuple[str, ...] = ()) -> dict[str, str]:
    """Broker properties of a secured local cluster: certificates made for it, a SASL_SSL listener
    with PLAIN and SCRAM for clients and between brokers (inter.broker.listener.name), a SASL_SSL
    controller listener (controller.listener.names=CONTROLLER) for the quorum and the brokers'
    RPCs to the controller, the nodes authenticating as the admin (PLAIN), and StandardAuthorizer
    with the admin as the super user. Writes the admin's client properties to
    data_dir/client.properties (mode 0600). ip_addresses: the nodes' addresses other than
    127.0.0.1, named in the server certificate so that clients can check them."""
    from kspec.ops.pki import make_pki
    from reference.security.jaas import PLAIN_LOGIN_MODULE
    pki = make_pki(os.path.join(data_dir, "pki"), ip_addresses)
    password = secrets.token_urlsafe(12)
    with open(os.open(os.path.join(data_dir, CLIENT_PROPERTIES), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
              "w") as f:
        f.write(f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username={SECURE_ADMIN}\n"
                f"sasl.password={password}\nssl.ca.location={pki.ca_path}\n")
    jaas = f'{PLAIN_LOGIN_MODULE} required username="{SECURE_ADMIN}" password="{password}" user_{SECURE_ADMIN}="{password}";'
    return {
        "listener.security.protocol.map": "CONTROLLER:SASL_SSL,SASL_SSL:SASL_SSL",
        "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "SASL_SSL",
        "sasl.mechanism.controller.protocol": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.server_pem_path, "ssl.truststore.location": pki.ca_path,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas, "listener.name.controller.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{SECURE_ADMIN}",
    }


def secure_listeners(local_cluster, data_dir: str) -> str:
    """Give each node a controller listener at its voter address and a SASL_SSL listener on a port
    of its own; return the brokers' SASL_SSL bootstrap list, which the cluster's own readiness
    checks use too, with the admin's client properties."""
    from reference.config import read_properties_file
    from reference.process import free_ports
    layout = local_cluster.layout
    ports = free_ports(len(layout.nodes))
    for (node_id, node), port in zip(sorted(layout.nodes.items()), ports):
        node.listen = f"CONTROLLER://{layout.addresses[node_id]},SASL_SSL://127.0.0.1:{port}"
    bootstrap = ",".join(f"127.0.0.1:{port}" for (node_id, _), port in zip(sorted(layout.nodes.items()), ports)
                         if node_id in layout.broker_ids)
    local_cluster.client_bootstrap = bootstrap
    local_cluster.client_config = read_properties_file(os.path.join(data_dir, CLIENT_PROPERTIES))
    return bootstrap


@cluster.command(epilog=EXIT_CODES_EPILOG)
@bootstrap_option
def status(bootstrap: str) -> None:
    """Show brokers, the controller quorum, and under-replicated and offline partitions.

    The quorum (leader, epoch, voters and their lag) is shown when the broker offers
    DescribeQuorum; otherwise the output says it is not offered.

    \b
    Example:
      kspec cluster status -b 127.0.0.1:9092
    """
    watch = ConnectionWatch()
    admin = AdminClient(client_config(bootstrap, watch))
    metadata = await_metadata(admin, watch, bootstrap)
    description = result("cannot describe the cluster", admin.describe_cluster(request_timeout=REQUEST_TIMEOUT_S))
    controller = description.controller.id if description.controller else None
    click.echo(f"Cluster: {description.cluster_id}  Controller: {controller if controller is not None else '-'}  "
               f"Brokers: {len(description.nodes)}")
    print_table(["BROKER", "HOST", "PORT", "RACK", "CONTROLLER"],
                [[n.id, n.host, n.port, n.rack, "yes" if n.id == controller else ""]
                 for n in sorted(description.nodes, key=lambda n: n.id)])
    click.echo()
    show_quorum(bootstrap)
    click.echo()
    show_partition_health(metadata)


def show_quorum(bootstrap: str) -> None:
    probe = ApiVersionsProbe(bootstrap)
    try:
        offered = probe.offers(ApiKey.DescribeQuorum)
        if offered is None:
            click.echo(f"Controller quorum: unknown (cannot read the broker's ApiVersions: {probe.failure}).")
            return
        if not offered:
            click.echo("Controller quorum: not offered by this broker (DescribeQuorum is not in its ApiVersions).")
            return
        quorum = probe.client.describe_metadata_quorum()
    except KafkaPythonError as e:
        raise OpsError(f"cannot describe the controller quorum: {e}") from None
    finally:
        probe.close()
    partition = quorum["topics"][0]["partitions"][0]
    if partition.get("error"):
        raise OpsError(f"cannot describe the controller quorum: {partition['error']}")
    leader_end_offset = next((v["log_end_offset"] for v in partition["current_voters"]
                              if v["replica_id"] == partition["leader_id"]), partition["high_watermark"])
    click.echo(f"Controller quorum: leader {partition['leader_id']}  epoch {partition['leader_epoch']}  "
               f"high watermark {partition['high_watermark']}")
    now_ms = int(time.time() * 1000)
    rows = []
    for role, replicas in (("voter", partition["current_voters"]), ("observer", partition.get("observers", []))):
        for replica in replicas:
            is_leader = replica["replica_id"] == partition["leader_id"]
            rows.append([replica["replica_id"], "leader" if is_leader else role, replica["log_end_offset"],
                         leader_end_offset - replica["log_end_offset"],
                         age_ms(now_ms, replica.get("last_fetch_timestamp", NO_TIMESTAMP)),
                         age_ms(now_ms, replica.get("last_caught_up_timestamp", NO_TIMESTAMP))])
    print_table(["NODE", "ROLE", "LOG-END-OFFSET", "LAG", "LAST-FETCH-AGO-MS", "LAST-CAUGHT-UP-AGO-MS"], rows)


def age_ms(now_ms: int, timestamp_ms: int) -> int | None:
    return None if timestamp_ms == NO_TIMESTAMP else max(0, now_ms - timestamp_ms)


def show_partition_health(metadata) -> None:
    """Under-replicated: fewer in-sync replicas than replicas. Offline: no leader."""
    under_replicated, offline = [], []
    for name, topic in sorted(metadata.topics.items()):
        for index, p in sorted(topic.partitions.items()):
            row = [name, index, p.leader if p.leader != NO_LEADER else None, node_list(p.replicas), node_list(p.isrs)]
            if p.leader == NO_LEADER:
                offline.append(row)
            elif len(p.isrs) < len(p.replicas):
                under_replicated.append(row)
    columns = ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"]
    for label, rows in (("Under-replicated partitions", under_replicated), ("Offline partitions", offline)):
        click.echo(f"{label}: {len(rows) or 'none'}")
        if rows:
            print_table(columns, rows)
