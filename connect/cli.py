"""`kspec connect standalone|distributed`: a Kafka Connect worker and its REST API.

    kspec connect standalone worker.properties file-source.properties [more.properties|.json ...]
    kspec connect distributed worker.properties

Prints one ready line, `connect ready rest=http://HOST:PORT/ worker_id=HOST:PORT`, once the
REST server listens (and, standalone, the given connectors were submitted); runs until
SIGTERM or SIGINT, then stops its tasks (committing their offsets) and leaves the group.
"""
from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys

import click

from confluent_kafka import KafkaException

from connect.api import ConnectError
from connect.config import ConfigError, WorkerConfig, read_properties
from connect.herder import ConnectRestError
from connect.plugins import Plugins
from connect.rest import RestServer
from kspec.ops.common import OpsGroup  # one-line usage errors, as every kspec command has


def _fail(message: str) -> None:
    click.echo(f"kspec connect: {message}", err=True)
    sys.exit(2)


def _worker_config(path: str, mode: str) -> WorkerConfig:
    try:
        return WorkerConfig(read_properties(path), mode)
    except OSError as e:
        _fail(f"cannot read {path}: {e.strerror}")
    except ConfigError as e:
        _fail(f"{path}: {e}")


def _connector_file(path: str) -> dict[str, str]:
    """A connector as .properties, or as JSON {"name": ..., "config": {...}} or a bare config map."""
    try:
        if path.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                document = json.load(f)
            config = document.get("config", document)
            return {**{k: str(v) for k, v in config.items()}, "name": document.get("name", config.get("name", ""))}
        return read_properties(path)
    except OSError as e:
        _fail(f"cannot read {path}: {e.strerror}")
    except ValueError as e:
        _fail(f"{path} is not valid JSON: {e}")


def _run(config: WorkerConfig, make_herder, connectors: list[dict[str, str]]) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        host, port = config.rest_address()
        plugins = Plugins(config["plugin.path"])
    except (ConfigError, ImportError) as e:
        _fail(str(e))

    async def main() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        advertised_host = config.get("rest.advertised.host.name") or host or "127.0.0.1"
        rest = RestServer(None, host, port)
        try:
            url = await rest.start()
        except OSError as e:
            _fail(f"cannot listen on {host or '0.0.0.0'}:{port} (listeners / rest.port): {e.strerror}")
        worker_id = f"{advertised_host}:{config.get('rest.advertised.port') or rest.port}"
        try:
            herder = await loop.run_in_executor(None, make_herder, plugins, worker_id, f"http://{worker_id}/")
        except (ConnectError, KafkaException, TimeoutError) as e:  # its internal topics cannot be read
            _fail(f"the worker did not start: {e}")
        rest.herder = herder
        failure = None
        for props in connectors:
            try:
                await loop.run_in_executor(None, herder.put_connector_config, props.get("name", ""), props, False)
            except ConnectRestError as e:
                # the validation errors, on one line, without the pointer to the validate endpoint
                errors = [line for line in e.message.splitlines()[1:] if not line.startswith("You can also")]
                failure = f"connector {props.get('name') or '(no name)'}: {'; '.join(errors) or e.message}"
                break
        else:
            print(f"connect ready rest={url} worker_id={worker_id}", flush=True)
            await stopping.wait()
        await rest.stop()
        await loop.run_in_executor(None, herder.stop)
        return failure

    failure = asyncio.run(main())
    if failure:
        _fail(failure)


@click.group(cls=OpsGroup)
def connect() -> None:
    """A Kafka Connect worker: connectors and tasks with Connect's REST API."""


@connect.command()
@click.argument("worker_properties", type=click.Path(dir_okay=False))
@click.argument("connector_files", nargs=-1, type=click.Path(dir_okay=False))
def standalone(worker_properties: str, connector_files: tuple[str, ...]) -> None:
    """One worker; connectors from CONNECTOR_FILES (.properties or .json) and REST."""
    from connect.standalone import StandaloneHerder
    config = _worker_config(worker_properties, "standalone")
    connectors = [_connector_file(path) for path in connector_files]
    _run(config, lambda plugins, worker_id, url: StandaloneHerder(config, plugins, worker_id), connectors)


@connect.command()
@click.argument("worker_properties", type=click.Path(dir_okay=False))
def distributed(worker_properties: str) -> None:
    """A worker of the cluster named by group.id; connectors through REST."""
    from connect.distributed import DistributedHerder
    config = _worker_config(worker_properties, "distributed")
    _run(config, lambda plugins, worker_id, url: DistributedHerder(config, plugins, worker_id, url), [])
