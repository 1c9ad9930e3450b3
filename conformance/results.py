"""The suite's results as data: one Outcome per test run, and the JSON document of a whole run.

The JSON is what reports/conformance.py renders as the guarantee x client matrix, and what CI
or another tool reads. Its shape:

    {"target": {"bootstrap_servers": ..., "capabilities": "...", "quick": bool, "clients": [...]},
     "started_at": ISO-8601, "duration_s": float,
     "totals": {"passed": n, "failed": n, "skipped": n},
     "tests": [{"test": name, "area": area, "guarantees": [ids], "client": column,
                "outcome": "passed|failed|skipped", "message": one line or "", "details": text,
                "duration_s": float, "reproduce": command}],
     "api_coverage": [{"api_key": n, "name": "FETCH", "advertised": [min, max], "answered": [versions],
                       "failed": {version: finding}, "not_probed": {version: why}}]}

api_coverage is empty unless the run included test_every_advertised_api_version_is_answered.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

OUTCOMES = ("passed", "failed", "skipped")
MESSAGE_CHARS_MAX = 400
DETAILS_CHARS_MAX = 4000


@dataclass
class Outcome:
    test: str  # node name, e.g. test_round_trip[kcat]
    area: str  # the suite module, e.g. produce
    guarantees: list[str]
    client: str  # a client name, or "wire" for the raw protocol layer
    outcome: str
    message: str = ""
    details: str = ""
    duration_s: float = 0.0
    reproduce: str = ""

    def __post_init__(self) -> None:
        assert self.outcome in OUTCOMES, self.outcome
        self.message = self.message[:MESSAGE_CHARS_MAX]
        self.details = self.details[-DETAILS_CHARS_MAX:]


@dataclass
class RunResult:
    target: dict
    started_at: str
    duration_s: float = 0.0
    tests: list[Outcome] = field(default_factory=list)
    api_coverage: list[dict] = field(default_factory=list)

    def totals(self) -> dict[str, int]:
        return {outcome: sum(1 for t in self.tests if t.outcome == outcome) for outcome in OUTCOMES}

    def to_json(self) -> dict:
        return {"target": self.target, "started_at": self.started_at, "duration_s": round(self.duration_s, 2),
                "totals": self.totals(), "tests": [asdict(t) for t in self.tests], "api_coverage": self.api_coverage}

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")


def load(path: Path) -> dict:
    document = json.loads(Path(path).read_text(encoding="utf-8"))
    assert {"target", "tests", "totals"} <= set(document), f"{path} is not a conformance result"
    return document
