"""The asyncio shell around the broker: sockets, framing, dispatch, long polls and timers.

Per connection, requests are read with a FrameDecoder (socket.request.max.bytes) and
handled one at a time, in order, each response written before the next request is read,
as Kafka mutes a channel while a request is in flight. Connections are plain non-blocking
sockets driven by the event loop's sock_* calls rather than asyncio streams: bytes are
received straight into the decoder's buffers and responses are sent from the encoder's
chunks, so a 1 MB batch is not copied on its way in or out (streams copy into and out of
their own buffers, and Python 3.11's writelines joins the chunks).

Input the broker cannot answer (a frame over the limit, an unknown API key, an unsupported
version, a header or body that does not decode) closes that connection only, with one log
line saying who and what; nothing is written to any log. ApiVersions of an unsupported
version gets the KIP-511 v0 reply instead. A timer calls `Broker.tick` with the time, for
flush.ms and retention, and the group and transaction coordinators' timers: every
TICK_INTERVAL_MS, and at the coordinators' next deadline when that comes sooner.

The accept and tick loops run under the node's Supervisor (reference/server/supervisor.py).
An accept that fails for want of resources (EMFILE, ENFILE, ENOBUFS, ENOMEM) or because the
client gave up first (ECONNABORTED) is logged at most once per ACCEPT_ERROR_LOG_INTERVAL_MS
and survived: the loop pauses ACCEPT_ERROR_PAUSE_MS (the listener stays readable, so it
would spin) and accepts again, as Kafka's Acceptor does. Connection quotas (max.connections,
max.connections.per.ip; reference/server/limits.py) are applied as connections are accepted,
and a connection that sends nothing for connections.max.idle.ms (a stalled partial frame
included) is closed.
"""
from __future__ import annotations

import asyncio
import dataclasses
import errno
import functools
import logging
import socket
import ssl
import struct
import time

from reference.handlers import HANDLERS, WAITING_HANDLERS
from reference.handlers.context import CloseConnection, RequestContext
from reference.handlers.fetch import read_fetch
from reference.node.interface import BrokerNode
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
from reference.runtime import NodeServices, node_services
from reference.security.checks import authorize_request
from reference.security.listeners import Listener, readdress
from reference.security.principal import ANONYMOUS
from reference.security.session import SASL_APIS, Session
from reference.security.tls import PlainChannel, TlsChannel
from reference.server.limits import ConnectionQuotas
from reference.server.purgatory import FetchPurgatory
from reference.server.supervisor import Policy, Supervisor

log = logging.getLogger("kspec.broker")

LISTEN_BACKLOG = 128  # connections the kernel queues before they are accepted
TICK_INTERVAL_MS = 100  # how often the periodic work is considered, at the latest
CANCEL_RETRY_S = 0.1  # a stopping server cancels a task again if it is still running after this
ACCEPT_ERRORS_SURVIVED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED})
ACCEPT_ERROR_PAUSE_MS = 100
ACCEPT_ERROR_LOG_INTERVAL_MS = 10_000
# Answers naming brokers' endpoints, which name the listener the request came in on.
ENDPOINT_APIS = frozenset({ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_CLUSTER, ApiKey.PRODUCE,
                           ApiKey.FETCH})
TLS_HANDSHAKE_TIMEOUT_S = 10.0  # a client that connects to a TLS listener and says nothing is closed after this


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def timer_wait_ms(services: NodeServices, now: int) -> int:
    """How long the ticker sleeps: TICK_INTERVAL_MS, or until the coordinators' next deadline
    when that comes sooner (a member's session, a rebalance phase, the transaction timeout
    check), so a timer fires when it is due, as Kafka's timers do, not up to a tick later.
    Deadlines already past were the last tick's to handle."""
    deadline = services.next_deadline_ms()
    return TICK_INTERVAL_MS if deadline is None or deadline <= now else min(TICK_INTERVAL_MS, deadline - now)


async def cancel_and_wait(tasks) -> None:
    """Cancel tasks and wait for them to end, cancelling again any that swallowed it (in
    Python 3.11 `asyncio.wait_for` can lose a cancellation that races its inner result)."""
    pending = {task for task in tasks if task is not None}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=CANCEL_RETRY_S)


class IdleWatch:
    """connections.max.idle.ms for the connection served by the current task, as Kafka's Selector
    closes channels idle that long: a wait for the client's bytes (`waiting()` before each read,
    `waiting_since_s = None` after it) that lasts `idle_s` cancels the task, with `expired` set.
    One timer per connection, moved lazily: a read only notes the time, and a timer that fires
    before the deadline of the wait in progress, or while a request is handled, is set again for
    later. (`asyncio.wait_for` around each read cost a task and a timer for every read, several
    per 1 MB produce request.)"""

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self.waiting_since_s: float | None = None  # the loop's time when the read in progress began
        self.expired = False
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._timer: asyncio.TimerHandle | None = None

    def waiting(self) -> None:
        self.waiting_since_s = self._loop.time()
        if self._timer is None:
            self._timer = self._loop.call_at(self.waiting_since_s + self.idle_s, self._check)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _check(self) -> None:
        self._timer = None
        if self.waiting_since_s is None:
            return  # a request is being handled; the next read sets the timer again
        deadline_s = self.waiting_since_s + self.idle_s
        if self._loop.time() >= deadline_s:
            self.expired = True
            self._task.cancel()
        else:
            self._timer = self._loop.call_at(deadline_s, self._check)


class BrokerServer:
    def __init__(self, broker: BrokerNode) -> None:
        self.broker = broker
        self.services = node_services(broker, now_ms())  # a cluster node's shell builds its own
        self.purgatory = FetchPurgatory()
        self.supervisor = Supervisor()
        broker.log_dir_failures.on_failure = lambda log_dir, error: self.supervisor.stop_node(
            f"every log dir has failed (log.dirs={log_dir}): {error}")
        self.quotas = ConnectionQuotas(broker.config.max_connections, broker.config.max_connections_per_ip)
        self._connection_ended = asyncio.Event()
        self.listeners: list[Listener] = []  # bound, with their ports
        self._sockets: list[socket.socket] = []
        self._serving = False
        self._acceptors: list[asyncio.Task] = []
        self._connections: set[asyncio.Task] = set()
        self._ticker: asyncio.Task | None = None

    async def start(self) -> tuple[str, int]:
        """Listen on every listener, and return the (host, port) of the first (port 0 in the
        config picks a free one)."""
        config = self.broker.config
        self.listeners = config.listeners
        for listener in self.listeners:
            host = listener.host or "0.0.0.0"
            family = socket.getaddrinfo(host, listener.port, type=socket.SOCK_STREAM,
                                        flags=socket.AI_PASSIVE)[0][0]  # an IPv6 listen host works as with IPv4
            server_socket = socket.create_server((host, listener.port), family=family, backlog=LISTEN_BACKLOG)
            server_socket.setblocking(False)
            self._sockets.append(server_socket)
            listener.port = server_socket.getsockname()[1]
        host, port = self._sockets[0].getsockname()[:2]
        self.broker.config = dataclasses.replace(config, listen_port=port)
        vars(self.broker.config)["listeners"] = self.listeners  # the bound ones, not a fresh parse
        self._serving = True
        self._acceptors = [
            self.supervisor.start(f"accept {listener.name}",
                                  functools.partial(self._accept_forever, server_socket, listener), Policy.RESTART)
            for server_socket, listener in zip(self._sockets, self.listeners)]
        self._ticker = self.supervisor.start("tick", self._tick_forever, Policy.RESTART)
        return host, port

    async def stop(self) -> None:
        """Stop accepting, end open connections and long polls, then close the broker's logs."""
        assert self._sockets and self._acceptors and self._ticker is not None
        self._serving = False
        await cancel_and_wait(self._acceptors)
        for server_socket in self._sockets:
            server_socket.close()
        self.purgatory.wake_all()
        await cancel_and_wait([*self._connections, self._ticker])
        self.broker.close()

    async def _tick_forever(self) -> None:
        wait_ms = TICK_INTERVAL_MS
        while True:
            await asyncio.sleep(wait_ms / 1000)
            self.broker.tick(now_ms())
            self.services.groups.tick(now_ms())
            self.services.transactions.tick(now_ms())
            wait_ms = timer_wait_ms(self.services, now_ms())

    async def _accept_forever(self, server_socket: socket.socket, listener: Listener) -> None:
        loop = asyncio.get_running_loop()
        failed_accepts = 0  # since the last log line about them
        last_logged_ms = -ACCEPT_ERROR_LOG_INTERVAL_MS
        while True:
            while self.quotas.full:  # max.connections: wait for a slot, the kernel's backlog holds the rest
                self._connection_ended.clear()
                await self._connection_ended.wait()
            try:
                connection, address = await loop.sock_accept(server_socket)
            except OSError as error:
                if error.errno not in ACCEPT_ERRORS_SURVIVED:
                    raise
                failed_accepts += 1
                if time.monotonic() * 1000 - last_logged_ms >= ACCEPT_ERROR_LOG_INTERVAL_MS:
                    last_logged_ms = time.monotonic() * 1000
                    log.warning("accept failed %d time(s): %s; open connections: %d", failed_accepts,
                                errno.errorcode.get(error.errno, error.errno), len(self._connections))
                    failed_accepts = 0
                await asyncio.sleep(ACCEPT_ERROR_PAUSE_MS / 1000)
                continue
            ip = address[0]
            if not self.quotas.admit(ip):
                log.info("closing connection from %s: max.connections.per.ip=%d reached", ip,
                         self.quotas.max_connections_per_ip)
                connection.close()
                continue
            task = asyncio.create_task(self._serve(connection, listener, ip))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _serve(self, connection: socket.socket, listener: Listener, ip: str) -> None:
        decoder = FrameDecoder(self.broker.config.socket_request_max_bytes)
        idle = IdleWatch(self.broker.config.connections_max_idle_ms / 1000)
        peer = "?"
        try:
            client_host, client_port = connection.getpeername()[:2]
            peer = f"{client_host}:{client_port} on {listener.name}"
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio's transports do
            channel, session = await self._open_session(connection, listener, client_host)
            while True:
                idle.waiting()
                received = await channel.recv_into(decoder.get_buffer())
                idle.waiting_since_s = None
                if not received:
                    break
                await self._answer(decoder.buffer_updated(received), channel, session)
        except (FrameTooLarge, ProtocolDecodeError, CloseConnection) as e:
            log.warning("closing connection from %s: %s", peer, e)
        except ssl.SSLError as e:
            log.warning("closing connection from %s: TLS handshake failed: %s", peer, e)
        except asyncio.TimeoutError:
            log.info("closing connection from %s: no TLS handshake within %.0f s", peer, TLS_HANDSHAKE_TIMEOUT_S)
        except asyncio.CancelledError:
            if idle.expired:
                log.info("closing connection from %s: idle for connections.max.idle.ms=%d", peer,
                         self.broker.config.connections_max_idle_ms)
        except ConnectionError:
            pass
        except Exception:
            if not self.supervisor.failed.is_set():  # else the node is stopping for a reason already logged
                log.exception("closing connection from %s after an internal error", peer)
        finally:
            idle.stop()
            connection.close()
            self.quotas.release(ip)
            self._connection_ended.set()

    async def _answer(self, frames: list[memoryview], channel, session: Session) -> None:
        """Answer each request frame in turn. The frames are the last references to their
        buffers once this returns, so the decoder may receive the next request into them."""
        for frame in frames:
            for chunk in await self._handle(frame, session) or ():
                await channel.sendall(chunk)  # sends from the chunk itself, no copy
            if session.close_reason:  # e.g. failed authentication, after Kafka's delay
                await asyncio.sleep(session.listener.failed_authentication_delay_ms / 1000)
                raise CloseConnection(session.close_reason)

    async def _open_session(self, connection: socket.socket, listener: Listener, client_host: str):
        """The connection's channel (TLS on SSL listeners) and its session (principal, SASL)."""
        principal = ANONYMOUS
        if listener.ssl_context is None:
            channel = PlainChannel(connection)
        else:
            channel = TlsChannel(connection, listener.ssl_context)
            await asyncio.wait_for(channel.handshake(), TLS_HANDSHAKE_TIMEOUT_S)
            subject = channel.peer_subject()
            if subject is not None and not listener.uses_sasl:  # mTLS: the certificate names the client
                try:
                    principal = listener.principal_mapper.principal(subject)
                except ValueError as e:
                    raise CloseConnection(str(e)) from None
        return channel, Session.open(listener, client_host, principal, self.broker.scram_credential)

    async def _handle(self, frame, session: Session) -> list | None:
        """One request frame -> the response frame's chunks, or None when none is sent."""
        if session.authenticator is not None and session.authenticator.expects_raw_token:  # SaslHandshake v0
            reply = session.raw_token(bytes(frame), now_ms())
            if reply is None:
                raise CloseConnection(session.close_reason)
            return [struct.pack(">i", len(reply)) + reply]
        header, body_offset = parse_request_header(frame)
        api_key, version = header.api_key, header.api_version
        if refusal := session.gate(api_key, now_ms()):
            raise CloseConnection(f"{refusal} (client {header.client_id!r})")
        if not is_supported(api_key, version, self.broker.api_versions()):
            if api_key == ApiKey.API_VERSIONS:
                return [unsupported_api_versions_response(header.correlation_id,
                                                          SUPPORTED_API_VERSIONS[ApiKey.API_VERSIONS])]
            raise CloseConnection(f"{ApiKey(api_key).name} v{version} is not supported (client {header.client_id!r})")
        request = decode_request(api_key, version, frame[body_offset:])
        context = RequestContext(version, header.correlation_id, header.client_id, now_ms(), self.services,
                                 listener=session.listener.name, principal=session.principal,
                                 client_host=session.client_host)
        verdict = authorize_request(self.broker, api_key, request, context)  # may take refused items out
        if api_key in SASL_APIS and session.authenticator is not None:
            response = session.sasl_request(api_key, version, request, context.now_ms)
        elif verdict.refused is not None:
            response = verdict.refused
        elif api_key == ApiKey.FETCH:
            response = verdict.complete(await self._fetch(request, context))
        else:
            if api_key in WAITING_HANDLERS:  # `async def`: may wait (a rebalance, the ISR, another node)
                response = verdict.complete(await WAITING_HANDLERS[api_key](self.broker, request, context))
            else:
                response = verdict.complete(HANDLERS[api_key](self.broker, request, context))
            self.purgatory.notify(self.broker.appended)
            self.broker.appended.clear()
        if response is None:
            return None
        if session.listener is not self.listeners[0] and api_key in ENDPOINT_APIS:
            readdress(response, self.broker.listener_endpoints(session.listener.name))
        return encode_response_chunks(api_key, version, header.correlation_id, response)

    async def _fetch(self, request, context: RequestContext) -> dict:
        """Answer at once when min_bytes is met (or on an error), else wait for appends up to max_wait_ms."""
        deadline_ms = context.now_ms + request.max_wait_ms
        result = read_fetch(self.broker, request, context)
        while not result.complete and (remaining_ms := deadline_ms - now_ms()) > 0 and self._serving:
            await self.purgatory.wait(result.watched, remaining_ms / 1000)
            result = read_fetch(self.broker, request, dataclasses.replace(context, now_ms=now_ms()))
        return result.response
