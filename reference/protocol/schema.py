"""Kafka's JSON message definitions, loaded into one field layout per (message, version).

The definitions are Apache Kafka's own (`clients/src/main/resources/common/message/*.json`),
read as files (never imported) from the copy kafka-python ships in
`kafka/protocol/schemas/resources/`, then from kspec's `reference/protocol/definitions/`
(which adds APIs that copy lacks and replaces a file of the same message name). A definition gives each field a type, the versions it exists
in (`versions`), may be null in (`nullableVersions`) or is tagged in (`taggedVersions` + `tag`),
and a `default`; the message's `flexibleVersions` switch strings, bytes and arrays to their
compact encodings and add a tagged-field section to every struct. Nested structs are declared
inline or, by type name alone, in the message's `commonStructs`.

A layout is what the codec needs for one version and nothing else: the fields present in
that version, in wire order, with snake_case names (TopicData -> topic_data). Layouts are
computed once per (message, version) and cached.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reference.protocol.primitives import ZERO_UUID

KAFKA_DEFINITIONS_SUBDIR = ("protocol", "schemas", "resources")  # inside the installed `kafka` package
KSPEC_DEFINITIONS_DIR = Path(__file__).with_name("definitions")

PRIMITIVE_TYPES = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint16", "uint32", "float64",
     "string", "bytes", "records", "uuid"}
)
REQUEST, RESPONSE = "request", "response"
VERSION_MAX = 0x7FFF  # "N+" reaches every later version


@dataclass(frozen=True, slots=True)
class VersionRange:
    """A definition's version range: "3+", "1-2", "5" or "none"."""

    low: int
    high: int

    @staticmethod
    def parse(text: str) -> VersionRange | None:
        text = text.strip()
        if text == "none":
            return None
        if text.endswith("+"):
            return VersionRange(int(text[:-1]), VERSION_MAX)
        low, _, high = text.partition("-")
        return VersionRange(int(low), int(high or low))

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high


def _contains(versions: VersionRange | None, version: int) -> bool:
    return versions is not None and version in versions


@dataclass(frozen=True, slots=True)
class MessageDefinition:
    """One JSON file: a request, a response, a header or a data message."""

    name: str
    kind: str  # "request", "response", "header" or "data"
    api_key: int | None
    valid_versions: VersionRange
    flexible_versions: VersionRange | None
    fields: tuple[dict, ...]
    common_structs: dict[str, dict]  # type name -> {"versions", "fields"}

    def is_flexible(self, version: int) -> bool:
        return _contains(self.flexible_versions, version)


@dataclass(frozen=True, slots=True)
class FieldLayout:
    """One field as it is on the wire in one version.

    `type` is a primitive type name or "struct"; `is_array` marks `[]type`. `compact` says
    whether strings, bytes and arrays use the flexible (UNSIGNED_VARINT) lengths. `tag` is None
    for a field in the fixed part of its struct. `default` is the value a missing field takes:
    a Python scalar, None for null, or EMPTY for an empty array or a struct of defaults.
    """

    name: str
    type: str
    is_array: bool
    nullable: bool
    compact: bool
    tag: int | None
    default: Any
    struct: StructLayout | None


@dataclass(frozen=True, slots=True)
class StructLayout:
    """A struct (or a whole message body) in one version: fixed fields, then tagged fields."""

    name: str
    flexible: bool
    fields: tuple[FieldLayout, ...]
    tagged_fields: tuple[FieldLayout, ...]  # ascending by tag; empty unless flexible
    names_any_version: frozenset[str]  # every field name the definition gives this struct


EMPTY = "<empty>"  # FieldLayout.default of an array (an empty list) or a struct (all defaults)


def snake_case(name: str) -> str:
    """Kafka's CamelCase field names as Python names: ProducerId -> producer_id."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


def _parse_definition(text: str) -> MessageDefinition:
    raw = json.loads(_strip_comments(text))
    valid = VersionRange.parse(raw["validVersions"])
    assert valid is not None, f"{raw['name']} has no valid versions"
    return MessageDefinition(
        name=raw["name"],
        kind=raw["type"],
        api_key=raw.get("apiKey"),
        valid_versions=valid,
        flexible_versions=VersionRange.parse(raw.get("flexibleVersions", "none")),
        fields=tuple(raw.get("fields", ())),
        common_structs={struct["name"]: struct for struct in raw.get("commonStructs", ())},
    )


def _kafka_definitions_dir() -> Path:
    # Located, not imported: importing kafka-python would load its whole client.
    spec = importlib.util.find_spec("kafka")
    assert spec is not None and spec.submodule_search_locations, "kafka-python is not installed"
    directory = Path(spec.submodule_search_locations[0]).joinpath(*KAFKA_DEFINITIONS_SUBDIR)
    assert directory.is_dir(), f"no message definitions in {directory}"
    return directory


@functools.cache
def definitions() -> dict[str, MessageDefinition]:
    """Every message definition by name: kafka-python's copies, then kspec's own."""
    paths = sorted(_kafka_definitions_dir().glob("*.json")) + sorted(KSPEC_DEFINITIONS_DIR.glob("*.json"))
    texts = [path.read_text(encoding="utf-8") for path in paths]
    by_name: dict[str, MessageDefinition] = {}
    for text in texts:
        definition = _parse_definition(text)
        by_name[definition.name] = definition
    return by_name


@functools.cache
def _by_api_key() -> dict[tuple[int, str], MessageDefinition]:
    table = {}
    for definition in definitions().values():
        if definition.kind in (REQUEST, RESPONSE):
            assert definition.api_key is not None, f"{definition.name} has no apiKey"
            table[definition.api_key, definition.kind] = definition
    return table


def api_keys() -> list[int]:
    """Every API key that has both a request and a response definition, ascending."""
    table = _by_api_key()
    return sorted(key for key, kind in table if kind == REQUEST and (key, RESPONSE) in table)


def definition(api_key: int, kind: str) -> MessageDefinition:
    """The request or response definition of an API; KeyError for an unknown API key."""
    assert kind in (REQUEST, RESPONSE), kind
    return _by_api_key()[api_key, kind]


def valid_versions(api_key: int) -> tuple[int, int]:
    """The (min, max) versions the definitions give for an API's requests."""
    versions = definition(api_key, REQUEST).valid_versions
    return versions.low, versions.high


def flexible(api_key: int, version: int, kind: str) -> bool:
    """Whether this version of the request or response uses the flexible (KIP-482) encoding.

    Asked for any version, valid or not: the header of a request whose version the broker
    does not support still has to be parsed to answer it.
    """
    return definition(api_key, kind).is_flexible(version)


def layout(api_key: int, version: int, kind: str) -> StructLayout:
    """The body layout of an API's request or response at one version."""
    return message_layout(definition(api_key, kind).name, version)


@functools.cache
def message_layout(name: str, version: int) -> StructLayout:
    """The layout of any definition (including RequestHeader and ResponseHeader) at one version."""
    message = definitions()[name]
    return _struct_layout(message, name, message.fields, version, message.is_flexible(version))


def _struct_layout(
    message: MessageDefinition, name: str, fields: tuple[dict, ...] | list[dict], version: int, flexible: bool
) -> StructLayout:
    fixed: list[FieldLayout] = []
    tagged: list[FieldLayout] = []
    for spec in fields:
        if not _contains(VersionRange.parse(spec["versions"]), version):
            continue
        field = _field_layout(message, spec, version, flexible)
        (tagged if field.tag is not None else fixed).append(field)
    tagged.sort(key=lambda field: field.tag)
    tags = [field.tag for field in tagged]
    assert len(set(tags)) == len(tags), f"{message.name} {name} v{version} repeats a tag: {tags}"
    assert flexible or not tagged, f"{message.name} {name} v{version} has tagged fields but is not flexible"
    return StructLayout(
        name=name,
        flexible=flexible,
        fields=tuple(fixed),
        tagged_fields=tuple(tagged),
        names_any_version=frozenset(snake_case(spec["name"]) for spec in fields),
    )


def _field_layout(message: MessageDefinition, spec: dict, version: int, flexible: bool) -> FieldLayout:
    type_name: str = spec["type"]
    is_array = type_name.startswith("[]")
    element = type_name[2:] if is_array else type_name
    nullable = _contains(VersionRange.parse(spec.get("nullableVersions", "none")), version)
    tagged = _contains(VersionRange.parse(spec.get("taggedVersions", "none")), version)
    # A field may override the message's flexibleVersions; the one that does is RequestHeader
    # ClientId, kept an int16-length string so any broker can read any request's header.
    field_flexible = spec.get("flexibleVersions")
    compact = flexible if field_flexible is None else _contains(VersionRange.parse(field_flexible), version)

    struct = None
    if element not in PRIMITIVE_TYPES:
        struct_fields = spec.get("fields")
        if struct_fields is None:
            assert element in message.common_structs, f"{message.name}: no struct named {element}"
            struct_fields = message.common_structs[element]["fields"]
        struct = _struct_layout(message, element, struct_fields, version, flexible)

    return FieldLayout(
        name=snake_case(spec["name"]),
        type="struct" if struct is not None else element,
        is_array=is_array,
        nullable=nullable,
        compact=compact,
        tag=spec["tag"] if tagged else None,
        default=_default(spec.get("default"), element, is_array, struct is not None, nullable),
        struct=struct,
    )


def _default(text: Any, element: str, is_array: bool, is_struct: bool, nullable: bool) -> Any:
    """A field's default as a Python value (Kafka's rules: 0, false, "", empty, zero uuid)."""
    text = None if text is None else str(text)
    if text == "null" and nullable:
        return None
    if is_array or is_struct:
        return EMPTY
    if element in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return int(text, 0) if text else 0
    if element == "float64":
        return float(text) if text else 0.0
    if element == "bool":
        return (text or "false").lower() == "true"
    if element == "string":
        return text if text not in (None, "null") else ""
    if element == "uuid":
        return ZERO_UUID
    if element == "records":
        return None if nullable else b""
    assert element == "bytes", element
    return b""
