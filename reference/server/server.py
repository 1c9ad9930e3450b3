"""The asyncio shell around the broker: sockets, framing, dispatch, long polls and timers.

Per connection, requests are read with a FrameDecoder (socket.request.max.bytes) and
handled one at a time, in order, each response written before the next request is read,
as Kafka mutes a channel while a request is in flight. Input the broker cannot answer
(a frame over the limit, an unknown API key, an unsupported version, a header or body
that does not decode) closes that connection only, with one log line saying who and what;
nothing is written to any log. ApiVersions of an unsupported version gets the KIP-511 v0
reply instead. A timer calls `Broker.tick` with the time, for flush.ms and retention, and
the group and transaction coordinators' timers.
"""
from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import time

from reference.handlers import HANDLERS
from reference.handlers.context import CloseConnection, RequestContext
from reference.handlers.fetch import read_fetch
from reference.handlers.groups import tick_groups
from reference.handlers.transactions import tick_transactions
from reference.node.broker import Broker
from reference.protocol.api_keys import ApiKey
from reference.protocol.api_versions import SUPPORTED_API_VERSIONS, is_supported
from reference.protocol.framing import FrameDecoder, FrameTooLarge
from reference.protocol.headers import parse_request_header
from reference.protocol.messages import (
    decode_request,
    encode_response_chunks,
    unsupported_api_versions_response,
)
from reference.protocol.primitives import ProtocolDecodeError
from reference.server.purgatory import FetchPurgatory

log = logging.getLogger("kspec.broker")

READ_BYTES_MAX = 1 << 20  # bytes asked of the socket per read
TICK_INTERVAL_MS = 100  # how often the periodic work is considered
CANCEL_RETRY_S = 0.1  # a stopping server cancels a task again if it is still running after this


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def cancel_and_wait(tasks) -> None:
    """Cancel tasks and wait for them to end, cancelling again any that swallowed it (in
    Python 3.11 `asyncio.wait_for` can lose a cancellation that races its inner result)."""
    pending = {task for task in tasks if task is not None}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=CANCEL_RETRY_S)


class BrokerServer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.purgatory = FetchPurgatory()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task] = set()
        self._ticker: asyncio.Task | None = None

    async def start(self) -> tuple[str, int]:
        """Listen, and return the (host, port) bound (port 0 in the config picks a free one)."""
        config = self.broker.config
        self._server = await asyncio.start_server(self._on_connection, config.listen_host, config.listen_port)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.broker.config = dataclasses.replace(config, listen_port=port)
        self._ticker = asyncio.create_task(self._tick_forever())
        return host, port

    async def stop(self) -> None:
        """Stop accepting, end open connections and long polls, then close the broker's logs."""
        assert self._server is not None and self._ticker is not None
        self._server.close()
        self.purgatory.wake_all()
        await cancel_and_wait([*self._connections, self._ticker])
        self.broker.close()

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_INTERVAL_MS / 1000)
            self.broker.tick(now_ms())
            tick_groups(self.broker, now_ms())
            tick_transactions(self.broker, now_ms())

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = "%s:%s" % writer.get_extra_info("peername")[:2]
        decoder = FrameDecoder(self.broker.config.socket_request_max_bytes)
        try:
            while data := await reader.read(READ_BYTES_MAX):
                for frame in decoder.feed(data):
                    chunks = await self._handle(frame)
                    if chunks is not None:
                        writer.writelines(chunks)
                        await writer.drain()
        except (FrameTooLarge, ProtocolDecodeError, CloseConnection) as e:
            log.warning("closing connection from %s: %s", peer, e)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _handle(self, frame) -> list | None:
        """One request frame -> the response frame's chunks, or None when none is sent."""
        header, body_offset = parse_request_header(frame)
        api_key, version = header.api_key, header.api_version
        if not is_supported(api_key, version):
            if api_key == ApiKey.API_VERSIONS:
                return [unsupported_api_versions_response(header.correlation_id,
                                                          SUPPORTED_API_VERSIONS[ApiKey.API_VERSIONS])]
            raise CloseConnection(f"{ApiKey(api_key).name} v{version} is not supported (client {header.client_id!r})")
        request = decode_request(api_key, version, frame[body_offset:])
        context = RequestContext(version, header.correlation_id, header.client_id, now_ms())
        if api_key == ApiKey.FETCH:
            response = await self._fetch(request, context)
        else:
            response = HANDLERS[api_key](self.broker, request, context)
            if inspect.isawaitable(response):  # JoinGroup and SyncGroup wait for their rebalance phase
                response = await response
            self.purgatory.notify(self.broker.appended)
            self.broker.appended.clear()
        if response is None:
            return None
        return encode_response_chunks(api_key, version, header.correlation_id, response)

    async def _fetch(self, request, context: RequestContext) -> dict:
        """Answer at once when min_bytes is met (or on an error), else wait for appends up to max_wait_ms."""
        deadline_ms = context.now_ms + request.max_wait_ms
        result = read_fetch(self.broker, request, context)
        while not result.complete and (remaining_ms := deadline_ms - now_ms()) > 0 and self._server.is_serving():
            await self.purgatory.wait(result.watched, remaining_ms / 1000)
            result = read_fetch(self.broker, request, dataclasses.replace(context, now_ms=now_ms()))
        return result.response
