"""Verifying a partition log against its offsets agrees with a WGL linearizability search."""
from __future__ import annotations

import random

from spark_validation.linearizability import LogOp, verify, wgl_search

HISTORIES = 300
OPS_MAX = 7


def random_log_history(rng: random.Random) -> list[LogOp]:
    """Appends at offsets 0..n-1 (sometimes shuffled against real time) and reads of prefixes."""
    n = rng.randint(1, OPS_MAX)
    ops, t = [], 0
    offsets = list(range(n))
    if rng.random() < 0.3:
        rng.shuffle(offsets)
    appended_by_offset = {}
    for i in range(n):
        invoke = t + rng.randint(0, 3)
        op = LogOp(i, invoke, invoke + rng.randint(1, 6), value=100 + i, offset=offsets[i])
        appended_by_offset[offsets[i]] = op
        ops.append(op)
        t = invoke
    for j in range(rng.randint(0, 3)):
        m = rng.randrange(n)
        invoke = rng.randint(0, t + 4)
        reads = tuple((o, appended_by_offset[o].value) for o in range(rng.randint(0, m), m + 1))
        ops.append(LogOp(n + j, invoke, invoke + rng.randint(1, 6), reads=reads))
    return ops


def test_verification_agrees_with_search():
    rng = random.Random(11)
    outcomes = {True: 0, False: 0}
    for _ in range(HISTORIES):
        ops = random_log_history(rng)
        linearizable = verify(ops) is None
        assert linearizable == wgl_search(ops), ops
        outcomes[linearizable] += 1
    assert min(outcomes.values()) > HISTORIES // 10  # both outcomes are well exercised


def test_counterexamples_are_minimal_pairs():
    a = LogOp(1, 0, 10, value=7, offset=1)
    b = LogOp(2, 20, 30, value=8, offset=0)
    assert verify([a, b]) == ("realtime-order", a, b)
    read = LogOp(3, 0, 5, reads=((0, 8),))
    assert verify([b, read]) == ("future-read", b, read)
    assert verify([LogOp(4, 0, 1, value=1, offset=0), LogOp(5, 0, 1, reads=((0, 2),))])[0] == "inconsistent-offsets"
    assert verify([LogOp(6, 0, 10, value=1, offset=0), LogOp(7, 5, 6, value=2, offset=1)]) is None
