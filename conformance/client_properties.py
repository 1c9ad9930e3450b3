"""A client properties file (`--command-config FILE`): Kafka's `key=value` properties format in
librdkafka's names (security.protocol, sasl.mechanism, sasl.username, ssl.ca.location, ...),
read and checked before any client connects, so that a bad file is one line, not a hang.

The check is librdkafka's own: a client is configured with the properties and no
bootstrap.servers, which makes it refuse what it does not know (a misspelt name, a value out
of range such as security.protocol=SASL_TLS) and never connect.
"""
from __future__ import annotations

import logging

from confluent_kafka import KafkaException, Producer

from reference.config import read_properties_file


class BadClientProperties(ValueError):
    """The file cannot be read, or librdkafka refuses a property in it; the message is one line."""


def read_client_properties(path: str) -> dict[str, str]:
    try:
        properties = read_properties_file(path)
    except (OSError, ValueError) as e:
        raise BadClientProperties(f"cannot read client properties: {e}") from None
    problem = invalid_client_property(properties)
    if problem:
        raise BadClientProperties(f"{path}: {problem}")
    return properties


def invalid_client_property(properties: dict[str, str]) -> str | None:
    """What librdkafka refuses in these client properties, or None."""
    try:
        Producer({**properties, "logger": _silent()})
    except KafkaException as e:
        return e.args[0].str()
    return None


def _silent() -> logging.Logger:
    logger = logging.getLogger("conformance.client_properties.librdkafka")
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger
