"""PRO-1 for record batches: batches with valid CRCs but arbitrary contents (any record
fields, null keys and header keys, any compression, counts and offset deltas that lie, bytes
flipped inside the records) sent to a real broker. Each is answered with an error code or
stored; nothing crashes a handler, and what is stored reads back as whole, valid batches."""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference.process import BrokerProcess
from reference.protocol.compression import CompressionType
from reference.protocol.errors import ErrorCode
from reference.protocol.records import RecordBatch, iter_batches
from reference.protocol.validator import ValidationRules, validate_records
from tests.broker.conftest import RawClient
from tests.broker.helpers import create_topic, fetch, produce

from .batches import batch, record

TOPICS = {"fuzz-plain": {}, "fuzz-compacted": {"cleanup.policy": "compact"}}
ANSWERS = {ErrorCode.NONE, ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD, ErrorCode.INVALID_TIMESTAMP,
           ErrorCode.MESSAGE_TOO_LARGE}
LENIENT = ValidationRules(1 << 30, False, True, (1 << 63) - 1, (1 << 63) - 1)  # structure only


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(str(tmp_path_factory.mktemp("fuzz-records") / "data")) as process:
        client = RawClient(process.bootstrap)
        for name, configs in TOPICS.items():
            assert create_topic(client, name, configs=configs).error_code == ErrorCode.NONE
        client.close()
        yield process


optional_bytes = st.none() | st.binary(max_size=40)
records = st.lists(st.tuples(optional_bytes, optional_bytes, st.lists(st.tuples(optional_bytes, optional_bytes),
                                                                       max_size=2)), min_size=1, max_size=8)


@st.composite
def fuzzed_batch(draw) -> bytes:
    fields = draw(records)
    deltas = list(range(len(fields)))
    if draw(st.integers(0, 4)) == 0:
        deltas = draw(st.permutations(deltas))
    encoded = [record(delta, key, value, headers=tuple(headers), timestamp_delta=draw(st.integers(-10, 10)))
               for delta, (key, value, headers) in zip(deltas, fields)]
    body = bytearray(b"".join(encoded))
    for _ in range(draw(st.integers(0, 3)) if body else 0):
        body[draw(st.integers(0, len(body) - 1))] = draw(st.integers(0, 255))
    count = draw(st.sampled_from([len(fields), len(fields), len(fields) - 1, len(fields) + 1]))
    return batch(bytes(body), records_count=max(count, 1), compression=draw(st.sampled_from(list(CompressionType))))


def test_fuzzed_batches_are_answered_and_what_is_stored_stays_whole(broker):
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(raw=fuzzed_batch(), topic=st.sampled_from(sorted(TOPICS)))
    def send(raw, topic):
        client = RawClient(broker.bootstrap)
        try:
            answer = produce(client, topic, raw)
        finally:
            client.close()
        assert ErrorCode(answer.error_code) in ANSWERS

    send()
    client = RawClient(broker.bootstrap)
    try:
        for topic in TOPICS:
            offset = 0
            while batches := list(iter_batches(fetch(client, topic, offset, max_bytes=1 << 20).records or b"")):
                for stored in batches:
                    assert isinstance(stored, RecordBatch) and stored.crc_is_valid()
                    validate_records(stored, LENIENT, int(time.time() * 1000))
                    offset = stored.next_offset
    finally:
        client.close()
    with open(broker.stderr_path, errors="replace") as log:
        assert "internal error" not in log.read()
