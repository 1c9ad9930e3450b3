"""The record walk in C (reference/protocol/_record_walk.c) is never more lenient than the Python
walk it stands in front of: whatever it calls clean, validate_records accepts when it walks alone.
Hypothesis builds batches (well formed, then with bytes flipped, cut or inserted) and both walks
judge them."""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference.protocol import validator
from reference.protocol.errors import KafkaError
from reference.protocol.record_batch import RECORD_BATCH_OVERHEAD
from reference.protocol.records import RecordBatch
from reference.protocol.validator import ValidationRules, validate_records

from .batches import batch, record

pytestmark = pytest.mark.skipif(validator.records_clean is None,
                                reason="reference/protocol/_record_walk.c is not built (python setup.py build_ext --inplace)")

HOUR_MS = 3600 * 1000
NOW_MS = int(time.time() * 1000)

fields = st.binary(max_size=20) | st.none()
records = st.lists(st.tuples(fields, fields, st.integers(-2 * HOUR_MS, 2 * HOUR_MS),
                             st.lists(st.tuples(st.binary(max_size=5) | st.none(), fields), max_size=3)),
                   min_size=1, max_size=20)
rules = st.builds(ValidationRules, max_message_bytes=st.just(1 << 20), compacted=st.booleans(),
                  log_append_time=st.booleans(), timestamp_before_max_ms=st.sampled_from([HOUR_MS, (1 << 63) - 1]),
                  timestamp_after_max_ms=st.sampled_from([HOUR_MS, 0]))


def python_walk_accepts(raw: bytes, batch_rules: ValidationRules) -> bool:
    walk, validator.records_clean = validator.records_clean, None
    try:
        validate_records(RecordBatch(raw), batch_rules, NOW_MS)
        return True
    except KafkaError:
        return False
    finally:
        validator.records_clean = walk


def c_walk_says_clean(raw: bytes, batch_rules: ValidationRules) -> bool:
    batch_view = RecordBatch(raw)
    body = memoryview(raw)[RECORD_BATCH_OVERHEAD:]
    base_timestamp = batch_view.base_timestamp
    return validator.records_clean(body, batch_view.records_count,
                                   max(NOW_MS - batch_rules.timestamp_before_max_ms - base_timestamp, -(1 << 63)),
                                   NOW_MS + batch_rules.timestamp_after_max_ms - base_timestamp,
                                   not batch_rules.log_append_time, batch_rules.compacted)


def encoded(generated) -> list[bytes]:
    return [record(index, key, value, timestamp_delta=delta, headers=tuple(headers))
            for index, (key, value, delta, headers) in enumerate(generated)]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records, rules)
def test_the_c_walk_agrees_on_batches_as_producers_write_them(generated, batch_rules):
    raw = batch(encoded(generated), base_timestamp_ms=NOW_MS)
    assert c_walk_says_clean(raw, batch_rules) == python_walk_accepts(raw, batch_rules)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records, rules, st.data())
def test_what_the_c_walk_calls_clean_the_python_walk_accepts(generated, batch_rules, data):
    body = bytearray(b"".join(encoded(generated)))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(body)))
        match data.draw(st.sampled_from(["flip", "cut", "insert", "varint"])):
            case "flip" if position < len(body):
                body[position] = data.draw(st.integers(0, 255))
            case "cut":
                del body[position:]
            case "insert":
                body[position:position] = data.draw(st.binary(min_size=1, max_size=4))
            case "varint":  # a long or overlong varint where a short one was
                body[position:position + 1] = data.draw(st.sampled_from([b"\x80\x00", b"\xff" * 9 + b"\x01",
                                                                          b"\xff" * 10 + b"\x00", b"\xfe\xff\xff\xff\x0f"]))
    records_count = len(generated) + data.draw(st.integers(-1, 1))
    raw = batch(bytes(body), records_count=max(records_count, 1), base_timestamp_ms=NOW_MS)
    if c_walk_says_clean(raw, batch_rules):
        assert python_walk_accepts(raw, batch_rules)


def test_a_batch_of_100_000_records_is_walked_in_c_not_in_python():
    raw = batch([record(index, None, b"v" * 90) for index in range(100_000)])
    rules_lenient = ValidationRules(1 << 24, False, False, (1 << 63) - 1, HOUR_MS)
    def cpu_s() -> float:
        started = time.process_time()
        validate_records(RecordBatch(raw), rules_lenient, int(time.time() * 1000))
        return time.process_time() - started
    # the best of three: on a loaded machine one walk's CPU time can grow several times over
    assert min(cpu_s() for _ in range(3)) < 0.02  # C: about 1 ms; the Python walk: about 60
