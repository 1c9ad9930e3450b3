"""Codec speed on the produce and fetch paths, in microseconds per operation.

    .venv/bin/python benchmarks/bench_codec.py

Measures decoding a Produce v9 request body carrying 1 MiB of records, and encoding a
Fetch v12 response carrying 1 MiB of records, both as chunks (what the broker writes with
writelines: records are spliced, not copied) and joined into one bytes.
"""
from __future__ import annotations

import timeit

from reference.protocol.api_keys import ApiKey
from reference.protocol.headers import parse_request_header
from reference.protocol.messages import decode_request, encode_request, encode_response, encode_response_chunks

RECORDS_BYTES = 1 << 20
REPEATS = 5


def microseconds_per_op(operation, number: int) -> float:
    return min(timeit.repeat(operation, number=number, repeat=REPEATS)) / number * 1e6


def main() -> None:
    records = bytes(RECORDS_BYTES)
    produce = encode_request(ApiKey.PRODUCE, 9, 1, "bench", {
        "acks": -1, "timeout_ms": 30_000,
        "topic_data": [{"name": "bench", "partition_data": [{"index": 0, "records": records}]}],
    })
    frame_body = memoryview(produce)[4:]
    fetch = {"responses": [{"topic": "bench", "partitions": [
        {"partition_index": 0, "high_watermark": 1000, "last_stable_offset": 1000, "records": records}]}]}

    def decode_produce():
        header, offset = parse_request_header(frame_body)
        return decode_request(header.api_key, header.api_version, frame_body[offset:])

    figures = {
        "decode Produce v9 request (header + body), 1 MiB records": microseconds_per_op(decode_produce, 20_000),
        "encode Fetch v12 response as chunks, 1 MiB records": microseconds_per_op(
            lambda: encode_response_chunks(ApiKey.FETCH, 12, 1, fetch), 20_000),
        "encode Fetch v12 response as one bytes, 1 MiB records": microseconds_per_op(
            lambda: encode_response(ApiKey.FETCH, 12, 1, fetch), 500),
    }
    for name, micros in figures.items():
        print(f"{name}: {micros:.1f} us/op")


if __name__ == "__main__":
    main()
