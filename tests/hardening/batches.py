"""Record batches built byte by byte, lies included: a records_count that disagrees with the
records, bad varints, null header keys, offset deltas out of order, compression bombs. The
header is written here (not by reference.protocol.records) so that any field can lie; the
CRC is always right, so only the walk of the records can find what is wrong."""
from __future__ import annotations

import struct
import time

import crc32c

from reference.protocol.compression import compress

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_COVERED_FROM = 21


def varint(value: int) -> bytes:
    raw = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def varbytes(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def record(offset_delta: int, key: bytes | None = b"k", value: bytes | None = b"v", *, timestamp_delta: int = 0,
           headers: tuple[tuple[bytes | None, bytes | None], ...] = ()) -> bytes:
    body = (b"\x00" + varint(timestamp_delta) + varint(offset_delta) + varbytes(key) + varbytes(value)
            + varint(len(headers)) + b"".join(varbytes(k) + varbytes(v) for k, v in headers))
    return varint(len(body)) + body


def batch(records: list[bytes] | bytes, *, records_count: int | None = None, last_offset_delta: int | None = None,
          compression: int = 0, compressed: bool = False, base_timestamp_ms: int | None = None) -> bytes:
    """One v2 batch around already encoded records (a list, or the raw bytes of the records
    section), compressed with `compression` unless `compressed` says the bytes already are;
    counts default to the list's length."""
    body = records if isinstance(records, bytes) else b"".join(records)
    count = len(records) if records_count is None else records_count
    last_delta = count - 1 if last_offset_delta is None else last_offset_delta
    timestamp = int(time.time() * 1000) if base_timestamp_ms is None else base_timestamp_ms
    if compression and not compressed:
        body = compress(compression, body)
    header = _HEADER.pack(0, _HEADER.size - 12 + len(body), -1, 2, 0, compression, last_delta, timestamp, timestamp,
                          -1, -1, -1, count)
    unsigned = header + body
    crc = crc32c.crc32c(unsigned[_CRC_COVERED_FROM:])
    return unsigned[:17] + struct.pack(">I", crc) + unsigned[21:]
