"""Connect's REST API on aiohttp: the resources, their JSON shapes and status codes.

Errors are {"error_code": <status>, "message": ...} as Connect's ConnectExceptionMapper
writes them. A write that only the leader may do is forwarded to the leader, and a task restart to the
worker running the task, with `?forward=true`; a worker that receives a forwarded request it
cannot serve answers 409 (e.g. during a rebalance), as Connect's HerderRequestHandler does.
Until the worker has joined its cluster every request is answered 503.
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging

from aiohttp import ClientError, ClientSession, ClientTimeout, web

from connect.herder import BadRequest, ConnectRestError, Forward, Herder, NotFound

log = logging.getLogger("connect.rest")

FORWARD_TIMEOUT_S = 90.0  # Connect's REST request timeout
VERSION = "0.1.0"


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error_code": status, "message": message}, status=status)


def _json(body, status: int = 200, headers=None) -> web.Response:
    return web.json_response(body, status=status, headers=headers)


class RestServer:
    def __init__(self, herder: Herder, host: str, port: int) -> None:
        self.herder, self.host, self.port = herder, host, port
        self.runner: web.AppRunner | None = None
        self.app = web.Application(middlewares=[self._errors])
        r = self.app.router
        r.add_get("/", self.root)
        r.add_get("/connectors", self.list_connectors)
        r.add_post("/connectors", self.create_connector)
        r.add_get("/connectors/{name}", self.get_connector)
        r.add_delete("/connectors/{name}", self.delete_connector)
        r.add_get("/connectors/{name}/config", self.get_config)
        r.add_put("/connectors/{name}/config", self.put_config)
        r.add_patch("/connectors/{name}/config", self.patch_config)
        r.add_get("/connectors/{name}/status", self.get_status)
        r.add_get("/connectors/{name}/tasks", self.get_tasks)
        r.add_post("/connectors/{name}/tasks", self.put_task_configs)  # internal: a worker to the leader
        r.add_put("/connectors/{name}/fence", self.fence)  # internal (KIP-618): a worker to the leader
        r.add_get("/connectors/{name}/tasks/{task}/status", self.get_task_status)
        r.add_post("/connectors/{name}/tasks/{task}/restart", self.restart_task)
        r.add_post("/connectors/{name}/restart", self.restart_connector)
        r.add_put("/connectors/{name}/pause", self.pause)
        r.add_put("/connectors/{name}/resume", self.resume)
        r.add_put("/connectors/{name}/stop", self.stop_connector)
        r.add_get("/connectors/{name}/offsets", self.get_offsets)
        r.add_patch("/connectors/{name}/offsets", self.alter_offsets)
        r.add_delete("/connectors/{name}/offsets", self.reset_offsets)
        r.add_get("/connector-plugins", self.plugins)
        r.add_get("/connector-plugins/{plugin}/config", self.plugin_config)
        r.add_put("/connector-plugins/{plugin}/config/validate", self.validate)

    async def start(self) -> str:
        self.runner = web.AppRunner(self.app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host or None, self.port)
        await site.start()
        sockets = site._server.sockets  # the bound port when 0 was asked for
        self.port = sockets[0].getsockname()[1]
        return f"http://{self.host or '127.0.0.1'}:{self.port}/"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    @web.middleware
    async def _errors(self, request: web.Request, handler):
        if self.herder is None:
            return _error(503, "The worker is starting; try again shortly")
        try:
            return await handler(request)
        except Forward as e:
            if e.url is None or "forward" in request.query:
                return _error(409, "Cannot complete request because of a conflicting operation "
                                   "(e.g. worker rebalance)")
            return await self._forward(request, e.url)
        except ConnectRestError as e:
            return _error(e.status, e.message)
        except web.HTTPException as e:
            return _error(e.status, e.reason)
        except Exception as e:  # a bug or a plug-in's error: 500 with its message, the worker lives on
            log.exception("%s %s failed", request.method, request.path)
            return _error(500, f"{type(e).__name__}: {e}")

    async def _forward(self, request: web.Request, to_url: str) -> web.Response:
        url = to_url.rstrip("/") + request.rel_url.path
        query = {**request.query, "forward": "true"}
        body = await request.read()
        try:
            async with ClientSession(timeout=ClientTimeout(total=FORWARD_TIMEOUT_S)) as session:
                signature = {k: v for k, v in request.headers.items() if k.lower().startswith("x-connect-")}
                async with session.request(request.method, url, params=query, data=body or None,
                                           headers={"Content-Type": "application/json", **signature}) as response:
                    payload = await response.read()
                    headers = {k: v for k, v in response.headers.items() if k in ("Location", "Content-Type")}
                    return web.Response(body=payload, status=response.status, headers=headers)
        except (ClientError, asyncio.TimeoutError) as e:
            return _error(500, f"Error trying to forward REST request to {to_url}: {e}")

    async def _call(self, method, *args):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(method, *args))

    @staticmethod
    async def _body(request: web.Request):
        try:
            return json.loads(await request.read() or b"null")
        except ValueError as e:
            raise BadRequest(f"Request body is not valid JSON: {e}") from None

    async def root(self, request):
        return _json({"version": VERSION, "commit": "kspec",
                      "kafka_cluster_id": await self._call(self.herder.kafka_cluster_id)})

    async def list_connectors(self, request):
        names = self.herder.connectors()
        expand = request.query.getall("expand", [])
        if not expand:
            return _json(names)
        result = {}
        for name in names:
            entry = {}
            try:
                if "status" in expand:
                    entry["status"] = self.herder.connector_status(name)
                if "info" in expand:
                    entry["info"] = self.herder.connector_info(name)
            except NotFound:
                continue  # deleted meanwhile
            result[name] = entry
        return _json(result)

    async def create_connector(self, request):
        body = await self._body(request)
        if not isinstance(body, dict) or not isinstance(body.get("config", {}), dict):
            raise BadRequest("Request body must be {\"name\": ..., \"config\": {...}}")
        config = {k: str(v) for k, v in (body.get("config") or {}).items()}
        name = body.get("name") or config.get("name")
        if not name:
            raise BadRequest("Connector name must be set in the request body or in its config")
        initial_state = body.get("initial_state", "RUNNING")
        if initial_state not in ("RUNNING", "PAUSED", "STOPPED"):
            raise BadRequest(f"Invalid initial state {initial_state}")
        _, info = await self._call(self.herder.put_connector_config, name, {**config, "name": name}, False,
                                   "STARTED" if initial_state == "RUNNING" else initial_state)
        return _json(info, 201, {"Location": f"/connectors/{name}"})

    async def get_connector(self, request):
        return _json(self.herder.connector_info(request.match_info["name"]))

    async def delete_connector(self, request):
        await self._call(self.herder.delete_connector, request.match_info["name"])
        return web.Response(status=204)

    async def get_config(self, request):
        return _json(self.herder.connector_config(request.match_info["name"]))

    async def put_config(self, request):
        body = await self._body(request)
        if not isinstance(body, dict):
            raise BadRequest("Request body must be a JSON object of configs")
        name = request.match_info["name"]
        created, info = await self._call(self.herder.put_connector_config, name,
                                         {k: str(v) for k, v in body.items()}, True)
        return _json(info, 201 if created else 200, {"Location": f"/connectors/{name}"} if created else None)

    async def patch_config(self, request):
        """KIP-477: merge the given keys into the config; a null value removes its key."""
        body = await self._body(request)
        if not isinstance(body, dict):
            raise BadRequest("Request body must be a JSON object of configs")
        name = request.match_info["name"]
        merged = {**self.herder.connector_config(name), **{k: str(v) for k, v in body.items() if v is not None}}
        merged = {k: v for k, v in merged.items() if body.get(k, "") is not None}
        _, info = await self._call(self.herder.put_connector_config, name, merged, True)
        return _json(info)

    async def get_status(self, request):
        return _json(self.herder.connector_status(request.match_info["name"]))

    async def get_tasks(self, request):
        return _json(self.herder.task_configs(request.match_info["name"]))

    async def put_task_configs(self, request):
        self.herder.verify_internal_request(await request.read(), request.headers)
        body = await self._body(request)
        if not isinstance(body, list):
            raise BadRequest("Request body must be a list of task configs")
        await self._call(self.herder.put_task_configs, request.match_info["name"], body)
        return web.Response(status=204)

    async def fence(self, request):
        self.herder.verify_internal_request(await request.read(), request.headers)
        await self._call(self.herder.fence_zombies, request.match_info["name"])
        return web.Response(status=204)

    def _task(self, request) -> int:
        try:
            return int(request.match_info["task"])
        except ValueError:
            raise NotFound(f"Task {request.match_info['task']} not found") from None

    async def get_task_status(self, request):
        return _json(self.herder.task_status(request.match_info["name"], self._task(request)))

    async def restart_task(self, request):
        await self._call(self.herder.restart_task, request.match_info["name"], self._task(request))
        return web.Response(status=204)

    async def restart_connector(self, request):
        name = request.match_info["name"]
        include_tasks = request.query.get("includeTasks", "false").lower() == "true"
        only_failed = request.query.get("onlyFailed", "false").lower() == "true"
        await self._call(self.herder.restart_connector, name, include_tasks, only_failed)
        if include_tasks or only_failed:  # KIP-745: 202 with the status the restart starts from
            return _json(self.herder.connector_status(name), 202)
        return web.Response(status=204)

    async def pause(self, request):
        await self._call(self.herder.pause_connector, request.match_info["name"])
        return web.Response(status=202)

    async def resume(self, request):
        await self._call(self.herder.resume_connector, request.match_info["name"])
        return web.Response(status=202)

    async def stop_connector(self, request):
        await self._call(self.herder.stop_connector, request.match_info["name"])
        return web.Response(status=204)

    async def get_offsets(self, request):
        """KIP-875: {"offsets": [{"partition": {...}, "offset": {...}}]}."""
        return _json({"offsets": await self._call(self.herder.connector_offsets, request.match_info["name"])})

    async def alter_offsets(self, request):
        body = await self._body(request)
        offsets = body.get("offsets") if isinstance(body, dict) else None
        message = await self._call(self.herder.alter_offsets, request.match_info["name"], offsets)
        return _json({"message": message})

    async def reset_offsets(self, request):
        return _json({"message": await self._call(self.herder.reset_offsets, request.match_info["name"])})

    async def plugins(self, request):
        return _json(self.herder.plugins.connector_plugins())

    async def plugin_config(self, request):
        """The plug-in's config definitions (KIP-769's shape: name, type, required, default_value,
        importance, documentation, group, ...)."""
        plugin = request.match_info["plugin"]
        try:
            info = self.herder.validate({"connector.class": plugin})
        except Exception:
            raise NotFound(f"Unknown plugin {plugin}") from None
        if any(c["value"]["name"] == "connector.class" and c["value"]["errors"] for c in info["configs"]):
            raise NotFound(f"Unknown plugin {plugin}")
        return _json([c["definition"] for c in info["configs"]])

    async def validate(self, request):
        body = await self._body(request)
        if not isinstance(body, dict):
            raise BadRequest("Request body must be a JSON object of configs")
        props = {k: str(v) for k, v in body.items()}
        plugin = request.match_info["plugin"]
        given = props.get("connector.class")
        if given and given != plugin and self.herder.plugins.aliases.get(given) != plugin \
                and self.herder.plugins.aliases.get(plugin) != given:
            raise BadRequest("Included connector type " + given + " does not match request type " + plugin)
        props.setdefault("connector.class", plugin)
        return _json(await self._call(self.herder.validate, props))

