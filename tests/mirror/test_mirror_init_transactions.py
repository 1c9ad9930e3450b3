"""An exactly-once mirror whose target's transaction coordinator does not answer waits for it, as
MirrorMaker 2's producer may call initTransactions again after a timeout: init_transactions is
retried with backoff (logged) while its error is retriable, and ends when the mirror is stopped."""
from __future__ import annotations

import logging
import socket
import threading

from confluent_kafka import Producer

from mirror.clients import init_transactions


def test_init_transactions_that_times_out_is_retried_with_backoff_until_the_mirror_stops(caplog):
    with socket.socket() as unused:  # a port nothing listens on: no coordinator ever answers
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "transactional.id": "mirror-test-0",
                         "log_level": 0})
    stopping = threading.Event()
    stopper = threading.Timer(4.0, stopping.set)
    stopper.start()
    try:
        with caplog.at_level(logging.WARNING, logger="mirror"):
            assert init_transactions(producer, "flow A->B task 0", stopping, attempt_timeout_s=1.0) is False
    finally:
        stopper.cancel()
    retries = [r.getMessage() for r in caplog.records if "init_transactions" in r.getMessage()]
    assert len(retries) >= 2, retries
    assert all(m.startswith("flow A->B task 0: init_transactions: ") and "retrying in" in m for m in retries)
    assert "retrying in 0.5 s" in retries[0] and "retrying in 1.0 s" in retries[1], "the backoff doubles"
