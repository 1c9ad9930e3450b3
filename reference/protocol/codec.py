"""The generic message codec: a struct layout (schema.py) compiled into a decode function and
an encode function, plus Struct, the decoded value.

Compiling turns each field of a layout into a small closure that reads or writes exactly that
field's wire form, once per (message, version), so decoding a request is a walk over a list of
prepared functions rather than a re-interpretation of the definition.

Encoding takes a Struct or any Mapping (nested dicts and lists welcome). A field the value
lacks takes its default, so a handler sets only what matters. A `records` field may be given
as bytes-like or as a list of bytes-like chunks; either way large records are spliced into
the Writer's chunk list, never copied.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from reference.protocol.primitives import ProtocolDecodeError, Reader, Writer, nbytes
from reference.protocol.schema import EMPTY, FieldLayout, StructLayout

Decoder = Callable[[Reader], Any]
Encoder = Callable[[Writer, Any], None]

_MISSING = object()


class Struct:
    """A decoded struct: snake_case attributes, lists of Struct for arrays.

    Tagged fields this codec does not know (a newer peer's) are kept, raw, in
    `unknown_tagged_fields` as (tag, bytes) pairs; they take no part in equality.
    """

    __slots__ = ("__dict__", "unknown_tagged_fields")

    def __init__(self, **fields: Any):
        self.__dict__.update(fields)
        self.unknown_tagged_fields: tuple[tuple[int, bytes], ...] = ()

    @classmethod
    def _of(cls, fields: dict[str, Any], unknown_tagged_fields: tuple[tuple[int, bytes], ...] = ()) -> Struct:
        struct = cls.__new__(cls)
        struct.__dict__ = fields
        struct.unknown_tagged_fields = unknown_tagged_fields
        return struct

    def get(self, name: str, default: Any = None) -> Any:
        return self.__dict__.get(name, default)

    def to_dict(self) -> dict[str, Any]:
        """Plain dicts and lists all the way down."""
        return {name: _plain(value) for name, value in self.__dict__.items()}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Struct) and self.__dict__ == other.__dict__

    def __repr__(self) -> str:
        return "Struct(" + ", ".join(f"{name}={value!r}" for name, value in self.__dict__.items()) + ")"


def _plain(value: Any) -> Any:
    if isinstance(value, Struct):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


# ---------------------------------------------------------------------------------------------
# Decoding


def compile_decoder(layout: StructLayout) -> Decoder:
    """reader -> Struct for one struct layout (nested structs compiled with it)."""
    fixed = [(field.name, _field_decoder(field)) for field in layout.fields]
    tagged = {field.tag: (field.name, _field_decoder(field)) for field in layout.tagged_fields}
    tagged_defaults = [(field.name, _default_factory(field)) for field in layout.tagged_fields]
    flexible = layout.flexible

    def decode_struct(reader: Reader) -> Struct:
        values: dict[str, Any] = {}
        for name, decode in fixed:
            try:
                values[name] = decode(reader)
            except ProtocolDecodeError as error:
                raise error.inside(name) from None
        if not flexible:
            return Struct._of(values)
        for name, make_default in tagged_defaults:
            values[name] = make_default()
        unknown: list[tuple[int, bytes]] = []
        for tag, raw in reader.tagged_fields():
            known = tagged.get(tag)
            if known is None:
                unknown.append((tag, bytes(raw)))
                continue
            name, decode = known
            field_reader = Reader(raw)
            try:
                values[name] = decode(field_reader)
                if field_reader.remaining():
                    raise ProtocolDecodeError(f"tagged field {tag} has {field_reader.remaining()} bytes left over")
            except ProtocolDecodeError as error:
                raise error.inside(name) from None
        return Struct._of(values, tuple(unknown))

    return decode_struct


_FIXED_READERS: dict[str, Decoder] = {
    "int8": Reader.int8,
    "int16": Reader.int16,
    "int32": Reader.int32,
    "int64": Reader.int64,
    "uint16": Reader.uint16,
    "uint32": Reader.uint32,
    "float64": Reader.float64,
    "bool": Reader.boolean,
    "uuid": Reader.uuid,
}


def _field_decoder(field: FieldLayout) -> Decoder:
    if not field.is_array:
        return _value_decoder(field, field.nullable)
    decode_element = _value_decoder(field, nullable=False)
    compact, nullable = field.compact, field.nullable

    def decode_array(reader: Reader) -> list | None:
        count = reader.compact_array_count(nullable) if compact else reader.array_count(nullable)
        if count is None:
            return None
        items = []
        for index in range(count):
            try:
                items.append(decode_element(reader))
            except ProtocolDecodeError as error:
                raise error.inside(f"[{index}]") from None
        return items

    return decode_array


def _value_decoder(field: FieldLayout, nullable: bool) -> Decoder:
    kind, compact = field.type, field.compact
    if kind in _FIXED_READERS:
        return _FIXED_READERS[kind]
    if kind == "string":
        if compact:
            return lambda reader: reader.compact_string(nullable)
        return lambda reader: reader.string(nullable)
    if kind == "bytes":
        if compact:
            return lambda reader: reader.compact_bytes(nullable)
        return lambda reader: reader.bytes(nullable)
    if kind == "records":

        def decode_records(reader: Reader) -> memoryview | None:
            size = reader.compact_length(nullable, "records") if compact else reader.bytes_length(nullable)
            return None if size is None else reader.raw(size, "records")

        return decode_records
    assert kind == "struct" and field.struct is not None, kind
    decode_struct = compile_decoder(field.struct)
    if not nullable:
        return decode_struct

    def decode_nullable_struct(reader: Reader) -> Struct | None:
        # A nullable struct is preceded by an int8: -1 for null, 1 when present.
        return None if reader.int8() < 0 else decode_struct(reader)

    return decode_nullable_struct


def _default_factory(field: FieldLayout) -> Callable[[], Any]:
    """A fresh default value for a field (a new list or Struct each time, never shared)."""
    if field.default is not EMPTY:
        return lambda: field.default
    if field.is_array:
        return list
    assert field.struct is not None
    struct_layout = field.struct
    factories = [(member.name, _default_factory(member)) for member in (*struct_layout.fields, *struct_layout.tagged_fields)]
    return lambda: Struct._of({name: make() for name, make in factories})


def default_struct(layout: StructLayout) -> Struct:
    """A struct with every field at its default."""
    return Struct._of({field.name: _default_factory(field)() for field in (*layout.fields, *layout.tagged_fields)})


# ---------------------------------------------------------------------------------------------
# Encoding


def compile_encoder(layout: StructLayout) -> Encoder:
    """(writer, Struct | Mapping) -> None for one struct layout (nested structs compiled with it)."""
    fixed = [(field.name, _field_encoder(field)) for field in layout.fields]
    tagged = [(field.tag, field.name, _field_encoder(field)) for field in layout.tagged_fields]
    # Kafka writes a tagged field only when its value differs from the default (KIP-482).
    tagged_default_bytes = {}
    for tag, _name, encode in tagged:
        default_writer = Writer()
        encode(default_writer, _MISSING)
        tagged_default_bytes[tag] = default_writer.getvalue()
    flexible = layout.flexible

    def encode_struct(writer: Writer, value: Struct | Mapping | None) -> None:
        values = _values_of(value, layout)
        for name, encode in fixed:
            encode(writer, values.get(name, _MISSING))
        if not flexible:
            return
        fields: list[tuple[int, bytes | bytearray | memoryview]] = []
        for tag, name, encode in tagged:
            field_value = values.get(name, _MISSING)
            if field_value is _MISSING:
                continue
            field_writer = Writer()
            encode(field_writer, field_value)
            encoded = field_writer.getvalue()
            if encoded != tagged_default_bytes[tag]:
                fields.append((tag, encoded))
        if isinstance(value, Struct) and value.unknown_tagged_fields:
            fields = sorted(fields + list(value.unknown_tagged_fields))
        writer.tagged_fields(fields)

    return encode_struct


def _values_of(value: Struct | Mapping | None, layout: StructLayout) -> Mapping:
    if value is None or value is _MISSING:
        return {}
    values = value.__dict__ if isinstance(value, Struct) else value
    assert isinstance(values, Mapping), f"{layout.name}: expected a Struct or a Mapping, got {type(value).__name__}"
    assert values.keys() <= layout.names_any_version, (
        f"{layout.name} has no field {sorted(values.keys() - layout.names_any_version)}"
    )
    return values


_FIXED_WRITERS: dict[str, Callable[[Writer, Any], None]] = {
    "int8": Writer.int8,
    "int16": Writer.int16,
    "int32": Writer.int32,
    "int64": Writer.int64,
    "uint16": Writer.uint16,
    "uint32": Writer.uint32,
    "float64": Writer.float64,
    "bool": Writer.boolean,
    "uuid": Writer.uuid,
}


def _field_encoder(field: FieldLayout) -> Encoder:
    """(writer, value or _MISSING) -> None; _MISSING encodes the field's default."""
    default = field.default
    if field.is_array:
        encode_element = _value_encoder(field, nullable=False)
        compact, nullable = field.compact, field.nullable

        def encode_array(writer: Writer, items: Any) -> None:
            if items is _MISSING:
                items = None if default is None else ()
            count = None if items is None else len(items)
            if compact:
                writer.compact_array_count(count, nullable)
            else:
                writer.array_count(count, nullable)
            for item in items or ():
                encode_element(writer, item)

        return encode_array

    encode_value = _value_encoder(field, field.nullable)
    if default is EMPTY:
        return encode_value  # a struct: _MISSING encodes every member's default

    def encode_field(writer: Writer, value: Any) -> None:
        encode_value(writer, default if value is _MISSING else value)

    return encode_field


def _value_encoder(field: FieldLayout, nullable: bool) -> Encoder:
    kind, compact = field.type, field.compact
    if kind in _FIXED_WRITERS:
        return _FIXED_WRITERS[kind]
    if kind == "string":
        if compact:
            return lambda writer, value: writer.compact_string(value, nullable)
        return lambda writer, value: writer.string(value, nullable)
    if kind == "bytes":
        if compact:
            return lambda writer, value: writer.compact_bytes(value, nullable)
        return lambda writer, value: writer.bytes(value, nullable)
    if kind == "records":
        return _records_encoder(compact, nullable)
    assert kind == "struct" and field.struct is not None, kind
    encode_struct = compile_encoder(field.struct)
    if not nullable:
        return encode_struct

    def encode_nullable_struct(writer: Writer, value: Any) -> None:
        if value is None or (value is _MISSING and field.default is None):
            writer.int8(-1)
            return
        writer.int8(1)
        encode_struct(writer, value)

    return encode_nullable_struct


def _records_encoder(compact: bool, nullable: bool) -> Encoder:
    """Records pass through untouched: bytes-like, or a list of bytes-like chunks spliced in order."""

    def encode_records(writer: Writer, value: Any) -> None:
        if value is None:
            if compact:
                writer.compact_bytes(None, nullable)
            else:
                writer.bytes(None, nullable)
            return
        chunks = value if isinstance(value, (list, tuple)) else (value,)
        size = sum(nbytes(chunk) for chunk in chunks)
        if compact:
            writer.unsigned_varint(size + 1)
        else:
            writer.int32(size)
        for chunk in chunks:
            writer.raw(chunk)

    return encode_records
