"""kafkajs driver: runs conformance/clients/js/driver.js under node with one JSON job."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from conformance.clients import Delivery, Message, Record

JS_DIR = Path(__file__).parent / "js"
TIMEOUT_S_DEFAULT = 180.0


def unavailable_reason() -> str | None:
    if not shutil.which("node"):
        return "node is not installed"
    if not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        return f"kafkajs is not installed (npm install in {JS_DIR}; `make setup` does it)"
    return None


def _run(job: dict, timeout_s: float) -> list[dict]:
    done = subprocess.run(["node", str(JS_DIR / "driver.js")], input=json.dumps(job).encode(),
                          capture_output=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"kafkajs {job['op']} failed: {done.stderr.decode().strip()[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines()]


def produce(bootstrap: str, topic: str, records: list[Record], *, compression: str = "none",
            acks: str | int = "all", idempotent: bool = False, extra: dict | None = None,
            timeout_s: float = TIMEOUT_S_DEFAULT) -> list[Delivery]:
    job = {"op": "produce", "brokers": bootstrap.split(","), "connection": extra or {}, "topic": topic,
           "compression": compression,
           "acks": -1 if acks == "all" else int(acks), "idempotent": idempotent,
           "messages": [{"partition": r.partition, "key": r.key, "value": r.value, "headers": dict(r.headers)}
                        for r in records]}
    return [Delivery(d["partition"], d["offset"]) for d in _run(job, timeout_s)]


def consume_group(bootstrap: str, topic: str, group: str, count: int, *, extra: dict | None = None,
                  timeout_s: float = TIMEOUT_S_DEFAULT) -> list[Message]:
    """kafkajs reads only through a consumer group (it has no assign mode)."""
    job = {"op": "consume", "brokers": bootstrap.split(","), "connection": extra or {}, "topic": topic,
           "group": group, "count": count, "timeoutMs": int(timeout_s * 1000) - 5000}
    return [Message(m["partition"], m["offset"], m["key"], m["value"], tuple(m["headers"].items()))
            for m in _run(job, timeout_s)]
