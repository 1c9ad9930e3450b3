"""Record batch compression codecs, by the ids of the RecordBatch attributes (bits 0-2).

0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd. gzip uses the standard library; snappy, lz4 and
zstd use `cramjam`. What goes on the wire for each, as Kafka's clients write it:

- gzip: a gzip member (Java's GZIPOutputStream).
- snappy: the Java client writes xerial-snappy framing (SnappyOutputStream: an 8-byte magic,
  two int32 version fields, then blocks of [int32 compressed length, raw snappy block]);
  librdkafka writes one raw snappy block. Both are read here; writes use xerial framing.
- lz4: the LZ4 frame format (magic 0x184D2204), as KafkaLZ4BlockOutputStream writes it
  for magic 1 and 2 (KIP-57 fixed the frame header checksum that magic 0 got wrong).
- zstd: a zstd frame (KIP-110, needs Produce v7+).

`compress` takes a level as the topic configs compression.gzip.level, compression.lz4.level
and compression.zstd.level give it (KIP-390); none gives each codec's default.
"""
from __future__ import annotations

import gzip
import struct
import zlib
from enum import IntEnum

import cramjam

from reference.protocol.errors import ErrorCode, KafkaError


class CompressionType(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


GZIP_LEVEL_DEFAULT = 6  # what zlib makes of Java's Deflater.DEFAULT_COMPRESSION (-1)
LZ4_LEVEL_DEFAULT = 9  # compression.lz4.level's default
ZSTD_LEVEL_DEFAULT = 3  # compression.zstd.level's default (zstd's own)
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
XERIAL_VERSION = 1
XERIAL_BLOCK_BYTES = 32 * 1024  # SnappyOutputStream's default block size
_INT32 = struct.Struct(">i")


def compress(compression: int, data: bytes | memoryview, level: int | None = None) -> bytes:
    """Compress `data` as Kafka's Java client does for codec id `compression`, at `level`
    (gzip -1 and None are the codec's default; snappy has no level)."""
    match compression:
        case CompressionType.NONE:
            return bytes(data)
        case CompressionType.GZIP:
            gzip_level = GZIP_LEVEL_DEFAULT if level is None or level == -1 else level
            return gzip.compress(data, compresslevel=gzip_level, mtime=0)
        case CompressionType.SNAPPY:
            return _xerial_snappy_compress(data)
        case CompressionType.LZ4:
            return bytes(cramjam.lz4.compress(data, level=LZ4_LEVEL_DEFAULT if level is None else level))
        case CompressionType.ZSTD:
            return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL_DEFAULT if level is None else level))
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec id {compression}")


def decompress(compression: int, data: bytes | memoryview) -> bytes:
    """Inverse of `compress`; also reads raw snappy (librdkafka). Bad input -> CORRUPT_MESSAGE."""
    try:
        match compression:
            case CompressionType.NONE:
                return bytes(data)
            case CompressionType.GZIP:
                return zlib.decompress(data, wbits=47)  # 32 + 15: gzip or zlib header
            case CompressionType.SNAPPY:
                if bytes(data[:8]) == XERIAL_MAGIC:
                    return _xerial_snappy_decompress(memoryview(data))
                return bytes(cramjam.snappy.decompress_raw(data))
            case CompressionType.LZ4:
                return bytes(cramjam.lz4.decompress(data))
            case CompressionType.ZSTD:
                return bytes(cramjam.zstd.decompress(data))
    except (zlib.error, cramjam.DecompressionError, struct.error, ValueError) as e:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"cannot decompress codec {compression}: {e}") from e
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec id {compression}")


def _xerial_snappy_compress(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    out = [XERIAL_HEADER.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_VERSION)]
    for start in range(0, len(view), XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_BYTES]))
        out.append(_INT32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _xerial_snappy_decompress(view: memoryview) -> bytes:
    position = XERIAL_HEADER.size
    out = []
    while position < len(view):
        (block_bytes,) = _INT32.unpack_from(view, position)
        position += _INT32.size
        if block_bytes < 0 or position + block_bytes > len(view):
            raise ValueError(f"xerial block of {block_bytes} bytes overruns the stream")
        out.append(bytes(cramjam.snappy.decompress_raw(view[position : position + block_bytes])))
        position += block_bytes
    return b"".join(out)
