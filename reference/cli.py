"""`kspec broker`: run one reference broker node until SIGTERM or SIGINT.

Configuration is layered as Kafka's: a .properties file (--config), then --set k=v
overrides, then the --listen/--data-dir/--node-id flags. Once listening, exactly one line
goes to stdout, e.g. `kspec broker 0 ready bootstrap=127.0.0.1:40123 data-dir=/tmp/x
listeners=PLAINTEXT://127.0.0.1:40123` (every listener, as advertised);
logs go to stderr. A stop flushes and closes every log and leaves the clean-shutdown marker.

With controller.quorum.voters set (e.g. `--set controller.quorum.voters=1@127.0.0.1:9092,...`)
the node joins a replicated cluster (reference/node/cluster.py) in the role process.roles
gives it: broker,controller (the default: combined mode, a voter whose --listen address must
be the one the voters list names), controller (a voter that serves no clients), or broker
(not in the voters: it observes the metadata log and serves clients).
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

import click

from reference.config import BrokerConfig, read_properties_file
from reference.node.broker import Broker
from reference.node.cluster import ClusterBroker
from reference.server.cluster import ClusterServer
from reference.server.server import BrokerServer, now_ms


class BadConfiguration(click.ClickException):
    """A property the broker cannot start with: one line on stderr, exit code 2."""

    exit_code = 2


@click.command()
@click.option("--listen", metavar="HOST:PORT", help="Address to listen on; port 0 picks a free port. [127.0.0.1:9092]")
@click.option("--data-dir", required=True, type=click.Path(file_okay=False), help="Directory for the logs (log.dirs).")
@click.option("--node-id", type=int, help="This node's id (node.id). [0]")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              help="A server .properties file with Kafka property names.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="A Kafka broker property; repeatable.")
def broker(listen: str | None, data_dir: str, node_id: int | None, config_file: str | None,
           overrides: tuple[str, ...]) -> None:
    """Run one reference broker node."""
    properties = read_properties_file(config_file) if config_file else {}
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or not key:
            raise click.UsageError(f"--set {override!r} is not KEY=VALUE; write e.g. --set num.partitions=3")
        properties[key.strip()] = value.strip()
    properties["log.dirs"] = data_dir
    if listen is not None:
        properties["listeners"] = listen
    if node_id is not None:
        properties["node.id"] = str(node_id)
    try:
        config = BrokerConfig.from_properties(properties)
    except ValueError as e:
        raise BadConfiguration(f"{e}; see the Kafka broker property names in reference/config.py") from None
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        broker_state = (ClusterBroker if config.controller_quorum_voters else Broker)(config, now_ms())  # replays the metadata log, recovers every partition
    except ValueError as e:  # e.g. a data dir whose meta.properties names another node
        raise BadConfiguration(str(e)) from None
    except OSError as e:  # the log dir cannot be read or written: Kafka shuts the broker down with this line
        logging.getLogger("kspec.broker").error("Shutdown broker because all log dirs in %s have failed: %s",
                                                data_dir, e)
        sys.exit(1)
    asyncio.run(_run(broker_state))


async def _run(broker_state: Broker) -> None:
    config = broker_state.config
    server = (ClusterServer if isinstance(broker_state, ClusterBroker) else BrokerServer)(broker_state)
    host, port = await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stop.set)
    advertised_host = config.advertised_host or host
    listeners = ",".join(str(listener) for listener in server.listeners)
    print(f"kspec broker {config.node_id} ready bootstrap={advertised_host}:{port} data-dir={config.log_dirs} "
          f"listeners={listeners}", flush=True)
    logging.getLogger("kspec.broker").info("node %d serving on %s:%d (cluster %s)", config.node_id, host, port,
                                           broker_state.cluster_id)
    stopping = asyncio.create_task(stop.wait())
    failing = asyncio.create_task(server.supervisor.failed.wait())
    await asyncio.wait([stopping, failing], return_when=asyncio.FIRST_COMPLETED)
    if server.supervisor.failed.is_set():
        # Fail-stop, as Kafka's Exit.halt: no clean shutdown (no marker says the logs are whole).
        print(f"kspec broker {config.node_id} stopped: {server.supervisor.failure}", file=sys.stderr, flush=True)
        logging.shutdown()
        os._exit(1)
    failing.cancel()
    await server.stop()
    logging.getLogger("kspec.broker").info("node %d stopped cleanly", config.node_id)
