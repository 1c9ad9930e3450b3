"""Link faults: an embedded TCP proxy speaking the Toxiproxy HTTP API, and a client for it.

    with ToxiproxyServer() as server:                     # or a real one: TOXIPROXY_URL
        client = ToxiproxyClient(server.url)
        client.create_proxy("node0", listen="127.0.0.2:9092", upstream="127.0.0.1:9092")
        client.add_toxic("node0", "latency", attributes={"latency": 100, "jitter": 10})
        client.reset()                                    # every proxy enabled, every toxic gone

The HTTP API is the subset of Toxiproxy's that the nemeses use, with its paths, JSON
fields and status codes: GET/POST /proxies, GET/POST/DELETE /proxies/{name},
GET/POST /proxies/{name}/toxics, GET/POST/DELETE /proxies/{name}/toxics/{toxic},
POST /reset, GET /version. Toxics act on one direction ("upstream": client to server,
"downstream", the default: server to client), each chunk passing through them in order:

| type | attributes | effect on a chunk |
|---|---|---|
| latency | latency, jitter (ms) | delayed latency +- jitter |
| bandwidth | rate (KB/s) | delayed len/rate |
| slicer | average_size, size_variation (bytes), delay (us) | cut into slices sent delay apart |
| timeout | timeout (ms) | dropped; the connection closes after timeout (0: never) |
| reset_peer | timeout (ms) | the connection is reset (TCP RST) after timeout |

The client is plain HTTP (urllib): the `toxiproxy-python` package has not been released
since 2019, so it is not a dependency; the API it would call is the same.

Why our own proxy: the fault is the lesson here (how a slow or sliced link looks to a
Kafka client), the server is a page of asyncio, and no Toxiproxy binary can be installed
from the package registries this project uses.
"""
from __future__ import annotations

import asyncio
import json
import random
import socket
import struct
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOXIPROXY_VERSION = "2.9.0-kspec"  # the Toxiproxy API version this server follows
TOXIC_ATTRIBUTES = {
    "latency": {"latency": 0, "jitter": 0},
    "bandwidth": {"rate": 0},
    "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},
    "timeout": {"timeout": 0},
    "reset_peer": {"timeout": 0},
}
STREAMS = ("upstream", "downstream")
CHUNK_BYTES = 32 * 1024
HTTP_TIMEOUT_S = 10.0


@dataclass
class Toxic:
    name: str
    type: str
    stream: str = "downstream"
    toxicity: float = 1.0
    attributes: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"name": self.name, "type": self.type, "stream": self.stream, "toxicity": self.toxicity,
                "attributes": self.attributes}


@dataclass
class Proxy:
    name: str
    listen: str
    upstream: str
    enabled: bool = True
    toxics: dict[str, Toxic] = field(default_factory=dict)
    server: asyncio.base_events.Server | None = None
    connections: set = field(default_factory=set)  # (client writer, upstream writer) pairs

    def to_json(self) -> dict:
        return {"name": self.name, "listen": self.listen, "upstream": self.upstream, "enabled": self.enabled,
                "toxics": [t.to_json() for t in self.toxics.values()]}


class ApiError(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class ToxiproxyServer:
    """The proxies run on an asyncio loop in one thread, the HTTP API in another."""

    def __init__(self, api_host: str = "127.0.0.1", api_port: int = 0) -> None:
        self.proxies: dict[str, Proxy] = {}
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self.loop_thread = threading.Thread(target=self.loop.run_forever, name="toxiproxy-loop", daemon=True)
        self.http = ThreadingHTTPServer((api_host, api_port), _handler_for(self))
        self.http.daemon_threads = True
        self.http_thread = threading.Thread(target=self.http.serve_forever, name="toxiproxy-http", daemon=True)
        self.rng = random.Random()

    @property
    def url(self) -> str:
        host, port = self.http.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> ToxiproxyServer:
        self.loop_thread.start()
        self.http_thread.start()
        return self

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        with self.lock:
            for proxy in list(self.proxies.values()):
                self._call(self._close(proxy))
            self.proxies.clear()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.loop_thread.join()
        self.loop.close()

    def __enter__(self) -> ToxiproxyServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # The API, called by the HTTP handler under self.lock.

    def create_proxy(self, body: dict) -> dict:
        name, listen, upstream = body.get("name"), body.get("listen"), body.get("upstream")
        if not name or not listen or not upstream:
            raise ApiError(HTTPStatus.BAD_REQUEST, "name, listen and upstream are required")
        if name in self.proxies:
            raise ApiError(HTTPStatus.CONFLICT, "proxy already exists")
        proxy = Proxy(name, listen, upstream, enabled=body.get("enabled", True))
        if proxy.enabled:
            self._call(self._open(proxy))
        self.proxies[name] = proxy
        return proxy.to_json()

    def update_proxy(self, name: str, body: dict) -> dict:
        proxy = self._proxy(name)
        if "upstream" in body:
            proxy.upstream = body["upstream"]
        if "enabled" in body and body["enabled"] != proxy.enabled:
            proxy.enabled = bool(body["enabled"])
            self._call(self._open(proxy) if proxy.enabled else self._close(proxy))
        return proxy.to_json()

    def delete_proxy(self, name: str) -> None:
        self._call(self._close(self._proxy(name)))
        del self.proxies[name]

    def add_toxic(self, proxy_name: str, body: dict) -> dict:
        proxy = self._proxy(proxy_name)
        kind, stream = body.get("type"), body.get("stream", "downstream")
        if kind not in TOXIC_ATTRIBUTES:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"unknown toxic type {kind!r}")
        if stream not in STREAMS:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"stream must be one of {STREAMS}")
        name = body.get("name") or f"{kind}_{stream}"
        if name in proxy.toxics:
            raise ApiError(HTTPStatus.CONFLICT, "toxic already exists")
        attributes = {**TOXIC_ATTRIBUTES[kind], **body.get("attributes", {})}
        toxic = Toxic(name, kind, stream, float(body.get("toxicity", 1.0)), attributes)
        proxy.toxics[name] = toxic
        return toxic.to_json()

    def update_toxic(self, proxy_name: str, toxic_name: str, body: dict) -> dict:
        toxic = self._toxic(proxy_name, toxic_name)
        toxic.attributes.update(body.get("attributes", {}))
        toxic.toxicity = float(body.get("toxicity", toxic.toxicity))
        return toxic.to_json()

    def delete_toxic(self, proxy_name: str, toxic_name: str) -> None:
        self._toxic(proxy_name, toxic_name)
        del self.proxies[proxy_name].toxics[toxic_name]

    def reset(self) -> None:
        for proxy in self.proxies.values():
            proxy.toxics.clear()
            if not proxy.enabled:
                proxy.enabled = True
                self._call(self._open(proxy))

    def _proxy(self, name: str) -> Proxy:
        if name not in self.proxies:
            raise ApiError(HTTPStatus.NOT_FOUND, "proxy not found")
        return self.proxies[name]

    def _toxic(self, proxy_name: str, toxic_name: str) -> Toxic:
        proxy = self._proxy(proxy_name)
        if toxic_name not in proxy.toxics:
            raise ApiError(HTTPStatus.NOT_FOUND, "toxic not found")
        return proxy.toxics[toxic_name]

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(HTTP_TIMEOUT_S)

    # The proxy itself, on the loop.

    async def _open(self, proxy: Proxy) -> None:
        host, port = _split(proxy.listen)
        try:
            proxy.server = await asyncio.start_server(lambda r, w: self._serve(proxy, r, w), host, port,
                                                      reuse_address=True)
        except OSError as e:
            raise ApiError(HTTPStatus.INTERNAL_SERVER_ERROR, f"cannot listen on {proxy.listen}: {e}") from None

    async def _close(self, proxy: Proxy) -> None:
        if proxy.server is not None:
            proxy.server.close()
            await proxy.server.wait_closed()
            proxy.server = None
        for client_writer, upstream_writer in list(proxy.connections):
            client_writer.close()
            upstream_writer.close()
        proxy.connections.clear()

    async def _serve(self, proxy: Proxy, client_reader, client_writer) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*_split(proxy.upstream))
        except OSError:
            client_writer.close()
            return
        pair = (client_writer, upstream_writer)
        proxy.connections.add(pair)
        try:
            await asyncio.gather(self._pipe(proxy, "upstream", client_reader, upstream_writer, pair),
                                 self._pipe(proxy, "downstream", upstream_reader, client_writer, pair))
        finally:
            proxy.connections.discard(pair)
            client_writer.close()
            upstream_writer.close()

    async def _pipe(self, proxy: Proxy, stream: str, reader, writer, pair) -> None:
        try:
            while data := await reader.read(CHUNK_BYTES):
                for toxic in [t for t in proxy.toxics.values() if t.stream == stream]:
                    if self.rng.random() >= toxic.toxicity:
                        continue
                    data = await self._apply(proxy, toxic, data, writer, pair)
                    if data is None:
                        break
                if data:
                    writer.write(data)
                    await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            for w in pair:
                w.close()

    async def _apply(self, proxy: Proxy, toxic: Toxic, data: bytes, writer, pair) -> bytes | None:
        """One toxic on one chunk: the bytes to pass on, b"" when written here, None to drop them."""
        a = toxic.attributes
        if toxic.type == "latency":
            jitter_ms = self.rng.uniform(-a["jitter"], a["jitter"]) if a["jitter"] else 0.0
            await asyncio.sleep(max(0.0, a["latency"] + jitter_ms) / 1000)
        elif toxic.type == "bandwidth" and a["rate"] > 0:
            await asyncio.sleep(len(data) / (a["rate"] * 1024))
        elif toxic.type == "slicer":
            position = 0
            while position < len(data):
                size = max(1, a["average_size"] + self.rng.randint(-a["size_variation"], a["size_variation"]))
                writer.write(data[position:position + size])
                await writer.drain()
                position += size
                await asyncio.sleep(a["delay"] / 1e6)
            return b""
        elif toxic.type == "timeout":
            if a["timeout"] > 0:
                await asyncio.sleep(a["timeout"] / 1000)
                for w in pair:
                    w.close()
            return None
        elif toxic.type == "reset_peer":
            await asyncio.sleep(a["timeout"] / 1000)
            client_writer = pair[0]
            sock = client_writer.get_extra_info("socket")
            if sock is not None:
                # SO_LINGER on with a zero timeout: close() sends RST instead of FIN.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client_writer.transport.abort()
            pair[1].transport.abort()
            return None
        return data


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "0.0.0.0", int(port)


def _handler_for(server: ToxiproxyServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # the harness keeps its own timeline
            pass

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_DELETE(self) -> None:
            self._dispatch("DELETE")

        def _dispatch(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                with server.lock:
                    status, reply = _route(server, method, self.path.strip("/").split("/"), body)
            except ApiError as e:
                status, reply = e.status, {"error": str(e), "status": int(e.status)}
            except json.JSONDecodeError:
                status, reply = HTTPStatus.BAD_REQUEST, {"error": "body is not JSON", "status": 400}
            payload = b"" if reply is None else json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler


def _route(server: ToxiproxyServer, method: str, path: list[str], body: dict) -> tuple[HTTPStatus, object]:
    match method, path:
        case "GET", ["version"]:
            return HTTPStatus.OK, {"version": TOXIPROXY_VERSION}
        case "POST", ["reset"]:
            server.reset()
            return HTTPStatus.NO_CONTENT, None
        case "GET", ["proxies"]:
            return HTTPStatus.OK, {name: p.to_json() for name, p in server.proxies.items()}
        case "POST", ["proxies"]:
            return HTTPStatus.CREATED, server.create_proxy(body)
        case "GET", ["proxies", name]:
            return HTTPStatus.OK, server._proxy(name).to_json()
        case "POST", ["proxies", name]:
            return HTTPStatus.OK, server.update_proxy(name, body)
        case "DELETE", ["proxies", name]:
            server.delete_proxy(name)
            return HTTPStatus.NO_CONTENT, None
        case "GET", ["proxies", name, "toxics"]:
            return HTTPStatus.OK, [t.to_json() for t in server._proxy(name).toxics.values()]
        case "POST", ["proxies", name, "toxics"]:
            return HTTPStatus.OK, server.add_toxic(name, body)
        case "GET", ["proxies", name, "toxics", toxic]:
            return HTTPStatus.OK, server._toxic(name, toxic).to_json()
        case "POST", ["proxies", name, "toxics", toxic]:
            return HTTPStatus.OK, server.update_toxic(name, toxic, body)
        case "DELETE", ["proxies", name, "toxics", toxic]:
            server.delete_toxic(name, toxic)
            return HTTPStatus.NO_CONTENT, None
    raise ApiError(HTTPStatus.NOT_FOUND, f"no route {method} /{'/'.join(path)}")


class ToxiproxyError(RuntimeError):
    pass


class ToxiproxyClient:
    """Toxiproxy's HTTP API over urllib; works against the embedded server and a real Toxiproxy."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def version(self) -> str:
        return self._request("GET", "/version")["version"]

    def proxies(self) -> dict[str, dict]:
        return self._request("GET", "/proxies")

    def create_proxy(self, name: str, listen: str, upstream: str, enabled: bool = True) -> dict:
        return self._request("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream,
                                                  "enabled": enabled})

    def set_enabled(self, name: str, enabled: bool) -> dict:
        return self._request("POST", f"/proxies/{name}", {"enabled": enabled})

    def delete_proxy(self, name: str) -> None:
        self._request("DELETE", f"/proxies/{name}")

    def toxics(self, proxy: str) -> list[dict]:
        return self._request("GET", f"/proxies/{proxy}/toxics")

    def add_toxic(self, proxy: str, type: str, *, stream: str = "downstream", name: str | None = None,
                  toxicity: float = 1.0, attributes: dict | None = None) -> dict:
        body = {"type": type, "stream": stream, "toxicity": toxicity, "attributes": attributes or {}}
        if name is not None:
            body["name"] = name
        return self._request("POST", f"/proxies/{proxy}/toxics", body)

    def remove_toxic(self, proxy: str, name: str) -> None:
        self._request("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def reset(self) -> None:
        self._request("POST", "/reset")

    def _request(self, method: str, path: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
                payload = response.read()
        except urllib.error.HTTPError as e:
            raise ToxiproxyError(f"{method} {path}: {e.code} {e.read().decode(errors='replace')}") from None
        return json.loads(payload) if payload else None
