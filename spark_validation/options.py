"""How a run was configured, as far as the verdict depends on it.

Read from run.json beside a kspec history, or inferred from the history itself:
- sub_via: how consumers got partitions. With "subscribe", rebalances may move a
  consumer between polls, so poll-skip and nonmonotonic-poll are allowed (as in Jepsen).
- ww_deps: whether write-write dependencies are inferred from the log order. When they
  are, a G1c cycle through a write-write edge is allowed (Kafka does not isolate writes
  between transactions); a G1c made only of write-read edges is always a violation.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

SUB_VIA = ("assign", "subscribe")


@dataclass(frozen=True)
class RunOptions:
    sub_via: frozenset[str] = frozenset({"assign"})
    ww_deps: bool = True
    acks: str = "all"   # the producers' acks: with "1" losses are judged by DUR-2 (spark_validation/acks.py)
    topic_config: tuple[tuple[str, str], ...] = ()  # with cleanup.policy=compact, RET-1 (spark_validation/retention.py)

    def __post_init__(self) -> None:
        assert self.sub_via <= set(SUB_VIA), self.sub_via

    @classmethod
    def from_json(cls, path: Path) -> "RunOptions":
        data = json.loads(path.read_text())
        unknown = set(data) - {"sub_via", "ww_deps", "acks", "topic_config"}
        if unknown:
            raise ValueError(f"{path}: unknown option(s) {', '.join(sorted(unknown))}; known: sub_via, ww_deps, acks, topic_config")
        return cls(frozenset(data.get("sub_via", ["assign"])), bool(data.get("ww_deps", True)),
                   str(data.get("acks", "all")), tuple(sorted(data.get("topic_config", {}).items())))

    @property
    def compacted(self) -> bool:
        return "compact" in dict(self.topic_config).get("cleanup.policy", "")

    def to_json(self) -> dict:
        return {"sub_via": sorted(self.sub_via), "ww_deps": self.ww_deps, "acks": self.acks,
                **({"topic_config": dict(self.topic_config)} if self.topic_config else {})}
