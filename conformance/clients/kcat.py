"""kcat driver: the kcat command line (Debian's kcat, built on its own librdkafka).

kcat's producer reads `key<TAB>value` lines and applies one set of -H headers to a whole
run, so records are sent in runs of the same partition and headers. It prints no offsets
for what it produced: deliveries come back with offset None, and tests check placement by
reading back.
"""
from __future__ import annotations

import itertools
import json
import shutil
import subprocess

from conformance.clients import Delivery, Message, Record

TIMEOUT_S_DEFAULT = 120.0


def unavailable_reason() -> str | None:
    return None if shutil.which("kcat") else "kcat is not installed (apt-get install kcat; `make setup` does it)"


def produce(bootstrap: str, topic: str, records: list[Record], *, compression: str = "none",
            acks: str = "all", extra: dict | None = None,
            timeout_s: float = TIMEOUT_S_DEFAULT) -> list[Delivery]:
    deliveries: list[Delivery] = []
    for (partition, headers), run in itertools.groupby(records, key=lambda r: (r.partition, r.headers)):
        run = list(run)
        for record in run:
            if "\t" in (record.key or "") or "\n" in record.value or "\n" in (record.key or ""):
                raise ValueError("kcat's line format cannot carry tabs or newlines in keys and values")
        command = ["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-K", "\t",
                   "-z", compression, "-X", f"acks={'-1' if acks == 'all' else acks}"]
        for name, value in headers:
            command += ["-H", f"{name}={value}"]
        for key, value in (extra or {}).items():
            command += ["-X", f"{key}={value}"]
        lines = "".join(f"{r.key or ''}\t{r.value}\n" for r in run)
        subprocess.run(command, input=lines.encode(), check=True, timeout=timeout_s, capture_output=True)
        deliveries += [Delivery(partition, None) for _ in run]  # type: ignore[arg-type]
    return deliveries


def consume(bootstrap: str, topic: str, partitions: list[int], count: int, *,
            extra: dict | None = None, timeout_s: float = TIMEOUT_S_DEFAULT) -> list[Message]:
    messages: list[Message] = []
    for partition in partitions:
        command = ["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", str(partition), "-o", "beginning",
                   "-e", "-J", "-q"]
        for key, value in (extra or {}).items():
            command += ["-X", f"{key}={value}"]
        out = subprocess.run(command, check=True, timeout=timeout_s, capture_output=True).stdout
        for line in out.splitlines():
            doc = json.loads(line)
            flat = doc.get("headers") or []
            messages.append(Message(doc["partition"], doc["offset"], doc.get("key"), doc.get("payload"),
                                    tuple(zip(flat[0::2], flat[1::2]))))
    return messages[:count] if len(messages) > count else messages
