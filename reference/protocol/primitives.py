"""The Kafka protocol's primitive types: a Reader that decodes them from a buffer and a
Writer that encodes them into a list of chunks.

The types are those of Kafka's message definitions (clients/src/main/resources/common/
message/README.md): fixed-width big-endian integers, zig-zag VARINT/VARLONG, UNSIGNED_VARINT,
FLOAT64, UUID, int16-length STRING, int32-length BYTES, int32-count ARRAY and, in flexible
versions, the COMPACT forms whose length is UNSIGNED_VARINT(N + 1) with 0 meaning null,
plus the tagged-field section that ends every flexible struct.

The Reader never trusts a length or a count: each is checked against the bytes that remain
before anything is sliced or allocated, so garbage input fails fast with
ProtocolDecodeError instead of hanging or exhausting memory.
"""
from __future__ import annotations

import struct
import uuid

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")

UNSIGNED_VARINT_BYTES_MAX = 5   # an unsigned 32-bit value in 7-bit groups
VARLONG_BYTES_MAX = 10          # a 64-bit value in 7-bit groups
ZERO_UUID = uuid.UUID(int=0)

# A bytes-like value at least this long becomes a chunk of its own instead of being copied
# into the Writer's buffer, so a 1 MB records field costs no copy until (if ever) joined.
SPLICE_BYTES_MIN = 4096


class ProtocolDecodeError(ValueError):
    """A request or response body that does not decode: truncated, garbage or out of range.

    `path` names the field that failed, outermost first (`topic_data[0].partition_data[2].records`)
    and `message` the message being decoded (`ProduceRequest v9`), when known.
    """

    def __init__(self, reason: str, path: tuple[str, ...] = (), message: str = ""):
        self.reason = reason
        self.path = path
        self.message = message
        location = " ".join(part for part in (message, ".".join(path).replace(".[", "[")) if part)
        super().__init__(f"{location}: {reason}" if location else reason)

    def inside(self, segment: str) -> ProtocolDecodeError:
        """The same error, seen from the struct or array that holds the failing field."""
        return ProtocolDecodeError(self.reason, (segment, *self.path), self.message)

    def in_message(self, message: str) -> ProtocolDecodeError:
        return ProtocolDecodeError(self.reason, self.path, message)


class Reader:
    """Decodes primitives from `buffer[offset:end]`, advancing `position`."""

    __slots__ = ("buffer", "position", "end")

    def __init__(self, buffer: bytes | bytearray | memoryview, offset: int = 0, end: int | None = None):
        self.buffer = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
        self.position = offset
        self.end = len(self.buffer) if end is None else end
        assert 0 <= self.position <= self.end <= len(self.buffer)

    def remaining(self) -> int:
        return self.end - self.position

    def _need(self, size: int, what: str) -> None:
        if size > self.end - self.position:
            raise ProtocolDecodeError(f"{what} needs {size} bytes, {self.end - self.position} remain")

    def _fixed(self, codec: struct.Struct, what: str):
        self._need(codec.size, what)
        (value,) = codec.unpack_from(self.buffer, self.position)
        self.position += codec.size
        return value

    def int8(self) -> int:
        return self._fixed(INT8, "int8")

    def int16(self) -> int:
        return self._fixed(INT16, "int16")

    def int32(self) -> int:
        return self._fixed(INT32, "int32")

    def int64(self) -> int:
        return self._fixed(INT64, "int64")

    def uint16(self) -> int:
        return self._fixed(UINT16, "uint16")

    def uint32(self) -> int:
        return self._fixed(UINT32, "uint32")

    def float64(self) -> float:
        return self._fixed(FLOAT64, "float64")

    def boolean(self) -> bool:
        return self._fixed(INT8, "bool") != 0

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self.raw(16, "uuid")))

    def _varint_bits(self, bytes_max: int, what: str) -> int:
        value = shift = 0
        buffer, position, end = self.buffer, self.position, self.end
        for _ in range(bytes_max):
            if position >= end:
                raise ProtocolDecodeError(f"{what} runs past the end")
            byte = buffer[position]
            position += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.position = position
                return value
            shift += 7
        raise ProtocolDecodeError(f"{what} longer than {bytes_max} bytes")

    def unsigned_varint(self) -> int:
        value = self._varint_bits(UNSIGNED_VARINT_BYTES_MAX, "unsigned varint")
        if value > 0xFFFFFFFF:
            raise ProtocolDecodeError(f"unsigned varint {value} exceeds 32 bits")
        return value

    def varint(self) -> int:
        bits = self.unsigned_varint()
        return (bits >> 1) ^ -(bits & 1)

    def varlong(self) -> int:
        bits = self._varint_bits(VARLONG_BYTES_MAX, "varlong")
        if bits > 0xFFFFFFFFFFFFFFFF:
            raise ProtocolDecodeError("varlong exceeds 64 bits")
        return (bits >> 1) ^ -(bits & 1)

    def raw(self, size: int, what: str = "bytes") -> memoryview:
        """`size` bytes as a zero-copy view of the buffer."""
        self._need(size, what)
        start = self.position
        self.position = start + size
        return self.buffer[start:start + size]

    # Lengths. Each returns None for null, else a length already checked against the remainder.

    def _length(self, length: int, nullable: bool, what: str) -> int | None:
        if length < 0:
            if length == -1 and nullable:
                return None
            raise ProtocolDecodeError(f"{what} has invalid length {length}")
        self._need(length, what)
        return length

    def string_length(self, nullable: bool) -> int | None:
        return self._length(self.int16(), nullable, "string")

    def compact_length(self, nullable: bool, what: str) -> int | None:
        return self._length(self.unsigned_varint() - 1, nullable, what)

    def bytes_length(self, nullable: bool) -> int | None:
        return self._length(self.int32(), nullable, "bytes")

    def array_count(self, nullable: bool) -> int | None:
        return self._length(self.int32(), nullable, "array")

    def compact_array_count(self, nullable: bool) -> int | None:
        return self.compact_length(nullable, "compact array")

    def text(self, length: int | None) -> str | None:
        if length is None:
            return None
        try:
            return str(self.raw(length, "string"), "utf-8")
        except UnicodeDecodeError as error:
            raise ProtocolDecodeError(f"string is not UTF-8 ({error.reason})") from None

    def string(self, nullable: bool = False) -> str | None:
        return self.text(self.string_length(nullable))

    def compact_string(self, nullable: bool = False) -> str | None:
        return self.text(self.compact_length(nullable, "compact string"))

    def bytes(self, nullable: bool = False) -> bytes | None:
        length = self.bytes_length(nullable)
        return None if length is None else bytes(self.raw(length))

    def compact_bytes(self, nullable: bool = False) -> bytes | None:
        length = self.compact_length(nullable, "compact bytes")
        return None if length is None else bytes(self.raw(length))

    def tagged_fields(self) -> list[tuple[int, memoryview]]:
        """The tagged-field section: (tag, raw value) pairs in strictly ascending tag order."""
        count = self.unsigned_varint()
        self._need(count, "tagged fields")  # each takes at least one byte
        fields: list[tuple[int, memoryview]] = []
        previous_tag = -1
        for _ in range(count):
            tag = self.unsigned_varint()
            if tag <= previous_tag:
                raise ProtocolDecodeError(f"tag {tag} follows tag {previous_tag}: tags must ascend")
            previous_tag = tag
            size = self.unsigned_varint()
            fields.append((tag, self.raw(size, f"tagged field {tag}")))
        return fields


class Writer:
    """Encodes primitives into a bytearray, splicing large bytes-like values in as chunks.

    `chunks()` gives the encoded message as a list of bytes-like chunks (ready for a
    transport's writelines); `getvalue()` joins them.
    """

    __slots__ = ("buffer", "_chunks")

    def __init__(self) -> None:
        self.buffer = bytearray()
        self._chunks: list[bytes | bytearray | memoryview] = []

    def chunks(self) -> list[bytes | bytearray | memoryview]:
        if self.buffer:
            self._chunks.append(self.buffer)
            self.buffer = bytearray()
        return self._chunks

    def getvalue(self) -> bytes:
        return b"".join(self.chunks())

    def int8(self, value: int) -> None:
        self.buffer += INT8.pack(value)

    def int16(self, value: int) -> None:
        self.buffer += INT16.pack(value)

    def int32(self, value: int) -> None:
        self.buffer += INT32.pack(value)

    def int64(self, value: int) -> None:
        self.buffer += INT64.pack(value)

    def uint16(self, value: int) -> None:
        self.buffer += UINT16.pack(value)

    def uint32(self, value: int) -> None:
        self.buffer += UINT32.pack(value)

    def float64(self, value: float) -> None:
        self.buffer += FLOAT64.pack(value)

    def boolean(self, value: bool) -> None:
        self.buffer.append(1 if value else 0)

    def uuid(self, value: uuid.UUID | bytes) -> None:
        raw = value.bytes if isinstance(value, uuid.UUID) else bytes(value)
        assert len(raw) == 16, f"a uuid is 16 bytes, got {len(raw)}"
        self.buffer += raw

    def unsigned_varint(self, value: int) -> None:
        assert 0 <= value <= 0xFFFFFFFF, f"unsigned varint out of range: {value}"
        while value >= 0x80:
            self.buffer.append((value & 0x7F) | 0x80)
            value >>= 7
        self.buffer.append(value)

    def varint(self, value: int) -> None:
        assert -(1 << 31) <= value < (1 << 31), f"varint out of range: {value}"
        self.unsigned_varint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)

    def varlong(self, value: int) -> None:
        assert -(1 << 63) <= value < (1 << 63), f"varlong out of range: {value}"
        bits = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
        while bits >= 0x80:
            self.buffer.append((bits & 0x7F) | 0x80)
            bits >>= 7
        self.buffer.append(bits)

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes as they are; a large value is spliced in as its own chunk, not copied."""
        if nbytes(data) >= SPLICE_BYTES_MIN:
            self.chunks()
            self._chunks.append(data)
        else:
            self.buffer += data

    def string(self, value: str | None, nullable: bool = False) -> None:
        if value is None:
            assert nullable, "null given for a non-nullable string"
            self.int16(-1)
            return
        encoded = value.encode()
        assert len(encoded) <= 0x7FFF, f"string of {len(encoded)} bytes exceeds int16 length"
        self.int16(len(encoded))
        self.buffer += encoded

    def compact_string(self, value: str | None, nullable: bool = False) -> None:
        if value is None:
            assert nullable, "null given for a non-nullable string"
            self.buffer.append(0)
            return
        encoded = value.encode()
        self.unsigned_varint(len(encoded) + 1)
        self.buffer += encoded

    def bytes(self, value: bytes | None, nullable: bool = False) -> None:
        if value is None:
            assert nullable, "null given for non-nullable bytes"
            self.int32(-1)
            return
        self.int32(nbytes(value))
        self.raw(value)

    def compact_bytes(self, value: bytes | None, nullable: bool = False) -> None:
        if value is None:
            assert nullable, "null given for non-nullable bytes"
            self.buffer.append(0)
            return
        self.unsigned_varint(nbytes(value) + 1)
        self.raw(value)

    def array_count(self, count: int | None, nullable: bool = False) -> None:
        assert count is not None or nullable, "null given for a non-nullable array"
        self.int32(-1 if count is None else count)

    def compact_array_count(self, count: int | None, nullable: bool = False) -> None:
        assert count is not None or nullable, "null given for a non-nullable array"
        self.unsigned_varint(0 if count is None else count + 1)

    def tagged_fields(self, fields: list[tuple[int, bytes | bytearray | memoryview]]) -> None:
        """The tagged-field section from (tag, encoded value) pairs in ascending tag order."""
        self.unsigned_varint(len(fields))
        previous_tag = -1
        for tag, value in fields:
            assert tag > previous_tag, f"tagged fields out of order: {tag} after {previous_tag}"
            previous_tag = tag
            self.unsigned_varint(tag)
            self.unsigned_varint(nbytes(value))
            self.buffer += value


def nbytes(data: bytes | bytearray | memoryview) -> int:
    """The size in bytes of a bytes-like value (a memoryview's len counts items, not bytes)."""
    return data.nbytes if isinstance(data, memoryview) else len(data)
