"""Converters: Connect data <-> the bytes of a Kafka record's key or value.

Configured from the worker's `key.converter` / `value.converter` and their prefixed settings
(`value.converter.schemas.enable=false`), or per connector with the same names.

- StringConverter: UTF-8 text (`converter.encoding`); schema STRING.
- ByteArrayConverter: bytes pass through.
- JsonConverter: JSON; with `schemas.enable=true` (the default) every message is an envelope
  {"schema": ..., "payload": ...}, without it the bare payload. Connect's own internal topics
  use it without schemas.
"""
from __future__ import annotations

import base64
import json

from connect.api import ConnectError, OPTIONAL_STRING_SCHEMA


class Converter:
    def configure(self, configs: dict[str, str], is_key: bool) -> None:
        self.is_key = is_key

    def from_connect_data(self, topic: str, schema: dict | None, value) -> bytes | None:
        raise NotImplementedError

    def to_connect_data(self, topic: str, data: bytes | None) -> tuple[dict | None, object]:
        raise NotImplementedError


class StringConverter(Converter):
    def configure(self, configs, is_key):
        super().configure(configs, is_key)
        self.encoding = configs.get("converter.encoding", "UTF-8")

    def from_connect_data(self, topic, schema, value):
        return None if value is None else str(value).encode(self.encoding)

    def to_connect_data(self, topic, data):
        return OPTIONAL_STRING_SCHEMA, None if data is None else data.decode(self.encoding)


class ByteArrayConverter(Converter):
    def from_connect_data(self, topic, schema, value):
        if value is not None and not isinstance(value, (bytes, bytearray)):
            raise ConnectError(f"ByteArrayConverter is not compatible with objects of type {type(value).__name__}")
        return None if value is None else bytes(value)

    def to_connect_data(self, topic, data):
        return {"type": "bytes", "optional": True}, data


def _json_default(value):
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")  # Connect writes BYTES as base64 text
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


class JsonConverter(Converter):
    def configure(self, configs, is_key):
        super().configure(configs, is_key)
        self.schemas_enable = configs.get("schemas.enable", "true").strip().lower() == "true"

    def from_connect_data(self, topic, schema, value):
        if value is None and not self.schemas_enable:
            return None
        document = {"schema": schema, "payload": value} if self.schemas_enable else value
        return json.dumps(document, separators=(",", ":"), default=_json_default).encode()

    def to_connect_data(self, topic, data):
        if data is None:
            return None, None
        try:
            document = json.loads(data)
        except ValueError as e:
            raise ConnectError(f"Converting byte[] to Kafka Connect data failed due to serialization error: {e}") from None
        if not self.schemas_enable:
            return None, document
        if not (isinstance(document, dict) and set(document) == {"schema", "payload"}):
            raise ConnectError("JsonConverter with schemas.enable requires \"schema\" and \"payload\" fields and may "
                               "not contain additional fields. If you are trying to deserialize plain JSON data, "
                               "set schemas.enable=false in your converter configuration.")
        return document["schema"], document["payload"]


def converter_configs(props: dict[str, str], prefix: str) -> dict[str, str]:
    """The settings under `prefix.` (e.g. value.converter.schemas.enable -> schemas.enable)."""
    return {k[len(prefix) + 1:]: v for k, v in props.items() if k.startswith(prefix + ".")}
