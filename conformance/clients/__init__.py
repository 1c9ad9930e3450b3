"""One interface over five real Kafka clients, for the kit's tests and the conformance suite.

Every driver takes the same inputs and returns the same shapes, so a test can say
"produce these records with kcat, read them back with aiokafka" in two lines:

    produce(bootstrap, topic, records, compression="lz4") -> list[Delivery]   (one per record, in order)
    consume(bootstrap, topic, partitions, count)           -> list[Message]    (assign mode, from offset 0)

Records and messages carry text keys, values and header values (kcat's line format has no
binary escape). Each driver lives in its own module and imports its client lazily, so a
missing client only skips what needs it.
"""
from __future__ import annotations

import importlib
import shutil
from dataclasses import dataclass, field

CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka", "kcat", "kafkajs")
COMPRESSION_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True)
class Record:
    """A record to produce: partition chosen by the test, text key/value, text header values."""
    partition: int
    key: str | None
    value: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Delivery:
    partition: int
    offset: int


@dataclass(frozen=True)
class Message:
    partition: int
    offset: int
    key: str | None
    value: str | None
    headers: tuple[tuple[str, str], ...] = field(default=())


_MODULES = {
    "confluent-kafka": "conformance.clients.confluent",
    "kafka-python": "conformance.clients.kafka_python",
    "aiokafka": "conformance.clients.aiokafka_client",
    "kcat": "conformance.clients.kcat",
    "kafkajs": "conformance.clients.kafkajs",
}


def driver(client: str):
    """The driver module for a client name in CLIENTS."""
    if client not in _MODULES:
        raise ValueError(f"unknown client {client!r}; choose from {', '.join(CLIENTS)}")
    return importlib.import_module(_MODULES[client])


def unavailable_reason(client: str) -> str | None:
    """Why a client cannot run here, or None when it can."""
    return driver(client).unavailable_reason()


def which(program: str) -> str | None:
    return shutil.which(program)
