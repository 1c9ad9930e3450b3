"""A lane whose stop never returns (a client call that blocks for good) is given up after
LANE_STOP_TIMEOUT_S: the run goes on, the other lanes stop as usual, and the lane is reported
skipped with where it was waiting. steps.jsonl shows the step it never ended."""
import threading
import time
import types

from faults import lanes as lanes_module
from faults.lanes import SideLanes
from faults.run import _Steps, unfinished_steps


class _Lane:
    """Stands in for a lane's workload only: its stop() waits on `release`, as a client call
    that does not return would."""

    def __init__(self, name: str, blocks: bool) -> None:
        self.lane = types.SimpleNamespace(name=name, workload=types.SimpleNamespace(txn=False))
        self.release = threading.Event()
        self.stopped = False
        self.aborted = False

        def stop() -> None:
            if blocks:
                self.release.wait()
            self.stopped = True
        self.workload = types.SimpleNamespace(stop=stop)

    def abort(self) -> None:
        self.aborted = True


def test_a_lane_that_does_not_stop_is_given_up_and_named(tmp_path, monkeypatch):
    monkeypatch.setattr(lanes_module, "LANE_STOP_TIMEOUT_S", 1.0)
    stuck, fine = _Lane("mirror", blocks=True), _Lane("acks1", blocks=False)
    side_lanes = SideLanes([])
    side_lanes.lanes = [stuck, fine]
    steps = _Steps(tmp_path / "steps.jsonl")
    started_s = time.monotonic()
    try:
        side_lanes.stop(steps)
        assert time.monotonic() - started_s < 10
        assert fine.stopped and not fine.aborted and fine in side_lanes.lanes
        assert stuck.aborted and stuck not in side_lanes.lanes
        why = side_lanes.skipped["mirror"]
        assert why.startswith("did not stop within 1 s") and "test_lane_stop_bound.py" in why, why
        assert unfinished_steps(tmp_path) == ["lane mirror stops"]
    finally:
        stuck.release.set()
