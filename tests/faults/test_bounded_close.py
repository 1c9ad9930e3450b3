"""kspec/ops/rdkafka.py close_within, the one bounded close of the fault harness and the mirror:
clients close side by side and the caller waits at most the bound for all of them together, so a
close that never returns (librdkafka waiting for a coordinator after faults) cannot hold up the
end of a run, and N stuck closes cost one bound, not N."""
import threading
import time

from kspec.ops.rdkafka import close_within

BOUND_S = 0.5


class _Client:
    """Stands in for a client's close() only: it returns at once, or waits on `release` as
    librdkafka's close has been seen to wait for minutes."""

    def __init__(self, blocks: bool) -> None:
        self.blocks = blocks
        self.release = threading.Event()
        self.closed = threading.Event()
        self.entered = threading.Event()
        self.thread_name = None

    def close(self) -> None:
        self.thread_name = threading.current_thread().name
        self.entered.set()
        if self.blocks:
            self.release.wait()
        self.closed.set()


def test_stuck_closes_together_cost_one_bound_and_the_others_close():
    stuck = [_Client(blocks=True) for _ in range(3)]
    quick = _Client(blocks=False)
    started_s = time.monotonic()
    close_within({"reader": quick, "1": stuck[0], "2": stuck[1], "3": stuck[2]}, BOUND_S)
    waited_s = time.monotonic() - started_s
    try:
        assert BOUND_S * 0.9 <= waited_s < BOUND_S * 2, waited_s  # one bound for all three stuck closes
        assert quick.closed.is_set() and quick.thread_name == "close-reader"
        assert not any(c.closed.is_set() for c in stuck)  # left to their daemon threads
        assert all(c.entered.wait(10) for c in stuck)
        assert [c.thread_name for c in stuck] == ["close-1", "close-2", "close-3"]
    finally:
        for c in stuck:
            c.release.set()


def test_closes_that_return_are_not_waited_out():
    clients = {str(i): _Client(blocks=False) for i in range(3)}
    started_s = time.monotonic()
    close_within(clients, 30.0)
    assert time.monotonic() - started_s < 5.0
    assert all(c.closed.is_set() for c in clients.values())
